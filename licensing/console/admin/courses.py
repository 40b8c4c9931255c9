"""Courses (issue 26's first step): the course page with its access and exam windows, its
teachers and its members inline, scoped to the institution like every licensing page. The
teachers' own view, the policy form for the overlay and the per-student usage come with the
rest of the courses work (docs/courses.md)."""

from typing import ClassVar

from django.contrib import admin

from ...access.scoping import TEACHER, owns, scope_of
from ...models import Course, CourseMember, CourseTeacher, CourseWindow
from .base import KeepLedgerIntactMixin, ScopedAdminMixin


class ScopedInlineMixin(admin.options.InlineModelAdmin):
    """An inline's rights are its model's for the user's role, on a course the user owns
    (a teacher: one they teach), as the course page's own are."""

    def _may(self, request, action, obj=None) -> bool:
        scope = scope_of(request.user)
        return scope.allows(self.model, action) and (obj is None or owns(scope, obj))

    def has_view_permission(self, request, obj=None):
        return self._may(request, "view", obj)

    def has_add_permission(self, request, obj=None):
        return self._may(request, "add", obj)

    def has_change_permission(self, request, obj=None):
        return self._may(request, "change", obj)

    def has_delete_permission(self, request, obj=None):
        return self._may(request, "delete", obj)


class CourseWindowInline(ScopedInlineMixin, admin.TabularInline):
    model = CourseWindow
    extra = 0


class CourseTeacherInline(ScopedInlineMixin, admin.TabularInline):
    model = CourseTeacher
    extra = 0
    raw_id_fields = ("user",)


class CourseMemberInline(ScopedInlineMixin, admin.TabularInline):
    model = CourseMember
    extra = 0
    raw_id_fields = ("end_user",)
    fields = ("end_user", "paused", "top_up", "top_up_window_start")

    def get_readonly_fields(self, request, obj=None):
        if scope_of(request.user).role == TEACHER:
            return ("end_user",)  # a teacher pauses and tops up here (see below)
        return ()

    def has_add_permission(self, request, obj=None):
        return not _teacher(request) and super().has_add_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not _teacher(request) and super().has_delete_permission(request, obj)


def _teacher(request) -> bool:
    """A teacher may add and remove members (scoping's ROLE_PERMISSIONS) but not in the admin:
    it cannot show them the license's end users to pick from, and its delete would not revoke
    the student's course keys. Their roster goes by launches and the management API
    (licensing.access.course_services.course_roster_sync), which does both."""
    return scope_of(request.user).role == TEACHER


@admin.register(Course)
class CourseAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("code", "name", "license", "allowance", "allowance_period", "exam_mode")
    list_filter = ("institution", "exam_mode", "allowance_period")
    list_select_related = ("license",)
    search_fields = ("code", "name", "license__name")
    inlines = (CourseWindowInline, CourseTeacherInline, CourseMemberInline)

    # A teacher runs their course; which license pays, its code and its overlay stay with the
    # institution's admins (the overlay's form, which may only narrow, comes next).
    TEACHER_READ_ONLY = (
        "institution",
        "license",
        "code",
        "lti_context_id",
        "policy",
        "exam_policy",
    )

    def get_readonly_fields(self, request, obj=None):
        if scope_of(request.user).role == TEACHER:
            return self.TEACHER_READ_ONLY
        return super().get_readonly_fields(request, obj)

    def ledger_rows(self, obj):
        return obj.transactions.all()


class _CoursePartAdmin(ScopedAdminMixin, admin.ModelAdmin):
    list_select_related: ClassVar[tuple[str, ...]] = ("course",)

    def has_module_permission(self, request):
        return False  # edited on the course's page; listed for links and the scoping tests


@admin.register(CourseWindow)
class CourseWindowAdmin(_CoursePartAdmin):
    list_display = ("course", "kind", "starts_at", "ends_at")


@admin.register(CourseMember)
class CourseMemberAdmin(_CoursePartAdmin):
    list_display = ("course", "end_user", "paused", "top_up")
    list_select_related = ("course", "end_user")
    raw_id_fields = ("end_user",)

    def has_add_permission(self, request, *args):
        return not _teacher(request) and super().has_add_permission(request, *args)

    def has_delete_permission(self, request, obj=None):
        return not _teacher(request) and super().has_delete_permission(request, obj)


@admin.register(CourseTeacher)
class CourseTeacherAdmin(_CoursePartAdmin):
    list_display = ("course", "user")
    list_select_related = ("course", "user")
    raw_id_fields = ("user",)
