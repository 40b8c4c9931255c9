"""Courses (issue 26's first step): the course page with its access and exam windows, its
teachers and its members inline, scoped to the institution like every licensing page. The
teachers' own view, the policy form for the overlay and the per-student usage come with the
rest of the courses work (docs/courses.md)."""

from typing import ClassVar

from django.contrib import admin
from django.core.exceptions import ValidationError

from ...models import Course, CourseMember, CourseTeacher, CourseWindow
from .base import KeepLedgerIntactMixin, ScopedAdminMixin


class CourseWindowInline(admin.TabularInline):
    model = CourseWindow
    extra = 0


class CourseTeacherInline(admin.TabularInline):
    model = CourseTeacher
    extra = 0
    raw_id_fields = ("user",)


class CourseMemberInline(admin.TabularInline):
    model = CourseMember
    extra = 0
    raw_id_fields = ("end_user",)
    fields = ("end_user", "paused", "top_up", "top_up_window_start")


@admin.register(Course)
class CourseAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    list_display = ("code", "name", "license", "allowance", "allowance_period", "exam_mode")
    list_filter = ("institution", "exam_mode", "allowance_period")
    list_select_related = ("license",)
    search_fields = ("code", "name", "license__name")
    inlines = (CourseWindowInline, CourseTeacherInline, CourseMemberInline)

    def ledger_rows(self, obj):
        return obj.transactions.all()

    def save_model(self, request, obj, form, change):
        if obj.license_id and obj.institution_id != obj.license.institution_id:
            raise ValidationError("The course's license belongs to another institution")
        super().save_model(request, obj, form, change)


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


@admin.register(CourseTeacher)
class CourseTeacherAdmin(_CoursePartAdmin):
    list_display = ("course", "user")
    list_select_related = ("course", "user")
    raw_id_fields = ("user",)
