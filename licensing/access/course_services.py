"""Every change to a course, by whoever makes it (the admin, the management API, the portal's
instructor page, an LTI launch, the operator commands): keyword-only functions under
`transaction.atomic` that validate, save through the model (so licensing.signals clears every
worker's course caches: a teacher's exam switch is in force everywhere within a second) and
write the audit row. A refusal is a `django.core.exceptions.ValidationError` whose message
dict names the field; callers show it as a form error or a 400.

Who may change which field is decided here too (`editable_fields`): a teacher runs their course
(name, allowance, pool, windows, exam mode, the overlay, members' pauses and top-ups) but never
moves it to another license or renames its code; its overlay may only narrow the license type's
policy (licensing.rules.courses.overlay_problems, run by `Course.clean`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from ..models import ApiKey, AuditEvent, Course, CourseMember, CourseTeacher, CourseWindow, EndUser
from .audit import audit_event_record
from .changes import audit_api_key
from .credentials import api_key_create
from .scoping import TEACHER, Scope

# The fields of a course a change may name, and those a teacher may change.
COURSE_FIELDS = (
    "name",
    "code",
    "license",
    "allowance",
    "allowance_period",
    "pool_limit",
    "policy",
    "exam_mode",
    "exam_policy",
    "active",
)
TEACHER_FIELDS = frozenset(
    {"name", "allowance", "allowance_period", "pool_limit", "policy", "exam_mode", "exam_policy"}
)
MEMBER_FIELDS = ("paused", "top_up", "top_up_window_start")


def editable_fields(scope: Scope) -> frozenset[str]:
    return TEACHER_FIELDS if scope.role == TEACHER else frozenset(COURSE_FIELDS)


def _plain(course: Course, name: str) -> Any:
    return course.license_id if name == "license" else getattr(course, name)


def _who(request, actor_name: str) -> dict[str, Any]:
    return {"request": request, "actor_name": actor_name}


def _full_clean(obj) -> None:
    try:
        obj.full_clean()
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from exc


@transaction.atomic
def course_create(
    *,
    license,
    name: str,
    code: str,
    allowance: int | None = None,
    allowance_period: str = Course.Period.DAY,
    pool_limit: int | None = None,
    policy: dict | None = None,
    exam_policy: dict | None = None,
    request=None,
    actor_name: str = "",
) -> Course:
    """A course under `license` (in the license's institution)."""
    course = Course(
        institution_id=license.institution_id,
        license=license,
        name=name,
        code=code,
        allowance=allowance,
        allowance_period=allowance_period,
        pool_limit=pool_limit,
        policy=policy if policy is not None else {},
        exam_policy=exam_policy,
    )
    _full_clean(course)
    course.save()
    audit_event_record(
        action=AuditEvent.Action.COURSE_CREATED,
        institution=course.institution_id,
        target=f"course:{course.pk}",
        detail={"code": course.code, "after": {f: _plain(course, f) for f in COURSE_FIELDS}},
        **_who(request, actor_name),
    )
    return course


@transaction.atomic
def course_update(
    *,
    course: Course,
    changes: dict[str, Any],
    scope: Scope | None = None,
    request=None,
    actor_name: str = "",
) -> Course:
    """Apply `changes` (field name → new value; `license` takes a License) to the course, as
    `scope` may (None: an operator, every field). Exam mode switched is its own audit row."""
    allowed = editable_fields(scope) if scope is not None else frozenset(COURSE_FIELDS)
    refused = {name: "This field cannot be changed here." for name in changes}
    refused = {name: why for name, why in refused.items() if name not in allowed}
    if refused:
        raise ValidationError(refused)
    locked = Course.objects.select_for_update().select_related("license").get(pk=course.pk)
    before = {name: _plain(locked, name) for name in COURSE_FIELDS}
    for name, value in changes.items():
        setattr(locked, name, value)
    _full_clean(locked)
    after = {name: _plain(locked, name) for name in COURSE_FIELDS}
    changed = [name for name in COURSE_FIELDS if before[name] != after[name]]
    if not changed:
        return locked
    locked.save()
    if "exam_mode" in changed:
        audit_event_record(
            action=AuditEvent.Action.EXAM_MODE_CHANGED,
            institution=locked.institution_id,
            target=f"course:{locked.pk}",
            detail={"code": locked.code, "exam_mode": locked.exam_mode},
            **_who(request, actor_name),
        )
    rest = [name for name in changed if name != "exam_mode"]
    if rest:
        audit_event_record(
            action=AuditEvent.Action.COURSE_CHANGED,
            institution=locked.institution_id,
            target=f"course:{locked.pk}",
            detail={
                "code": locked.code,
                "before": {name: before[name] for name in rest},
                "after": {name: after[name] for name in rest},
            },
            **_who(request, actor_name),
        )
    return locked


@transaction.atomic
def course_delete(*, course: Course, request=None, actor_name: str = "") -> None:
    """Delete the course with its windows, members and keys; its ledger rows stay (their
    `course` becomes empty, the rows and their credits do not change)."""
    detail = {"code": course.code, "before": {f: _plain(course, f) for f in COURSE_FIELDS}}
    institution_id, pk = course.institution_id, course.pk
    course.delete()
    audit_event_record(
        action=AuditEvent.Action.COURSE_DELETED,
        institution=institution_id,
        target=f"course:{pk}",
        detail=detail,
        **_who(request, actor_name),
    )


# --- windows ----------------------------------------------------------------------------------


def _window_detail(window: CourseWindow) -> dict[str, Any]:
    return {
        "kind": window.kind,
        "starts_at": window.starts_at.isoformat(),
        "ends_at": window.ends_at.isoformat(),
    }


@transaction.atomic
def course_window_add(
    *,
    course: Course,
    starts_at: datetime,
    ends_at: datetime,
    kind: str = CourseWindow.Kind.ACCESS,
    request=None,
    actor_name: str = "",
) -> CourseWindow:
    window = CourseWindow(course=course, kind=kind, starts_at=starts_at, ends_at=ends_at)
    _full_clean(window)
    window.save()
    audit_event_record(
        action=AuditEvent.Action.COURSE_WINDOW_CHANGED,
        institution=course.institution_id,
        target=f"course:{course.pk}",
        detail={"code": course.code, "added": _window_detail(window), "window": window.pk},
        **_who(request, actor_name),
    )
    return window


@transaction.atomic
def course_window_remove(*, window: CourseWindow, request=None, actor_name: str = "") -> None:
    course = window.course
    detail = {"code": course.code, "removed": _window_detail(window), "window": window.pk}
    window.delete()
    audit_event_record(
        action=AuditEvent.Action.COURSE_WINDOW_CHANGED,
        institution=course.institution_id,
        target=f"course:{course.pk}",
        detail=detail,
        **_who(request, actor_name),
    )


# --- members ----------------------------------------------------------------------------------


def _member_audit(member: CourseMember, change: dict[str, Any], request, actor_name: str):
    audit_event_record(
        action=AuditEvent.Action.COURSE_MEMBER_CHANGED,
        institution=member.course.institution_id,
        target=f"course:{member.course_id}",
        detail={"code": member.course.code, "end_user": member.end_user_id, **change},
        **_who(request, actor_name),
    )


def member_problem(course: Course, end_user: EndUser) -> str | None:
    """Why `end_user` cannot be a member of `course` (None: they can); for forms to ask first."""
    if end_user.license_id != course.license_id:
        return "The student is not on this course's license."
    return None


@transaction.atomic
def course_member_add(
    *, course: Course, end_user: EndUser, request=None, actor_name: str = ""
) -> tuple[CourseMember, bool]:
    """Make `end_user` (on the course's license) a member; (member, created)."""
    problem = member_problem(course, end_user)
    if problem:
        raise ValidationError({"student": problem})
    member, created = CourseMember.objects.get_or_create(course=course, end_user=end_user)
    if created:
        _member_audit(member, {"added": True}, request, actor_name)
    return member, created


@transaction.atomic
def course_member_update(
    *, member: CourseMember, changes: dict[str, Any], request=None, actor_name: str = ""
) -> CourseMember:
    """A pause, or a top-up for one period (`top_up`, `top_up_window_start`)."""
    refused = {name: "This field cannot be changed." for name in changes}
    refused = {name: why for name, why in refused.items() if name not in MEMBER_FIELDS}
    if refused:
        raise ValidationError(refused)
    locked = CourseMember.objects.select_for_update().select_related("course").get(pk=member.pk)
    before = {name: getattr(locked, name) for name in MEMBER_FIELDS}
    for name, value in changes.items():
        setattr(locked, name, value)
    _full_clean(locked)
    changed = [name for name in MEMBER_FIELDS if before[name] != getattr(locked, name)]
    if not changed:
        return locked
    locked.save()

    def shown(value):
        return value.isoformat() if isinstance(value, datetime) else value

    _member_audit(
        locked,
        {
            "before": {name: shown(before[name]) for name in changed},
            "after": {name: shown(getattr(locked, name)) for name in changed},
        },
        request,
        actor_name,
    )
    return locked


@transaction.atomic
def course_member_remove(*, member: CourseMember, request=None, actor_name: str = "") -> int:
    """Take the student out of the course; their keys for this course are revoked (saved one
    by one, so every worker's credential cache drops them). Returns how many were revoked."""
    revoked = 0
    for key in ApiKey.objects.select_for_update().filter(
        course_id=member.course_id, end_user_id=member.end_user_id, active=True
    ):
        key.active = False
        key.save(update_fields=["active", "updated_at"])
        audit_api_key(key, created=False, via="course member removed", **_who(request, actor_name))
        revoked += 1
    course = member.course
    member.delete()
    member.course = course
    _member_audit(member, {"removed": True, "keys_revoked": revoked}, request, actor_name)
    return revoked


# --- keys and teachers ------------------------------------------------------------------------


@transaction.atomic
def course_key_create(
    *,
    course: Course,
    end_user: EndUser,
    name: str = "",
    expires_at: datetime | None = None,
    via: str,
    request=None,
    actor_name: str = "",
) -> tuple[ApiKey, str]:
    """A key of a member of the course: it pays at the student's allowance, the course pool and
    the license. Returns (row, full key); the key is shown once and never stored."""
    if not CourseMember.objects.filter(course=course, end_user=end_user).exists():
        raise ValidationError({"student": "The student is not a member of this course."})
    row, key = api_key_create(
        license=course.license, name=name, expires_at=expires_at, end_user=end_user, course=course
    )
    audit_api_key(
        row,
        created=True,
        via=via,
        extra={"course": course.pk, "end_user": end_user.pk},
        **_who(request, actor_name),
    )
    return row, key


def teacher_problem(course: Course, user) -> str | None:
    """Why `user` cannot teach `course` (None: they can); for forms to ask first."""
    profile = getattr(user, "gateway_profile", None)
    if not user.is_superuser and (
        profile is None or profile.institution_id != course.institution_id
    ):
        return "The user is not staff of this course's institution."
    return None


@transaction.atomic
def course_teacher_add(
    *, course: Course, user, request=None, actor_name: str = ""
) -> tuple[CourseTeacher, bool]:
    """Make a staff user of the course's institution one of its teachers."""
    problem = teacher_problem(course, user)
    if problem:
        raise ValidationError({"user": problem})
    teacher, created = CourseTeacher.objects.get_or_create(course=course, user=user)
    if created:
        audit_event_record(
            action=AuditEvent.Action.ROLE_CHANGED,
            institution=course.institution_id,
            target=f"user:{user.pk}",
            detail={"change": f"teacher of course {course.pk}", "code": course.code},
            **_who(request, actor_name),
        )
    return teacher, created


@transaction.atomic
def course_teacher_remove(*, teacher: CourseTeacher, request=None, actor_name: str = "") -> None:
    """The user no longer teaches the course (their account stays)."""
    course, user_id = teacher.course, teacher.user_id
    teacher.delete()
    audit_event_record(
        action=AuditEvent.Action.ROLE_CHANGED,
        institution=course.institution_id,
        target=f"user:{user_id}",
        detail={"change": f"no longer teacher of course {course.pk}", "code": course.code},
        **_who(request, actor_name),
    )
