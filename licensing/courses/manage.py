"""The management API's courses (/manage/v1/courses, issue 26): a course's settings and exam
switch, its windows, its members (an LMS's roster sync), its keys (shown once) and its
per-student usage. For institution admins (every course of their institution) and teachers
(the courses they teach: licensing.access.scoping), with a session or a management token.

Every change goes through licensing.courses.services (validated, saved through the model
so every worker's course caches clear, audited); a refusal there (a ValidationError naming the
field) is a 400 naming the same field. The views only parse and call.

A student is named by a JSON number (an end user's id) or a JSON string (a subject, the LMS's
user id): licensing.courses.services.student_find."""

from __future__ import annotations

import csv
from typing import Any

import django_filters
from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import Count
from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from core.text import is_storable_json

from ..access.scoping import scope_of, scoped
from ..console.manage_api import (
    CsvErrorsAsJson,
    CsvRenderer,
    NewestFirst,
    ScopedViewSet,
    _scoped_choices,
)
from ..console.manage_parsers import Instant, InstantModelSerializer
from ..console.review import safe_cell
from ..models import ApiKey, Course, CourseMember, CourseWindow, License
from .services import (
    COURSE_FIELDS,
    MEMBER_FIELDS,
    ROSTER_MAX,
    RosterTooSlow,
    course_create,
    course_delete,
    course_key_create,
    course_member_add,
    course_member_remove,
    course_member_update,
    course_roster_sync,
    course_update,
    course_window_add,
    course_window_remove,
    editable_fields,
    student_find,
    student_get_or_create,
)
from .usage import course_usage

# What each view action needs of the role, per model (licensing.access.scoping). A course's
# keys and usage are the course's own: whoever may view the course lists them; whoever may
# change it makes a key for one of its members.
COURSE_ACTION_NEEDS: dict[str, tuple[tuple[type, str], ...]] = {
    "list": ((Course, "view"),),
    "retrieve": ((Course, "view"),),
    "create": ((Course, "add"),),
    "partial_update": ((Course, "change"),),
    "destroy": ((Course, "delete"),),
    "windows": ((CourseWindow, "view"),),
    "window_add": ((CourseWindow, "add"),),
    "window_remove": ((CourseWindow, "delete"),),
    "members": ((CourseMember, "view"),),
    "member_add": ((CourseMember, "add"),),
    "members_sync": ((CourseMember, "add"), (CourseMember, "delete")),
    "member_update": ((CourseMember, "change"),),
    "member_remove": ((CourseMember, "delete"),),
    "keys": ((Course, "view"),),
    "key_create": ((Course, "change"),),
    "usage": ((Course, "view"),),
}


class CoursePermission(BasePermission):
    def has_permission(self, request, view):
        scope = scope_of(request.user)
        if view.action is None:  # a method this path does not route: let DRF answer 405
            return scope.superuser or scope.role is not None
        needs = COURSE_ACTION_NEEDS.get(view.action, ((Course, "x"),))
        return all(scope.allows(model, need) for model, need in needs)


def refused(exc: DjangoValidationError) -> ValidationError:
    """A course service's refusal as DRF's 400: field by field, `__all__` as non_field_errors."""
    if not hasattr(exc, "error_dict"):
        return ValidationError({"non_field_errors": exc.messages})
    return ValidationError(
        {
            ("non_field_errors" if name == NON_FIELD_ERRORS else name): messages
            for name, messages in exc.message_dict.items()
        }
    )


JSON_DEPTH = 32
UNSTORABLE = f"NUL, lone surrogates or nesting deeper than {JSON_DEPTH} levels are not accepted."


class StrictSerializer(serializers.Serializer):
    """A body naming a field this endpoint does not take is refused, naming it (a typo'd
    `exam_mod` must not be a silent no-op)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            # Before any field sees it: DRF's messages quote the value back, and a lone
            # surrogate in an answer cannot be encoded (a 500).
            if not all(is_storable_json(name) for name in data):
                raise ValidationError({"non_field_errors": [UNSTORABLE]})
            bad = {
                name: [UNSTORABLE]
                for name, value in data.items()
                if not is_storable_json(value, JSON_DEPTH)
            }
            if bad:
                raise ValidationError(bad)
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(name)[:100] for name in data if name not in writable)
            if unknown:
                raise ValidationError(
                    {name: ["Not a field that can be set here."] for name in unknown}
                )
        return super().to_internal_value(data)


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}]})
class Student(serializers.Field):
    """An end user's id (a JSON number) or subject (a JSON string); resolved by the view."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | str):
            raise ValidationError("An end user id (a number) or a subject (a string).")
        return data

    def to_representation(self, value):
        return value


class Overlay(serializers.JSONField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value is not None and not isinstance(value, dict):
            raise ValidationError("A policy overlay is a JSON object.")
        if not is_storable_json(value, JSON_DEPTH):
            raise ValidationError(UNSTORABLE)
        return value


# --- courses -----------------------------------------------------------------------------------


class CourseSerializer(StrictSerializer, InstantModelSerializer):
    license = serializers.PrimaryKeyRelatedField(queryset=License.objects.none())
    institution = serializers.CharField(source="institution.name", read_only=True)
    policy = Overlay(required=False, help_text="Overlay: may only narrow the license type's policy")
    exam_policy = Overlay(
        required=False,
        allow_null=True,
        help_text="What exam mode allows: null = every service off; else a narrower overlay",
    )
    teachers = serializers.SerializerMethodField(help_text="The teachers' usernames")
    members = serializers.SerializerMethodField(help_text="How many members")

    class Meta:
        model = Course
        fields = (
            "id",
            "name",
            "code",
            "license",
            "institution",
            "allowance",
            "allowance_period",
            "pool_limit",
            "instructions",
            "policy",
            "exam_mode",
            "exam_policy",
            "active",
            "ends_at",
            "lti_context_id",
            "created_at",
            "teachers",
            "members",
        )
        read_only_fields = ("id", "lti_context_id", "created_at")
        # The uniqueness of a code is the service's to check (full_clean), once.
        validators: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            licenses = self.fields["license"]
            licenses.queryset = scoped(License.objects.all(), scope_of(request.user))  # type: ignore[attr-defined]

    def get_teachers(self, obj) -> list[str]:
        return sorted(t.user.get_username() for t in obj.teachers.all())

    def get_members(self, obj) -> int:
        count = getattr(obj, "member_count", None)
        return obj.members.count() if count is None else count


class CourseFilter(django_filters.FilterSet):
    license = django_filters.ModelChoiceFilter(queryset=_scoped_choices(License))
    code = django_filters.CharFilter(max_length=64)
    name = django_filters.CharFilter(lookup_expr="icontains", max_length=200)
    lti_context_id = django_filters.CharFilter(max_length=255)

    class Meta:
        model = Course
        fields = ("code", "name", "license", "exam_mode", "active", "lti_context_id")


# --- windows, members, keys, usage ------------------------------------------------------------


class WindowSerializer(StrictSerializer, InstantModelSerializer):
    kind = serializers.ChoiceField(choices=CourseWindow.Kind.choices, default="access")

    class Meta:
        model = CourseWindow
        fields = ("id", "kind", "starts_at", "ends_at")
        read_only_fields = ("id",)


class MemberSerializer(serializers.ModelSerializer):
    subject = serializers.CharField(source="end_user.subject", read_only=True)

    class Meta:
        model = CourseMember
        fields = (
            "id",
            "end_user",
            "subject",
            "paused",
            "top_up",
            "top_up_window_start",
            "created_at",
        )
        read_only_fields = fields


class MemberChangeSerializer(StrictSerializer, InstantModelSerializer):
    class Meta:
        model = CourseMember
        fields = MEMBER_FIELDS


class MemberAddSerializer(StrictSerializer):
    student = Student(help_text="An end user id (number) or a subject (string, created if new)")


class RosterSerializer(StrictSerializer):
    students = serializers.ListField(
        child=Student(),
        max_length=ROSTER_MAX,
        allow_empty=True,
        help_text="End user ids (numbers) or subjects (strings): the course's members after",
    )


class RosterResultSerializer(serializers.Serializer):
    added = serializers.IntegerField()
    removed = serializers.IntegerField()
    kept = serializers.IntegerField()
    dry_run = serializers.BooleanField()
    add = serializers.ListField(child=Student(), help_text="The students added (as named)")
    remove = serializers.ListField(
        child=serializers.CharField(), help_text="The subjects of the members removed"
    )


class CourseKeySerializer(serializers.ModelSerializer):
    student = serializers.IntegerField(source="end_user_id", read_only=True, allow_null=True)
    subject = serializers.CharField(
        source="end_user.subject", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = ApiKey
        fields: tuple[str, ...] = (
            "id",
            "prefix",
            "kind",
            "name",
            "license",
            "student",
            "subject",
            "active",
            "expires_at",
            "last_used_at",
            "created_at",
        )
        read_only_fields: tuple[str, ...] = fields


class NewCourseKeySerializer(CourseKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The full key: shown once, never again")

    class Meta(CourseKeySerializer.Meta):
        fields = (*CourseKeySerializer.Meta.fields, "key")
        read_only_fields = fields


class CourseKeyCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    student = Student(help_text="A member: end user id (number) or subject (string)")
    expires_at = Instant(required=False, allow_null=True, default=None)


class UsageQuerySerializer(serializers.Serializer):
    since = Instant(required=False, allow_null=True, default=None)
    until = Instant(required=False, allow_null=True, default=None)


class StudentUsageSerializer(serializers.Serializer):
    end_user = serializers.IntegerField(
        source="end_user_id", allow_null=True, help_text="null: the course's keys without a student"
    )
    student = serializers.CharField()
    member = serializers.BooleanField()
    paused = serializers.BooleanField()
    requests = serializers.IntegerField()
    refusals = serializers.IntegerField()
    credits = serializers.IntegerField()
    models = serializers.ListField(child=serializers.CharField(), help_text="Most used first")
    first_at = serializers.DateTimeField(allow_null=True)
    last_at = serializers.DateTimeField(allow_null=True)
    period_used = serializers.IntegerField(help_text="Spent in the current allowance period")
    allowance = serializers.IntegerField(allow_null=True, help_text="This period's; null: no limit")
    period_remaining = serializers.IntegerField(allow_null=True)


class CourseUsageSerializer(serializers.Serializer):
    course = serializers.IntegerField(source="course_id")
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    period = serializers.CharField()
    period_start = serializers.DateTimeField()
    requests = serializers.IntegerField()
    refusals = serializers.IntegerField()
    credits = serializers.IntegerField()
    rows = StudentUsageSerializer(many=True)


USAGE_CSV_COLUMNS = tuple(StudentUsageSerializer().fields)


def _usage_csv(usage, course: Course) -> HttpResponse:
    """One course's usage is one line per student: small, so written at once (not streamed)."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="course-{course.pk}-usage.csv"'
    response["Cache-Control"] = "no-store"
    writer = csv.writer(response)
    writer.writerow(USAGE_CSV_COLUMNS)
    for row in StudentUsageSerializer(usage.rows, many=True).data:
        cells = []
        for name in USAGE_CSV_COLUMNS:
            value = row[name]
            if name == "models":
                value = " ".join(value)
            cells.append("" if value is None else safe_cell(value))
        writer.writerow(cells)
    return response


class RosterTimedOut(APIException):
    status_code = 503
    default_code = "roster_timeout"


def _id(value: str) -> int:
    """A path's id: anything but a plain number in range is a 404 (the row does not exist)."""
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise Http404
    return int(value)


def _flag(value: str | None, name: str) -> bool:
    if value in (None, "", "false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise ValidationError({name: ["true or false."]})


class CourseViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    CsvErrorsAsJson,
    ScopedViewSet,
):
    """Courses of the caller's institution (a teacher: the courses they teach): settings and the
    exam switch, windows, members and roster sync, keys, per-student usage."""

    queryset = Course.objects.select_related("institution", "license").prefetch_related(
        "teachers__user"
    )
    serializer_class = CourseSerializer
    filterset_class = CourseFilter
    permission_classes = [CoursePermission]
    pagination_class = NewestFirst
    renderer_classes = [*ScopedViewSet.renderer_classes, CsvRenderer]

    def get_queryset(self):
        return super().get_queryset().annotate(member_count=Count("members", distinct=True))

    def filter_queryset(self, queryset):
        if self.action not in ("list", "retrieve"):
            return queryset  # the nested routes filter nothing by the course list's parameters
        return super().filter_queryset(queryset)

    def get_renderers(self):
        # CSV is the usage's only: every other route answers JSON whatever `format` asks.
        if self.action == "usage":
            return super().get_renderers()
        return [r for r in super().get_renderers() if not isinstance(r, CsvRenderer)]

    def _who(self) -> dict[str, Any]:
        return {"request": self.request}

    # --- the course itself

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        later = {
            name: ["Set by PATCH once the course exists."]
            for name in ("exam_mode", "active")
            if name in data
        }
        if later:
            raise ValidationError(later)
        try:
            course = course_create(**data, **self._who())
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        except IntegrityError as exc:  # the same code made at the same moment by another call
            raise ValidationError({"code": ["A course with this code exists."]}) from exc
        return Response(self._shown(course.pk), status=status.HTTP_201_CREATED)

    def _shown(self, pk: int) -> dict:
        return self.get_serializer(self.get_queryset().get(pk=pk)).data

    def partial_update(self, request, *args, **kwargs):
        """Change the course's fields (a teacher: name, allowance and its period, pool, the
        overlay and exam policy, exam mode). Exam mode is in force on every worker within a
        second."""
        course = self.get_object()
        scope = scope_of(request.user)
        if isinstance(request.data, dict):
            allowed = editable_fields(scope)
            locked = {
                name: ["This field cannot be changed here."]
                for name in request.data
                if name in COURSE_FIELDS and name not in allowed
            }
            if locked:
                raise ValidationError(locked)
        serializer = self.get_serializer(course, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            course_update(
                course=course, changes=dict(serializer.validated_data), scope=scope, **self._who()
            )
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        except IntegrityError as exc:
            raise ValidationError({"code": ["A course with this code exists."]}) from exc
        return Response(self._shown(course.pk))

    def destroy(self, request, *args, **kwargs):
        """Delete the course with its windows, members and keys (its ledger rows stay)."""
        course_delete(course=self.get_object(), **self._who())
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- windows

    @extend_schema(responses=WindowSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def windows(self, request, pk=None):
        """The course's access and exam windows, earliest first."""
        course = self.get_object()
        return Response(
            WindowSerializer(course.windows.order_by("starts_at", "id"), many=True).data
        )

    @extend_schema(request=WindowSerializer, responses={201: WindowSerializer})
    @windows.mapping.post
    def window_add(self, request, pk=None):
        course = self.get_object()
        serializer = WindowSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            window = course_window_add(course=course, **serializer.validated_data, **self._who())
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        return Response(WindowSerializer(window).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["delete"], url_path=r"windows/(?P<window_id>[^/]+)")
    def window_remove(self, request, pk=None, window_id=""):
        course = self.get_object()
        window = course.windows.filter(pk=_id(window_id)).first()
        if window is None:
            raise Http404
        course_window_remove(window=window, **self._who())
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- members

    def _member(self, course: Course, member_id: str) -> CourseMember:
        member = course.members.select_related("end_user").filter(pk=_id(member_id)).first()
        if member is None:
            raise Http404
        member.course = course
        return member

    @extend_schema(responses=MemberSerializer(many=True))
    @action(detail=True, methods=["get"])
    def members(self, request, pk=None):
        """The course's members, paginated (`?cursor=`), newest first."""
        course = self.get_object()
        rows = course.members.select_related("end_user")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(MemberSerializer(page, many=True).data)

    @extend_schema(
        request=MemberAddSerializer, responses={201: MemberSerializer, 200: MemberSerializer}
    )
    @members.mapping.post
    def member_add(self, request, pk=None):
        """Add one student: an end user id of the course's license, or a subject (an end user
        with that subject on the license; a new one, issuer empty, if none). 201 if added, 200
        if already a member."""
        course = self.get_object()
        serializer = MemberAddSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        student = serializer.validated_data["student"]
        try:
            end_user = student_find(course, student)
            if end_user is None:
                end_user, _ = student_get_or_create(course=course, subject=student)
            member, created = course_member_add(course=course, end_user=end_user, **self._who())
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        return Response(
            MemberSerializer(member).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=RosterSerializer,
        responses=RosterResultSerializer,
        parameters=[
            OpenApiParameter(
                "dry_run", OpenApiTypes.BOOL, description="true: what it would do, nothing done"
            )
        ],
    )
    @members.mapping.put
    def members_sync(self, request, pk=None):
        """Roster sync: the members become exactly `students`. The missing are added (a new
        subject becomes an end user of the license), members not listed are removed and their
        course keys revoked. `?dry_run=true`: the same answer, nothing changed."""
        course = self.get_object()
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        serializer = RosterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            plan = course_roster_sync(
                course=course,
                students=serializer.validated_data["students"],
                dry_run=dry_run,
                **self._who(),
            )
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        except RosterTooSlow as exc:
            raise RosterTimedOut(str(exc)) from exc
        body = {
            "added": len(plan.add),
            "removed": len(plan.remove),
            "kept": plan.kept,
            "dry_run": dry_run,
            "add": plan.add,
            "remove": [member.subject for member in plan.remove],
        }
        return Response(RosterResultSerializer(body).data)

    @extend_schema(request=MemberChangeSerializer, responses=MemberSerializer)
    @action(detail=True, methods=["patch"], url_path=r"members/(?P<member_id>[^/]+)")
    def member_update(self, request, pk=None, member_id=""):
        """Pause a member (`paused`), or top up their allowance for one period (`top_up`,
        `top_up_window_start`: any instant in that period)."""
        member = self._member(self.get_object(), member_id)
        serializer = MemberChangeSerializer(member, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            member = course_member_update(
                member=member, changes=dict(serializer.validated_data), **self._who()
            )
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        member.refresh_from_db()
        return Response(MemberSerializer(member).data)

    @extend_schema(request=None, responses={204: None})
    @member_update.mapping.delete
    def member_remove(self, request, pk=None, member_id=""):
        """Take the student out of the course: their keys for it are revoked."""
        member = self._member(self.get_object(), member_id)
        course_member_remove(member=member, **self._who())
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- keys

    @extend_schema(responses=CourseKeySerializer(many=True))
    @action(detail=True, methods=["get"])
    def keys(self, request, pk=None):
        """The course's keys (never the key itself), newest first, paginated."""
        course = self.get_object()
        rows = ApiKey.objects.filter(course=course).select_related("end_user")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(CourseKeySerializer(page, many=True).data)

    @extend_schema(request=CourseKeyCreateSerializer, responses={201: NewCourseKeySerializer})
    @keys.mapping.post
    def key_create(self, request, pk=None):
        """A key for one member of the course, shown once: it pays at the student's allowance,
        the course pool and the license."""
        course = self.get_object()
        serializer = CourseKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            end_user = student_find(course, data["student"])
            if end_user is None:
                raise DjangoValidationError(
                    {"student": "The student is not a member of this course."}
                )
            row, key = course_key_create(
                course=course,
                end_user=end_user,
                name=data["name"],
                expires_at=data["expires_at"],
                via="management API",
                **self._who(),
            )
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        return Response(
            {**CourseKeySerializer(row).data, "key": key}, status=status.HTTP_201_CREATED
        )

    # --- usage

    @extend_schema(
        parameters=[
            UsageQuerySerializer,
            OpenApiParameter(
                "format",
                OpenApiTypes.STR,
                enum=["json", "csv"],
                description="`csv`: one line per student, the columns of the JSON rows",
            ),
        ],
        responses={
            (200, "application/json"): CourseUsageSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    @action(detail=True, methods=["get"])
    def usage(self, request, pk=None):
        """One row per student (members, former members with rows, the course's keys without a
        student): requests, refusals, credits, models, first and last use between `since`
        (inclusive) and `until` (exclusive), and this allowance period's spend and remaining."""
        course = self.get_object()
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        usage = course_usage(course, **query.validated_data)
        if isinstance(request.accepted_renderer, CsvRenderer):
            return _usage_csv(usage, course)
        return Response(CourseUsageSerializer(usage).data)
