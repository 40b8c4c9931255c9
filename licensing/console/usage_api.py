"""GET /manage/v1/usage: the usage page's aggregates as JSON (licensing.console.usage_report),
scoped like the admin: an institution's admins and reviewers get their institution (another
institution's id is 400), superusers every institution or the one they name. Errors are DRF's
shapes (`{"since": ["..."]}`)."""

from __future__ import annotations

from typing import cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from ..access.scoping import scope_of, scoped
from ..models import Institution, License, Transaction
from .usage_report import MAX_DAYS, OUTCOMES, RangeError, resolve_range, usage_report

DATE_FORMATS = ["%Y-%m-%d"]


class UsageQuerySerializer(serializers.Serializer):
    # allow_null: an empty parameter (`?since=`) means the default, as on the admin page.
    since = serializers.DateField(
        required=False,
        allow_null=True,
        input_formats=DATE_FORMATS,
        help_text="First UTC day, YYYY-MM-DD (included); default: 30 days before `until`",
    )
    until = serializers.DateField(
        required=False,
        allow_null=True,
        input_formats=DATE_FORMATS,
        help_text=f"UTC day after the last one, YYYY-MM-DD (not included); default: tomorrow. "
        f"At most {MAX_DAYS} days after `since`",
    )
    institution = serializers.PrimaryKeyRelatedField(
        queryset=Institution.objects.none(),
        required=False,
        allow_null=True,
        help_text="An institution's id (superusers; others may only give their own)",
    )
    license = serializers.PrimaryKeyRelatedField(
        queryset=License.objects.none(),
        required=False,
        allow_null=True,
        help_text="Only this license's rows",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            scope = scope_of(request.user)
            fields = cast(dict[str, serializers.PrimaryKeyRelatedField], self.fields)
            # (djangorestframework-stubs take `queryset` for a Manager descriptor here.)
            fields["institution"].queryset = scoped(Institution.objects.all(), scope)  # type: ignore[arg-type]
            fields["license"].queryset = scoped(License.objects.all(), scope)  # type: ignore[arg-type]

    def validate(self, attrs):
        try:
            attrs["since"], attrs["until"] = resolve_range(attrs.get("since"), attrs.get("until"))
        except RangeError as exc:
            raise serializers.ValidationError({exc.field: [exc.message]}) from None
        lic, institution = attrs.get("license"), attrs.get("institution")
        if lic is not None and institution is not None and lic.institution_id != institution.pk:
            raise serializers.ValidationError(
                {"license": ["This license belongs to another institution."]}
            )
        return attrs


class SeriesSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="Service, model or status class")
    other = serializers.BooleanField(help_text="The sum of the models outside the top ones")
    total_credits = serializers.IntegerField()
    total_requests = serializers.IntegerField()
    credits = serializers.ListField(child=serializers.IntegerField(), help_text="Per day")
    requests = serializers.ListField(child=serializers.IntegerField(), help_text="Per day")


class DailySerializer(serializers.Serializer):
    credits = serializers.ListField(child=serializers.IntegerField())
    requests = serializers.ListField(child=serializers.IntegerField())


class TotalsSerializer(serializers.Serializer):
    credits = serializers.IntegerField()
    requests = serializers.IntegerField()
    requests_by_outcome = serializers.DictField(
        child=serializers.IntegerField(), help_text=f"Keys: {', '.join(OUTCOMES)}"
    )


class TopRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    # A field named like Field.label: DRF's metaclass takes declared fields out of the class.
    label = serializers.CharField(  # type: ignore[assignment]
        help_text="License name, API key prefix with its name, or end-user subject"
    )
    credits = serializers.IntegerField()
    requests = serializers.IntegerField()


class TopSerializer(serializers.Serializer):
    licenses = TopRowSerializer(many=True)
    api_keys = TopRowSerializer(many=True)
    end_users = TopRowSerializer(many=True)


# One report, not a list of them (the view is a viewset's `list`, so that the router, and with
# it the API's root, knows it).
@extend_schema_serializer(many=False)
class UsageReportSerializer(serializers.Serializer):
    since = serializers.DateField()
    until = serializers.DateField(help_text="Not included")
    institution = serializers.IntegerField(allow_null=True)
    license = serializers.IntegerField(allow_null=True)
    unit = serializers.CharField(help_text="micro_credits")
    days = serializers.ListField(child=serializers.DateField(), help_text="The UTC days")
    totals = TotalsSerializer()
    total = DailySerializer(help_text="Per day, aligned with `days`")
    by_service = SeriesSerializer(many=True)
    by_model = SeriesSerializer(many=True, help_text="The top 8 models by credits, then other")
    by_outcome = SeriesSerializer(many=True, help_text="Every status class, in a fixed order")
    top = TopSerializer(help_text="The top 10 by credits of the range")


class CanViewTransactions(BasePermission):
    def has_permission(self, request, view):
        return scope_of(request.user).allows(Transaction, "view")


EXAMPLE = {
    "since": "2026-03-01",
    "until": "2026-03-03",
    "institution": 1,
    "license": None,
    "unit": "micro_credits",
    "days": ["2026-03-01", "2026-03-02"],
    "totals": {
        "credits": 1500,
        "requests": 4,
        "requests_by_outcome": {"success": 3, "client_error": 0, "denied": 1, "failure": 0},
    },
    "total": {"credits": [1000, 500], "requests": [3, 1]},
    "by_service": [
        {
            "name": "chat_completions",
            "other": False,
            "total_credits": 1500,
            "total_requests": 4,
            "credits": [1000, 500],
            "requests": [3, 1],
        }
    ],
    "by_model": [],
    "by_outcome": [],
    "top": {
        "licenses": [{"id": 1, "label": "demo", "credits": 1500, "requests": 4}],
        "api_keys": [],
        "end_users": [],
    },
}


class UsageViewSet(viewsets.ViewSet):
    """Credits and requests per day (total, by service, by model, by status class) and the top
    licenses, API keys and end users by credits, over a range of UTC days."""

    permission_classes = [CanViewTransactions]

    @extend_schema(
        parameters=[UsageQuerySerializer],
        responses={
            200: UsageReportSerializer,
            400: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="A bad parameter: its name with the messages",
                examples=[
                    OpenApiExample(
                        "Too long", value={"until": [f"The range is at most {MAX_DAYS} days."]}
                    )
                ],
            ),
            401: OpenApiResponse(description="Not authenticated"),
            403: OpenApiResponse(description="Not a superuser, institution admin or reviewer"),
        },
        examples=[
            OpenApiExample("Two days", value=EXAMPLE, response_only=True, status_codes=["200"])
        ],
    )
    def list(self, request):
        query = UsageQuerySerializer(data=request.query_params, context={"request": request})
        query.is_valid(raise_exception=True)
        params = query.validated_data
        scope = scope_of(request.user)
        institution, lic = params.get("institution"), params.get("license")
        # Staff of an institution always get theirs: say which in the answer.
        institution_id = institution.pk if institution else scope.institution_id
        license_id = lic.pk if lic else None
        report = usage_report(
            scoped(Transaction.objects.all(), scope),
            params["since"],
            params["until"],
            institution_id=institution_id,
            license_id=license_id,
        )
        body = {**report.as_dict(), "institution": institution_id, "license": license_id}
        return Response(UsageReportSerializer(body).data)
