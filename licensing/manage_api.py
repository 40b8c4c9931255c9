"""The management API, /manage/v1/ (djangorestframework): licenses with their budget usage,
API keys (create, revoke, rotate; the key is shown once), end users. For institution admins'
scripts and LMS integrations; scoped exactly like the admin (licensing.scoping): a row of
another institution is a 404. Errors are DRF's own shapes (this is not the /v1 contract).
Authentication: `Authorization: Token <token>` (DRF tokens) or the admin's session."""

from __future__ import annotations

import django_filters
from django.urls import include, path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter

from .credentials import api_key_create
from .models import ApiKey, EndUser, JwtIssuer, License, LicenseType
from .scoping import scope_of, scoped
from .services import api_key_revoke, api_key_rotate
from .usage import licenses_usage

# What each view action needs of the role (licensing.scoping.ROLE_PERMISSIONS).
ACTION_NEEDS = {
    "list": ("view",),
    "retrieve": ("view",),
    "create": ("add",),
    "revoke": ("change",),
    "rotate": ("add", "change"),
}


class ScopedPermission(BasePermission):
    def has_permission(self, request, view):
        scope = scope_of(request.user)
        if view.action is None:  # a method this path does not route: let DRF answer 405
            return scope.superuser or scope.role is not None
        model = view.queryset.model
        return all(scope.allows(model, need) for need in ACTION_NEEDS.get(view.action, ("x",)))


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class ScopedViewSet(viewsets.GenericViewSet):
    permission_classes = [ScopedPermission]
    pagination_class = NewestFirst

    def get_queryset(self):
        return scoped(super().get_queryset(), scope_of(self.request.user))


def _scoped_choices(model):
    def queryset(request):
        if request is None:
            return model.objects.none()
        return scoped(model.objects.all(), scope_of(request.user))

    return queryset


# --- licenses ----------------------------------------------------------------------------------


class UsageListSerializer(serializers.ListSerializer):
    """Reads the current window's usage of a whole page of licenses in one query."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        self.child.context["usage"] = licenses_usage(items)
        return super().to_representation(items)


class UsageSerializer(serializers.Serializer):
    unit = serializers.CharField()
    period = serializers.CharField()
    window_start = serializers.DateTimeField(allow_null=True)
    resets_at = serializers.DateTimeField(allow_null=True)
    limit = serializers.IntegerField(allow_null=True)
    spent = serializers.IntegerField(help_text="All wallets of the window together")
    remaining = serializers.IntegerField(
        allow_null=True,
        help_text="Pooled: left in the license's wallet; per user: left for the holder "
        "closest to the limit; null: unlimited",
    )
    holders = serializers.IntegerField(help_text="Wallets opened in the window")


class LicenseSerializer(serializers.ModelSerializer):
    institution = serializers.CharField(source="institution.name", read_only=True)
    license_type = serializers.CharField(source="license_type.name", read_only=True)
    usage = serializers.SerializerMethodField()

    class Meta:
        model = License
        list_serializer_class = UsageListSerializer
        fields = (
            "id",
            "name",
            "institution",
            "license_type",
            "active",
            "budget_unit",
            "budget_strategy",
            "budget_period",
            "budget_limit",
            "alert_threshold_percent",
            "usage",
            "created_at",
        )

    @extend_schema(responses=UsageSerializer)
    def get_usage(self, obj) -> dict:
        usage = self.context.get("usage", {}).get(obj.pk)
        if usage is None:
            usage = licenses_usage([obj])[obj.pk]
        return UsageSerializer(usage.as_dict()).data


class LicenseFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    license_type = django_filters.ModelChoiceFilter(queryset=_scoped_choices(LicenseType))

    class Meta:
        model = License
        fields = ("name", "active", "budget_period", "budget_strategy", "license_type")


class LicenseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """Licenses of the caller's institution, with spent/remaining in the current window."""

    queryset = License.objects.select_related("institution", "license_type")
    serializer_class = LicenseSerializer
    filterset_class = LicenseFilter


# --- API keys ----------------------------------------------------------------------------------


class ApiKeySerializer(serializers.ModelSerializer):
    license = serializers.PrimaryKeyRelatedField(queryset=License.objects.none())
    license_name = serializers.CharField(source="license.name", read_only=True)

    class Meta:
        model = ApiKey
        fields = (
            "id",
            "prefix",
            "name",
            "license",
            "license_name",
            "active",
            "expires_at",
            "last_used_at",
            "created_at",
        )
        read_only_fields = ("id", "prefix", "active", "last_used_at", "created_at")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["license"].queryset = scoped(License.objects.all(), scope_of(request.user))


class NewApiKeySerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The full key: shown once, never again")

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")


class ApiKeyFilter(django_filters.FilterSet):
    license = django_filters.ModelChoiceFilter(queryset=_scoped_choices(License))
    name = django_filters.CharFilter(lookup_expr="icontains")
    used_since = django_filters.IsoDateTimeFilter(field_name="last_used_at", lookup_expr="gte")

    class Meta:
        model = ApiKey
        fields = ("license", "active", "name", "prefix", "used_since")


class ApiKeyViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, ScopedViewSet
):
    """API keys: create (the full key is in the answer, once), revoke, rotate, list."""

    queryset = ApiKey.objects.select_related("license")
    serializer_class = ApiKeySerializer
    filterset_class = ApiKeyFilter

    @extend_schema(request=ApiKeySerializer, responses={201: NewApiKeySerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        row, key = api_key_create(
            license=data["license"], name=data.get("name", ""), expires_at=data.get("expires_at")
        )
        return self._created(row, key)

    def _created(self, row, key):
        row.key = key
        body = NewApiKeySerializer(row, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiKeySerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Deactivate the key (it stops authenticating within the cache TTL in every process)."""
        row = self.get_object()
        api_key_revoke(key_id=row.pk)
        row.refresh_from_db()
        return Response(self.get_serializer(row).data)

    @extend_schema(request=None, responses={201: NewApiKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """A new key (same license, name and expiry) in the answer, once; the old one revoked."""
        row = self.get_object()
        new_row, key = api_key_rotate(key_id=row.pk)
        return self._created(new_row, key)


# --- end users ---------------------------------------------------------------------------------


class EndUserSerializer(serializers.ModelSerializer):
    issuer = serializers.CharField(source="issuer.issuer", read_only=True)
    license_name = serializers.CharField(source="license.name", read_only=True)

    class Meta:
        model = EndUser
        fields = ("id", "subject", "issuer", "license", "license_name", "created_at")


class EndUserFilter(django_filters.FilterSet):
    license = django_filters.ModelChoiceFilter(queryset=_scoped_choices(License))
    issuer = django_filters.ModelChoiceFilter(queryset=_scoped_choices(JwtIssuer))

    class Meta:
        model = EndUser
        fields = ("license", "issuer", "subject")


class EndUserViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """People known from their JWTs (created on their first valid token)."""

    queryset = EndUser.objects.select_related("issuer", "license")
    serializer_class = EndUserSerializer
    filterset_class = EndUserFilter


router = DefaultRouter(trailing_slash=False)
router.register("licenses", LicenseViewSet, basename="manage-license")
router.register("keys", ApiKeyViewSet, basename="manage-key")
router.register("end-users", EndUserViewSet, basename="manage-end-user")

urlpatterns = [
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="manage-openapi"),
    path("usage", include("licensing.usage_api")),
    path("", include(router.urls)),
]
