"""The management API, /manage/v1/ (djangorestframework): licenses with their budget usage,
API keys (create, revoke, rotate; the key is shown once), end users, and the ledger
(transactions, with licensing.console.review's filters and CSV export), and, for superusers only,
the catalog's connections with their circuits. For institution admins' scripts and LMS
integrations; scoped exactly like the admin (licensing.access.scoping): a row of another
institution is a 404. Errors are DRF's own shapes (this is not the /v1 contract).
Authentication: a management token as `Authorization: Bearer <token>` or `Token <token>`
(licensing.console.manage_auth), or the admin's session. Described by /manage/v1/openapi.json
(drf-spectacular) and its page, /manage/v1/docs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import django_filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from catalog.circuit import CLOSED, HALF_OPEN, OPEN
from catalog.models import Connection, parse_tags
from catalog.selectors import ConnectionHealth, connections_health, shown_base_url, tagged

from ..access.changes import audit_api_key
from ..access.credentials import api_key_create
from ..access.scoping import scope_of, scoped
from ..access.services import api_key_revoke, api_key_rotate
from ..ledger.record import LEDGER_COLUMNS
from ..models import (
    ApiKey,
    AuditEvent,
    Course,
    EndUser,
    JwtIssuer,
    License,
    LicenseType,
    Transaction,
)
from .audit_log import AUDIT_CSV_COLUMNS
from .manage_parsers import InstantModelSerializer
from .money import institution_rate
from .review import (
    CSV_COLUMNS,
    InstantFilter,
    TransactionFilter,
    csv_response,
    export_filename,
    scoped_ledger,
)
from .usage import licenses_usage

# What each view action needs of the role (licensing.access.scoping.ROLE_PERMISSIONS).
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
    ordering: str | tuple[str, ...] = "-id"
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
        # many=True sets `child`, whose context is a dict (typed Optional and Mapping).
        self.child.context["usage"] = licenses_usage(items)  # type: ignore[union-attr,index]
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


class ApiKeySerializer(InstantModelSerializer):
    license = serializers.PrimaryKeyRelatedField(queryset=License.objects.none())
    license_name = serializers.CharField(source="license.name", read_only=True)
    # `standard`, or `front_end`: a chat front end acting for the students its requests name
    # (docs/open-webui.md); with a `course`, only within that course of the license.
    kind = serializers.ChoiceField(choices=ApiKey.Kind.choices, default=ApiKey.Kind.STANDARD)
    course = serializers.PrimaryKeyRelatedField(
        queryset=Course.objects.none(), required=False, allow_null=True
    )

    class Meta:
        model = ApiKey
        fields: tuple[str, ...] = (
            "id",
            "prefix",
            "kind",
            "name",
            "license",
            "license_name",
            "course",
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
            scope = scope_of(request.user)
            licenses = cast(serializers.PrimaryKeyRelatedField, self.fields["license"])
            # (djangorestframework-stubs take `queryset` for a Manager descriptor here.)
            licenses.queryset = scoped(License.objects.all(), scope)  # type: ignore[arg-type]
            courses = cast(serializers.PrimaryKeyRelatedField, self.fields["course"])
            courses.queryset = scoped(Course.objects.all(), scope)  # type: ignore[arg-type]

    def validate(self, attrs):
        course, license = attrs.get("course"), attrs.get("license")
        if course is not None and license is not None and course.license_id != license.pk:
            raise serializers.ValidationError({"course": "The course is not on this license."})
        return attrs


class NewApiKeySerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The full key: shown once, never again")

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key")


class ApiKeyFilter(django_filters.FilterSet):
    license = django_filters.ModelChoiceFilter(queryset=_scoped_choices(License))
    name = django_filters.CharFilter(lookup_expr="icontains")
    used_since = InstantFilter(field_name="last_used_at", lookup_expr="gte")

    class Meta:
        model = ApiKey
        fields = ("license", "kind", "active", "name", "prefix", "used_since")


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
            license=data["license"],
            name=data.get("name", ""),
            expires_at=data.get("expires_at"),
            kind=data.get("kind", ApiKey.Kind.STANDARD),
            course=data.get("course"),
        )
        audit_api_key(row, created=True, via="management API", request=request)
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
        was_active = row.active
        api_key_revoke(key_id=row.pk)
        row.refresh_from_db()
        if was_active:
            audit_api_key(row, created=False, via="management API", request=request)
        return Response(self.get_serializer(row).data)

    @extend_schema(request=None, responses={201: NewApiKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """A new key (same license, name and expiry) in the answer, once; the old one revoked."""
        row = self.get_object()
        new_row, key = api_key_rotate(key_id=row.pk)
        rotated = {"rotated": f"api_key:{row.pk}"}
        audit_api_key(new_row, created=True, via="management API", request=request, extra=rotated)
        if row.active:
            audit_api_key(row, created=False, via="management API", request=request, extra=rotated)
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


# --- the ledger --------------------------------------------------------------------------------


class TransactionSerializer(serializers.ModelSerializer):
    answer_id = serializers.CharField(source="upstream_id", help_text="The provider's answer id")
    institution = serializers.CharField(source="license.institution.name")
    license_name = serializers.CharField(source="license.name")
    api_key_prefix = serializers.CharField(source="api_key.prefix", default=None, allow_null=True)
    end_user_subject = serializers.CharField(
        source="end_user.subject", default=None, allow_null=True
    )
    course_code = serializers.CharField(
        source="course.code",
        default=None,
        allow_null=True,
        help_text="The course that paid too, if any",
    )
    status = serializers.IntegerField(source="status_code", help_text="The HTTP status answered")
    cost = serializers.SerializerMethodField(
        help_text="The credits as money at the institution's rate, e.g. `0.25 EUR`"
    )

    class Meta:
        model = Transaction
        fields = tuple(column.api for column in LEDGER_COLUMNS if column.api)

    def get_cost(self, obj) -> str:
        return institution_rate(obj.license.institution).format(obj.credits)


class CsvRenderer(BaseRenderer):
    """`?format=csv`: the views stream the CSV themselves
    (licensing.console.review.csv_response); an error answer is rendered as JSON instead (see
    TransactionViewSet.finalize_response)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        raise NotImplementedError("CSV answers are streamed by the view")


class CsvErrorsAsJson(viewsets.GenericViewSet):
    """A view that streams its CSV itself: an error answer keeps DRF's JSON shape."""

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response) and isinstance(
            getattr(request, "accepted_renderer", None), CsvRenderer
        ):
            # Only errors get here with CSV chosen: they keep DRF's JSON shape.
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class LedgerNewestFirst(NewestFirst):
    ordering = ("-created_at", "-id")


CSV_DESCRIPTION = (
    "`csv`: every row of the filtered set (not a page), streamed, with the columns "
    + ", ".join(header for header, _ in CSV_COLUMNS)
    + "; times in ISO 8601 UTC; text a spreadsheet would run as a formula starts with `'`."
)


@extend_schema(
    parameters=[
        OpenApiParameter(
            "format", OpenApiTypes.STR, enum=["json", "csv"], description=CSV_DESCRIPTION
        )
    ]
)
class TransactionViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, CsvErrorsAsJson, ScopedViewSet
):
    """Ledger rows of the caller's institution, newest first, with the review filters; search
    `q`: request-id or answer-id prefix, `key=value` in the metadata, or a bare value."""

    queryset = Transaction.objects.select_related(
        "license__institution", "api_key", "end_user", "course"
    )
    serializer_class = TransactionSerializer
    filterset_class = TransactionFilter
    pagination_class = LedgerNewestFirst
    renderer_classes = [*viewsets.GenericViewSet.renderer_classes, CsvRenderer]

    def get_queryset(self):
        # Scoped by license ids rather than a join (see licensing.console.review.scoped_ledger).
        return scoped_ledger(self.queryset.all(), scope_of(self.request.user))

    @extend_schema(
        responses={
            (200, "application/json"): TransactionSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        }
    )
    def list(self, request, *args, **kwargs):
        if isinstance(request.accepted_renderer, CsvRenderer):
            queryset = self.filter_queryset(self.get_queryset())
            return csv_response(request, queryset, export_filename())
        return super().list(request, *args, **kwargs)

    @extend_schema(
        responses={
            (200, "application/json"): TransactionSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
        }
    )
    def retrieve(self, request, *args, **kwargs):
        if isinstance(request.accepted_renderer, CsvRenderer):
            row = self.get_object()
            return csv_response(request, Transaction.objects.filter(pk=row.pk), export_filename())
        return super().retrieve(request, *args, **kwargs)


# --- the audit log -----------------------------------------------------------------------------


class AuditEventSerializer(serializers.ModelSerializer):
    institution = serializers.CharField(source="institution.name", default=None, allow_null=True)
    actor = serializers.CharField(source="actor_name", help_text="Who acted (kept if they go)")

    class Meta:
        model = AuditEvent
        fields = (
            "id",
            "created_at",
            "institution",
            "actor",
            "action",
            "target",
            "detail",
            "ip",
            "user_agent",
        )


class AuditEventFilter(django_filters.FilterSet):
    action = django_filters.ChoiceFilter(choices=AuditEvent.Action.choices)
    actor = django_filters.CharFilter(field_name="actor_name", max_length=254)
    since = InstantFilter(field_name="created_at", lookup_expr="gte")
    until = InstantFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ("action", "actor", "since", "until")


AUDIT_CSV_DESCRIPTION = (
    "`csv`: every event of the filtered set (not a page), streamed, with the columns "
    + ", ".join(header for header, _ in AUDIT_CSV_COLUMNS)
    + "; times in ISO 8601 UTC."
)


@extend_schema(
    parameters=[
        OpenApiParameter(
            "format", OpenApiTypes.STR, enum=["json", "csv"], description=AUDIT_CSV_DESCRIPTION
        )
    ]
)
class AuditEventViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, CsvErrorsAsJson, ScopedViewSet
):
    """The audit log of the caller's institution (superusers: all), newest first: sign-ins,
    roles, users, API keys, policies, budgets, tokens. Institution admins and superusers only."""

    queryset = AuditEvent.objects.select_related("institution")
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    pagination_class = LedgerNewestFirst
    renderer_classes = [*viewsets.GenericViewSet.renderer_classes, CsvRenderer]

    @extend_schema(
        responses={
            (200, "application/json"): AuditEventSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        }
    )
    def list(self, request, *args, **kwargs):
        if isinstance(request.accepted_renderer, CsvRenderer):
            queryset = self.filter_queryset(self.get_queryset())
            name = f"audit-{datetime.now(UTC):%Y%m%d-%H%M%S}.csv"
            return csv_response(request, queryset, name, columns=AUDIT_CSV_COLUMNS, computed={})
        return super().list(request, *args, **kwargs)


# --- connections (the catalog; superusers only) ------------------------------------------------


class SuperuserOnly(BasePermission):
    """Connections are the catalog's, global to every institution and superuser-only in the
    admin: an institution admin's or a reviewer's token is refused (403)."""

    def has_permission(self, request, view):
        return scope_of(request.user).superuser


class ConnectionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    provider = serializers.CharField(help_text="The provider's slug")
    name = serializers.CharField()
    base_url = serializers.CharField(
        help_text="Scheme, host, port and path only: no user, password, query or fragment"
    )
    weight = serializers.IntegerField(help_text="Share of unpinned traffic; 0: standby")
    tags = serializers.ListField(child=serializers.CharField(), help_text="Data-residency tags")
    active = serializers.BooleanField()
    state = serializers.ChoiceField(
        choices=[CLOSED, OPEN, HALF_OPEN],
        help_text="The circuit: closed (used), open (skipped until `open_until`), half_open "
        "(the cool-down is over: the next request is the probe)",
    )
    failures = serializers.IntegerField(help_text="Retryable failures in a row")
    last_error = serializers.CharField(help_text="Why the last failed attempt failed; '' if none")
    last_error_at = serializers.DateTimeField(allow_null=True)
    open_until = serializers.DateTimeField(
        allow_null=True, help_text="The cool-down's end; null while closed"
    )


def connection_row(connection: Connection, health: ConnectionHealth) -> dict:
    """A connection as the API shows it: never a credential (key, secret, access key id)."""
    return {
        "id": connection.pk,
        "provider": connection.provider.slug,
        "name": connection.name,
        "base_url": shown_base_url(connection.base_url),
        "weight": connection.weight,
        "tags": list(parse_tags(connection.tags)),
        "active": connection.active,
        "state": health.state,
        "failures": health.failures,
        "last_error": health.last_error,
        "last_error_at": health.last_error_at,
        "open_until": None if health.state == CLOSED else health.open_until,
    }


class ConnectionFilter(django_filters.FilterSet):
    provider = django_filters.CharFilter(field_name="provider__slug", max_length=64)
    tag = django_filters.CharFilter(method="filter_tag", max_length=32)
    state = django_filters.ChoiceFilter(
        choices=[(s, s) for s in (CLOSED, OPEN, HALF_OPEN)], method="keep"
    )

    class Meta:
        model = Connection
        fields = ("provider", "active", "tag", "state")

    def filter_tag(self, queryset, name, value):
        return queryset.filter(tagged(value))

    def keep(self, queryset, name, value):
        return queryset  # a circuit's state is not in the database: the view filters on it


class ConnectionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """The catalog's connections with their circuits (state, failures in a row, last error,
    cool-down end), for monitoring scripts; superusers only. Not paginated: a catalog has a
    handful of connections. Credentials are never part of the answer."""

    queryset = Connection.objects.select_related("provider").order_by("provider__slug", "name")
    serializer_class = ConnectionSerializer
    filterset_class = ConnectionFilter
    permission_classes = [SuperuserOnly]
    pagination_class = None

    def list(self, request, *args, **kwargs):
        rows = list(self.filter_queryset(self.get_queryset()))
        health = connections_health(rows)  # every circuit in one read
        wanted = request.query_params.get("state")
        body = [
            connection_row(row, health[row.pk])
            for row in rows
            if not wanted or health[row.pk].state == wanted
        ]
        return Response(self.get_serializer(body, many=True).data)

    def retrieve(self, request, *args, **kwargs):
        row = self.get_object()
        return Response(
            self.get_serializer(connection_row(row, connections_health([row])[row.pk])).data
        )


# --- the docs page -----------------------------------------------------------------------------


class ManageDocsView(SpectacularSwaggerView):
    """`/manage/v1/docs`: Swagger UI over `/manage/v1/openapi.json`, as `/v1/docs` is over
    `/v1/openapi.json`: the same Swagger UI files (django-ninja's, served from the site's static
    files: no CDN, nothing fetched from elsewhere), drf-spectacular's set-up script. "Try it out"
    sends the admin's session with its CSRF header when signed in, or the token given under
    "Authorize" (`Bearer`). The page itself reads no credential: a stray header never breaks it."""

    template_name = "licensing/manage_docs.html"
    url_name = "manage-openapi"
    authentication_classes: list = []

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400:  # (`?format=csv`): DRF's JSON, never a page's template
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)
