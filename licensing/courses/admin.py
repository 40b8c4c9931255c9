"""Courses: the course page with its access and exam windows, its teachers and its members
inline, scoped to the institution like every licensing page; a teacher sees only the courses
they teach (docs/teachers.md).

The page edits the overlay through the policy form with the license type's rules beside it,
exam mode with what it allows, windows with date pickers in the institution's time zone; it
has the "try a request" panel judged by the course's rules now, and the per-student usage (with
a CSV download). Every save goes through licensing.courses.services, so each change is
validated, audited once and cleared from every worker's course cache.
"""

from __future__ import annotations

import csv
import json
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from catalog.forms import FORMFIELD_OVERRIDES
from catalog.registry import POLICY_SERVICES, service_label
from core import clock
from core.languages import grouped

from ..access.scoping import TEACHER, owns, scope_of
from ..console.admin.base import KeepLedgerIntactMixin, ScopedAdminMixin
from ..console.money import MoneyFormMixin, Rate, institution_rate, with_money
from ..console.people import (
    PeopleChangeList,
    end_user_person,
    people_field,
    people_json,
    row_person,
    staff_person,
)
from ..models import Course, CourseMember, CourseTeacher, CourseWindow
from ..rules.policy import SERVICES, PolicyDocumentError
from ..rules.scopes import model_rule_in_force
from .form import CourseForm
from .policy_try import course_try_request
from .rules import course_document, exam_document, local_iso
from .selectors import student_candidates, teacher_candidates
from .services import (
    COURSE_FIELDS,
    MEMBER_FIELDS,
    course_create,
    course_delete,
    course_member_add,
    course_member_remove,
    course_member_update,
    course_teacher_add,
    course_teacher_remove,
    course_update,
    course_window_add,
    course_window_remove,
    member_problem,
    teacher_problem,
)
from .usage import course_usage


def _zone(course: Course | None) -> str:
    name = (course.institution.timezone if course is not None else "") or "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"  # a zone this host does not know: the pickers still mean exact instants
    return name


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


class _CheckedFormSet(BaseInlineFormSet):
    """Asks the course services' own questions before anything is saved, so a refusal is a
    form error (never a 500 at save time)."""

    def problem(self, form) -> tuple[str, str] | None:
        return None

    def clean(self):
        super().clean()
        for form in self.initial_forms:
            if form.instance.pk is None:
                # The posted id is not one of this course's rows (another course's, or none):
                # Django would quietly treat it as a new row.
                form.add_error(None, _("This row is not one of this course's."))
        for form in self.forms:
            if not form.has_changed() or form in self.deleted_forms or form.errors:
                continue
            problem = self.problem(form)
            if problem is not None:
                form.add_error(*problem)
        if any(form.errors for form in self.forms):
            raise ValidationError(_("Please correct the errors below."))


class MemberFormSet(_CheckedFormSet):
    def problem(self, form):
        end_user = form.cleaned_data.get("end_user")
        if form.instance.pk is not None and "end_user" in form.changed_data:
            return "end_user", _("A member's student cannot change; remove the row and add one.")
        if end_user is not None and form.instance.pk is None:
            why = member_problem(self.instance, end_user)
            return ("end_user", why) if why else None
        return None


class TeacherFormSet(_CheckedFormSet):
    def problem(self, form):
        user = form.cleaned_data.get("user")
        if user is not None:
            why = teacher_problem(self.instance, user)
            return ("user", why) if why else None
        return None


class MemberForm(MoneyFormMixin, forms.ModelForm):
    """A member's row: the top-up entered and shown in the institution's currency."""

    money_fields = ("top_up",)
    course: Course | None = None  # set per page (CourseMemberInline.get_formset)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.setup_money(self.money_rate(), "")

    def money_rate(self) -> Rate | None:
        return institution_rate(self.course.institution) if self.course is not None else None

    def clean(self):
        cleaned = super().clean()
        self.clean_money()
        return cleaned


class CourseWindowInline(ScopedInlineMixin, admin.TabularInline):
    model = CourseWindow
    formset = _CheckedFormSet
    extra = 0
    fields = ("kind", "starts_at", "ends_at")
    verbose_name_plural = _("Windows (open and exam)")


class PeopleInlineMixin(admin.options.InlineModelAdmin):
    """The person of a row (a teacher's user, a member's end user) chosen by name and e-mail
    with an autocomplete (licensing.console.people), among the course's own candidates only:
    an id of anyone else posted is "Select a valid choice", never a row."""

    person_field = ""
    people_kind = ""  # the course page's people endpoint: "students" or "teachers"

    def candidates(self, course: Course):
        raise NotImplementedError

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        fields = formset.form.base_fields
        if obj is not None and self.person_field in fields:
            url = reverse("admin:licensing_course_people", args=[obj.pk, self.people_kind])
            model_field = self.model._meta.get_field(self.person_field)
            fields[self.person_field] = people_field(
                fields[self.person_field], model_field, url, self.candidates(obj)
            )
        return formset


class CourseTeacherInline(PeopleInlineMixin, ScopedInlineMixin, admin.TabularInline):
    model = CourseTeacher
    formset = TeacherFormSet
    extra = 0
    fields = ("user",)
    person_field, people_kind = "user", "teachers"

    def candidates(self, course):
        return teacher_candidates(course)


class CourseMemberInline(PeopleInlineMixin, ScopedInlineMixin, admin.TabularInline):
    model = CourseMember
    form = MemberForm
    formset = MemberFormSet
    extra = 0
    fields = ("end_user", "paused", "top_up", "top_up_window_start")
    verbose_name_plural = _("Members (pauses and top-ups)")
    person_field, people_kind = "end_user", "students"

    def candidates(self, course):
        return student_candidates(course)

    def get_formset(self, request, obj=None, **kwargs):
        # The course's rate for the top-ups, known before any row's form is made.
        kwargs["form"] = type("CourseMemberForm", (self.form,), {"course": obj})
        return super().get_formset(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if _teacher(request):
            return ("student", *self.fields[1:])  # a teacher pauses and tops up here (see below)
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        return ("student",) if _teacher(request) else ()

    @admin.display(description=_("student"))
    def student(self, obj):
        return end_user_person(obj.end_user).label() if obj.end_user_id else "-"

    def has_add_permission(self, request, obj=None):
        return not _teacher(request) and super().has_add_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return not _teacher(request) and super().has_delete_permission(request, obj)


def _teacher(request) -> bool:
    """A teacher may add and remove members (scoping's ROLE_PERMISSIONS) but not in the admin:
    it cannot show them the license's end users to pick from, and its delete would not revoke
    the student's course keys. Their roster goes by launches and the management API
    (licensing.courses.services.course_roster_sync), which does both."""
    return scope_of(request.user).role == TEACHER


def _rule_text(name: str, rule: Any) -> str:
    if not isinstance(rule, dict):
        return f"{name}: {json.dumps(rule)}"
    parts = []
    for key, value in rule.items():
        if key == "min":
            parts.append(f"{name} ≥ {value}")
        elif key == "max":
            parts.append(f"{name} ≤ {value}")
        elif key == "allowed":
            parts.append(f"{name}: {', '.join(str(v) for v in value)}")
        elif key == "forbidden" and value is True:
            parts.append(f"{name} forbidden")
        else:
            parts.append(f"{name}.{key}: {json.dumps(value, ensure_ascii=False)}")
    return "; ".join(parts)


def describe_service(document: Any, service: str) -> str:
    """One service of a policy document in a line a teacher reads: off, or its models,
    providers and limits."""
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict) or service not in services:
        return gettext("off")
    config = services[service] if isinstance(services[service], dict) else {}
    params: dict = config["params"] if isinstance(config.get("params"), dict) else {}
    parts = []
    model_rule = model_rule_in_force(document, service)  # its own and the `models` rules
    models = model_rule.get("allowed")
    if models:
        parts.append(gettext("models: %(models)s") % {"models": ", ".join(map(str, models))})
    else:
        parts.append(gettext("any model"))
    if config.get("providers") is not None:
        names = ", ".join(config["providers"]) or gettext("(none)")
        parts.append(gettext("providers: %(providers)s") % {"providers": names})
    for name, rule in params.items():
        if name == "model" and isinstance(rule, dict) and set(rule) <= {"allowed"}:
            continue
        parts.append(_rule_text(name, rule))
    return "; ".join(parts)


@admin.register(Course)
class CourseAdmin(KeepLedgerIntactMixin, ScopedAdminMixin, admin.ModelAdmin):
    form = CourseForm
    formfield_overrides = FORMFIELD_OVERRIDES
    list_display = (
        "code",
        "name",
        "license",
        "allowance_display",
        "allowance_period",
        "exam_mode",
        "course_page",
    )
    list_filter = ("institution", "exam_mode", "allowance_period")
    list_select_related = ("license", "institution")
    search_fields = ("code", "name", "license__name")
    inlines = (CourseWindowInline, CourseTeacherInline, CourseMemberInline)
    change_form_template = "admin/licensing/course/change_form.html"

    # Shown, never edited here: the institution follows the license; the LMS context is set by
    # the first LTI launch.
    ALWAYS_READ_ONLY = ("institution", "lti_context_id", "time_zone")
    # A teacher runs their course (course_services.TEACHER_FIELDS): which license pays, its
    # code and whether it is active stay with the institution's admins.
    TEACHER_READ_ONLY = ("license", "code", "active", "ends_at")
    MONEY_FIELDSET = _("Allowance and pool")
    EXAM_FIELDSET = _("Exam mode")
    INSTRUCTIONS_FIELDSET = _("Instructions for the assistant")

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return (
                (None, {"fields": ("license", "code", "name")}),
                (self.MONEY_FIELDSET, {"fields": ("allowance", "allowance_period", "pool_limit")}),
                (self.INSTRUCTIONS_FIELDSET, {"fields": ("instructions",)}),
                (_("Overlay and exam policy as JSON"), {"fields": ("policy", "exam_policy")}),
            )
        return (
            (
                None,
                {
                    "fields": (
                        "code",
                        "name",
                        "license",
                        "institution",
                        "time_zone",
                        "active",
                        "ends_at",
                    )
                },
            ),
            (self.MONEY_FIELDSET, {"fields": ("allowance", "allowance_period", "pool_limit")}),
            (self.INSTRUCTIONS_FIELDSET, {"fields": ("instructions",)}),
            (
                _("Overlay as JSON"),
                {
                    "classes": ("collapse",),
                    "fields": ("policy",),
                    "description": _(
                        "The course's overlay: it may only narrow the license type's "
                        "policy. Rules the form above does not cover are edited here; saving the "
                        "form keeps them. {} = the license type's policy as it is."
                    ),
                },
            ),
            (self.EXAM_FIELDSET, {"fields": ("exam_mode", "exam_does")}),
            (
                _("Exam policy as JSON"),
                {
                    "classes": ("collapse",),
                    "fields": ("exam_policy",),
                    "description": _(
                        "Used in exam mode when “allow only” is chosen; it may only "
                        "narrow the course's policy. Empty = every service off."
                    ),
                },
            ),
            (_("LMS link (LTI)"), {"classes": ("collapse",), "fields": ("lti_context_id",)}),
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        if scope_of(request.user).role == TEACHER:
            return self.ALWAYS_READ_ONLY + self.TEACHER_READ_ONLY
        return self.ALWAYS_READ_ONLY

    def get_inlines(self, request, obj):
        # A new course first; its windows (in its institution's zone), teachers and members
        # are added on its page once the license, so the institution, is known.
        return self.inlines if obj is not None else ()

    @admin.display(description=_("course page"))
    def course_page(self, obj):
        """The teacher's page of the course (the portal's: the exam switch, the per-student
        usage, the settings in words)."""
        return format_html(
            '<a href="{}">{}</a>', reverse("portal:course", args=[obj.pk]), _("open")
        )

    @admin.display(description=_("allowance"), ordering="allowance")
    def allowance_display(self, obj):
        return with_money(obj.allowance, obj.institution)

    @admin.display(description=_("in exam mode"))
    def exam_does(self, obj):
        """For a read-only view of the page (the form's radio otherwise)."""
        return _("allow only the exam policy") if obj.exam_policy else _("all services off")

    @admin.display(description=_("time zone"))
    def time_zone(self, obj):
        return _("%(zone)s (the institution's: windows and periods are in this zone)") % {
            "zone": _zone(obj)
        }

    def ledger_rows(self, obj):
        return obj.transactions.all()

    # --- saving through the course services ---------------------------------------------

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            course = course_create(
                license=data["license"],
                name=data["name"],
                code=data["code"],
                allowance=data.get("allowance"),
                allowance_period=data.get("allowance_period") or Course.Period.DAY,
                pool_limit=data.get("pool_limit"),
                instructions=data.get("instructions") or "",
                policy=data.get("policy") or {},
                exam_policy=data.get("exam_policy") or None,
                request=request,
            )
            obj.pk, obj.institution_id = course.pk, course.institution_id
            obj._state.adding, obj._state.db = False, course._state.db
            return
        changes = {name: data[name] for name in COURSE_FIELDS if name in form.fields}
        course_update(course=obj, changes=changes, scope=scope_of(request.user), request=request)

    def delete_model(self, request, obj):
        course_delete(course=obj, request=request)

    def save_formset(self, request, form, formset, change):
        course = form.instance
        deleted: list = []
        new: list = []
        changed: list = []
        for inline_form in formset.initial_forms:
            if inline_form in formset.deleted_forms and inline_form.instance.pk is not None:
                deleted.append(inline_form.instance)
        for inline_form in formset.forms:
            if inline_form in formset.deleted_forms or not inline_form.has_changed():
                continue
            (changed if inline_form.instance.pk is not None else new).append(inline_form)
        save = {
            CourseWindow: self._save_windows,
            CourseMember: self._save_members,
            CourseTeacher: self._save_teachers,
        }[formset.model]
        formset.new_objects, formset.changed_objects, formset.deleted_objects = save(
            request, course, deleted, new, changed
        )

    def _save_windows(self, request, course, deleted, new, changed):
        for window in deleted:
            course_window_remove(window=window, request=request)
        added = []
        # A window has no update service: a changed one is removed and added again (two audit
        # rows saying exactly that).
        for inline_form in changed:
            stored = CourseWindow.objects.select_related("course").get(pk=inline_form.instance.pk)
            course_window_remove(window=stored, request=request)
        for inline_form in [*changed, *new]:
            data = inline_form.cleaned_data
            added.append(
                course_window_add(
                    course=course,
                    kind=data["kind"],
                    starts_at=data["starts_at"],
                    ends_at=data["ends_at"],
                    request=request,
                )
            )
        return added, [], deleted

    def _save_members(self, request, course, deleted, new, changed):
        for member in deleted:
            course_member_remove(member=member, request=request)
        added, updated = [], []
        for inline_form in new:
            data = inline_form.cleaned_data
            member, _ = course_member_add(course=course, end_user=data["end_user"], request=request)
            extra = {n: data[n] for n in MEMBER_FIELDS if n in inline_form.changed_data}
            if extra:
                member = course_member_update(member=member, changes=extra, request=request)
            added.append(member)
        for inline_form in changed:
            names = [n for n in MEMBER_FIELDS if n in inline_form.changed_data]
            if names:
                changes = {n: inline_form.cleaned_data[n] for n in names}
                member = course_member_update(
                    member=inline_form.instance, changes=changes, request=request
                )
                updated.append((member, names))
        return added, updated, deleted

    def _save_teachers(self, request, course, deleted, new, changed):
        for teacher in deleted:
            course_teacher_remove(teacher=teacher, request=request)
        added = []
        for inline_form in changed:
            stored = CourseTeacher.objects.select_related("course").get(pk=inline_form.instance.pk)
            course_teacher_remove(teacher=stored, request=request)
        for inline_form in [*changed, *new]:
            teacher, _ = course_teacher_add(
                course=course, user=inline_form.cleaned_data["user"], request=request
            )
            added.append(teacher)
        return added, [], deleted

    # --- the page: time zone, rules beside the form, try a request, usage ------------------

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        course = None
        if object_id is not None:
            course = self.get_object(request, object_id)
        zone = _zone(course)
        # The date pickers show and read local times of the institution (the DB keeps UTC
        # instants); rendered inside the zone, so the admin's "you are N hours ahead" note and
        # the shown values agree.
        with timezone.override(ZoneInfo(zone)):
            response = super().changeform_view(request, object_id, form_url, extra_context)
            if isinstance(response, TemplateResponse):
                response.render()
        return response

    def get_urls(self):
        try_view = self.admin_site.admin_view(require_POST(self.try_request_view))
        usage_csv = self.admin_site.admin_view(self.usage_csv_view)
        people = self.admin_site.admin_view(self.people_view)
        return [
            path("<path:object_id>/try/", try_view, name="licensing_course_try"),
            path("<path:object_id>/usage.csv", usage_csv, name="licensing_course_usage_csv"),
            path("<path:object_id>/people/<str:kind>/", people, name="licensing_course_people"),
            *super().get_urls(),
        ]

    def people_view(self, request, object_id, kind):
        """The autocomplete of the course page's members ("students": the end users of the
        course's license) and teachers ("teachers": the staff of its institution), found by
        name and e-mail; for those who may add them on this page (institution admins)."""
        course = self._viewable(request, object_id)
        model, candidates, found_as = {
            "students": (CourseMember, student_candidates, "end_user"),
            "teachers": (CourseTeacher, teacher_candidates, "staff"),
        }.get(kind, (None, None, ""))
        if model is None or candidates is None:
            raise Http404("No such list")
        scope = scope_of(request.user)
        if _teacher(request) or not (scope.allows(model, "add") and owns(scope, course)):
            raise PermissionDenied
        ordering = (
            ("user__last_name", "user__first_name", "subject")
            if found_as == "end_user"
            else ("last_name", "first_name", "username")
        )
        return people_json(request, candidates(course), found_as, ordering)

    def _viewable(self, request, object_id) -> Course:
        try:
            obj = self.get_object(request, object_id)
        except (ValueError, OverflowError):
            obj = None
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No course with this id")
        return obj

    def try_request_view(self, request, object_id):
        """The "try a request" panel: the course's rules at this instant, a service, a body."""
        course = self._viewable(request, object_id)
        service = request.POST.get("service", "")
        if service not in SERVICES:
            return JsonResponse(
                {"outcome": "invalid", "message": _("Choose a service")}, status=400
            )
        body = request.POST.get("body", "")
        return JsonResponse(course_try_request(course, service, body, now=clock.utcnow()))

    def usage_csv_view(self, request, object_id):
        """The per-student usage as CSV (counts, credits, models, times: never prompts)."""
        course = self._viewable(request, object_id)
        usage = course_usage(course, now=clock.utcnow())
        rate = institution_rate(course.institution)
        zone = _zone(course)
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="course-{course.pk}-usage.csv"'
        writer = csv.writer(response)
        writer.writerow(
            [
                "student",
                "member",
                "paused",
                "requests",
                "refusals",
                "credits",
                f"money ({rate.currency})",
                "models",
                "last request",
                "period used",
                "period allowance",
            ]
        )
        for row in usage.rows:
            writer.writerow(
                [
                    _csv_safe(row.student),
                    "yes" if row.member else "no",
                    "yes" if row.paused else "no",
                    row.requests,
                    row.refusals,
                    row.credits,
                    rate.amount(row.credits),
                    " ".join(row.models),
                    local_iso(row.last_at, zone) if row.last_at else "",
                    row.period_used,
                    "" if row.allowance is None else row.allowance,
                ]
            )
        return response

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        form = context["adminform"].form
        context["overlay_form"] = getattr(form, "overlay_form", None)
        context["exam_form"] = getattr(form, "exam_form", None)
        context["money_fieldset"] = self.MONEY_FIELDSET
        context["exam_fieldset"] = self.EXAM_FIELDSET
        if obj is not None:
            zone = _zone(obj)
            context["course_page_url"] = reverse("portal:course", args=[obj.pk])
            context["time_zone"] = zone
            context["beside"] = self._beside(obj)
            context["try_services"] = [(s, service_label(s)) for s in SERVICES]
            context["try_url"] = reverse("admin:licensing_course_try", args=[obj.pk])
            context["usage"] = self._usage_rows(obj, zone)
            context["usage_csv_url"] = reverse("admin:licensing_course_usage_csv", args=[obj.pk])
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _beside(self, course: Course) -> list[dict[str, str]]:
        """Per service of the license type: what it allows, what the course's policy is, and
        what exam mode allows (the stored documents)."""
        base = course.license.license_type.policy
        try:
            course_doc = course_document(base, course.policy)
            exam_doc = exam_document(course_doc, course.exam_policy)
        except PolicyDocumentError:
            return []
        services = base.get("services") if isinstance(base, dict) else None
        # In the policy form's order (PostgreSQL's jsonb does not keep the document's).
        names = sorted(
            services if isinstance(services, dict) else {},
            key=lambda s: (POLICY_SERVICES.index(s) if s in POLICY_SERVICES else 99, s),
        )
        return [
            {
                "service": service,
                "license_type": describe_service(base, service),
                "course": describe_service(course_doc, service),
                "exam": describe_service(exam_doc, service) if exam_doc else gettext("off"),
            }
            for service in names
        ]

    def _usage_rows(self, course: Course, zone: str) -> dict[str, Any]:
        usage = course_usage(course, now=clock.utcnow())
        rate = institution_rate(course.institution)
        rows = [
            {
                "student": row.student,
                "member": row.member,
                "paused": row.paused,
                "requests": row.requests,
                "refusals": row.refusals,
                "credits": grouped(row.credits),
                "money": rate.format(row.credits),
                "models": ", ".join(row.models),
                "last_at": _local(row.last_at, zone) if row.last_at else "",
                "period_used": grouped(row.period_used),
                "allowance": gettext("unlimited")
                if row.allowance is None
                else grouped(row.allowance),
            }
            for row in usage.rows
        ]
        return {
            "rows": rows,
            "period": usage.period,
            "period_start": _local(usage.period_start, zone),
            "requests": usage.requests,
            "refusals": usage.refusals,
            "credits": grouped(usage.credits),
            "money": rate.format(usage.credits),
        }


def _local(instant, zone: str) -> str:
    """A compact local time for the page (the CSV keeps ISO 8601 with the offset)."""
    return instant.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M")


def _csv_safe(text: str) -> str:
    """A name a spreadsheet would run as a formula (=, +, -, @) is quoted with a '."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class _CoursePartAdmin(ScopedAdminMixin, admin.ModelAdmin):
    """A window, member or teacher row on a page of its own (for links and the scoping tests):
    rows are added on the course's page; a change or a delete here goes through the course
    services like the course page's."""

    list_select_related: ClassVar[tuple[str, ...]] = ("course",)
    fixed: ClassVar[tuple[str, ...]] = ("course",)

    def has_module_permission(self, request):
        return False

    def has_add_permission(self, request, *args):
        return False  # added on the course's page, where the course services' checks run

    def get_readonly_fields(self, request, obj=None):
        return self.fixed

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(CourseWindow)
class CourseWindowAdmin(_CoursePartAdmin):
    list_display = ("course", "kind", "starts_at", "ends_at")

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        window = self.get_object(request, object_id) if object_id else None
        with timezone.override(ZoneInfo(_zone(window.course if window else None))):
            response = super().changeform_view(request, object_id, form_url, extra_context)
            if isinstance(response, TemplateResponse):
                response.render()
        return response

    def save_model(self, request, obj, form, change):
        stored = CourseWindow.objects.select_related("course").get(pk=obj.pk)
        course_window_remove(window=stored, request=request)  # no update service: re-added
        added = course_window_add(
            course=stored.course,
            kind=obj.kind,
            starts_at=obj.starts_at,
            ends_at=obj.ends_at,
            request=request,
        )
        obj.pk = added.pk

    def delete_model(self, request, obj):
        course_window_remove(window=obj, request=request)


@admin.register(CourseMember)
class CourseMemberAdmin(_CoursePartAdmin):
    list_display = ("course", "student", "paused", "top_up")
    list_select_related = ("course", "end_user")
    fixed = ("course", "student")
    exclude = ("end_user",)  # shown as `student`, by name and e-mail

    def get_changelist(self, request, **kwargs):
        return PeopleChangeList

    @admin.display(description=_("student"))
    def student(self, obj):
        person = row_person(obj, obj.end_user)
        return person.label() if person is not None else "-"

    def save_model(self, request, obj, form, change):
        changes = {n: form.cleaned_data[n] for n in MEMBER_FIELDS if n in form.changed_data}
        course_member_update(member=obj, changes=changes, request=request)

    def delete_model(self, request, obj):
        course_member_remove(member=obj, request=request)

    def has_add_permission(self, request, *args):
        return not _teacher(request) and super().has_add_permission(request, *args)

    def has_delete_permission(self, request, obj=None):
        return not _teacher(request) and super().has_delete_permission(request, obj)


@admin.register(CourseTeacher)
class CourseTeacherAdmin(_CoursePartAdmin):
    list_display = ("course", "teacher")
    list_select_related = ("course", "user")
    fixed = ("course", "teacher")
    exclude = ("user",)  # shown as `teacher`, by name and e-mail

    @admin.display(description=_("teacher"))
    def teacher(self, obj):
        return staff_person(obj.user).label()

    def save_model(self, request, obj, form, change):
        pass  # nothing of a teacher row changes; it is added or removed

    def delete_model(self, request, obj):
        course_teacher_remove(teacher=obj, request=request)
