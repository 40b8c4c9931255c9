"""Every change to a course, by whoever makes it (the admin, the management API, the portal's
instructor page, an LTI launch, the operator commands): keyword-only functions under
`transaction.atomic` that validate, save through the model (so licensing.signals clears every
worker's course caches: a teacher's exam switch is in force everywhere within a second) and
write the audit row. A refusal is a `django.core.exceptions.ValidationError` whose message
dict names the field; callers show it as a form error or a 400.

Who may change which field is decided here too (`editable_fields`): a teacher runs their course
(name, allowance, pool, windows, exam mode, the overlay, members' pauses and top-ups) but never
moves it to another license or renames its code; its overlay may only narrow the license type's
policy (licensing.courses.rules.overlay_problems, run by `Course.clean`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from core import clock
from core.localcache import clear_all
from core.text import is_storable_text

from ..access.audit import audit_event_record
from ..access.changes import audit_api_key
from ..access.credentials import api_key_create
from ..access.scoping import TEACHER, Scope
from ..models import ApiKey, AuditEvent, Course, CourseMember, CourseTeacher, CourseWindow, EndUser

# The fields of a course a change may name, and those a teacher may change.
COURSE_FIELDS = (
    "name",
    "code",
    "license",
    "allowance",
    "allowance_period",
    "pool_limit",
    "instructions",
    "policy",
    "exam_mode",
    "exam_policy",
    "active",
    "ends_at",
)
TEACHER_FIELDS = frozenset(
    {
        "name",
        "allowance",
        "allowance_period",
        "pool_limit",
        "instructions",
        "policy",
        "exam_mode",
        "exam_policy",
    }
)
MEMBER_FIELDS = ("paused", "top_up", "top_up_window_start")


def editable_fields(scope: Scope) -> frozenset[str]:
    return TEACHER_FIELDS if scope.role == TEACHER else frozenset(COURSE_FIELDS)


def _plain(course: Course, name: str) -> Any:
    """A field's value as the audit row's JSON keeps it."""
    if name == "license":
        return course.license_id
    value = getattr(course, name)
    return value.isoformat() if isinstance(value, datetime) else value


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
    instructions: str = "",
    policy: dict | None = None,
    exam_policy: dict | None = None,
    ends_at=None,
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
        instructions=instructions,
        policy=policy if policy is not None else {},
        exam_policy=exam_policy,
        ends_at=ends_at,
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
    if course_has_ended(course):
        raise ValidationError({"course": _("The course has ended: it takes no new keys.")})
    if not CourseMember.objects.filter(course=course, end_user=end_user).exists():
        raise ValidationError({"student": _("The student is not a member of this course.")})
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


def course_has_ended(course: Course) -> bool:
    """Past its end date: its keys no longer work (licensing.courses.rules.course_gate)."""
    return course.ends_at is not None and clock.utcnow() >= course.ends_at


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


# --- students: who a roster names -------------------------------------------------------------

SUBJECT_MAX = EndUser._meta.get_field("subject").max_length or 500
ROSTER_MAX = 10_000  # students in one roster sync: a big course, far from a flood


def _refuse(message: str, field: str = "student"):
    return ValidationError({field: message})


class Known(NamedTuple):
    """An end user as a roster sync reads it (tuples, not models: 10,000 of them are read)."""

    pk: int
    subject: str
    issuer_id: int | None


def _chunks(values: list) -> Iterator[list]:
    """`values` in pieces a database takes as the parameters of one IN (SQLite: 999 or so)."""
    size = max(100, (connection.features.max_query_params or 20_000) - 10)
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _roster_entry_problem(student: object) -> str | None:
    """What `student_find` would refuse of one entry without reading anything."""
    if isinstance(student, bool) or not isinstance(student, int | str):
        return "Name a student by end user id (a number) or subject (a string)."
    if isinstance(student, str) and (
        not student or len(student) > SUBJECT_MAX or not is_storable_text(student)
    ):
        return f"A subject is 1 to {SUBJECT_MAX} characters, no NUL or surrogates."
    return None


class _Directory:
    """The license's end users that a roster names, read in bulk (one query per chunk of ids
    and of subjects, not one per student), resolved by `student_find`'s rules."""

    def __init__(self, license_id: int):
        self.license_id = license_id
        self.by_id: dict[int, Known] = {}
        self.by_subject: dict[str, list[Known]] = {}

    def load(self, ids: list[int], subjects: list[str]) -> None:
        users = EndUser.objects.filter(license_id=self.license_id).order_by("pk")
        fields = ("pk", "subject", "issuer_id")
        for chunk in _chunks(ids):
            rows = users.filter(pk__in=chunk).values_list(*fields)
            self.by_id.update((row[0], Known(*row)) for row in rows)
        for chunk in _chunks(subjects):
            for row in users.filter(subject__in=chunk).values_list(*fields):
                self.by_subject.setdefault(row[1], []).append(Known(*row))

    def find(self, student: int | str, field: str = "student") -> Known | None:
        if isinstance(student, int):
            found = self.by_id.get(student)
            if found is None:
                raise _refuse(f"No end user {student} on this course's license.", field)
            return found
        matches = self.by_subject.get(student, [])
        without_issuer = [user for user in matches if user.issuer_id is None]
        if without_issuer:
            return without_issuer[0]
        if len(matches) > 1:
            raise _refuse(f"Several end users have the subject {student!r}: name the id.", field)
        return matches[0] if matches else None


def student_find(course: Course, student: object, *, field: str = "student") -> EndUser | None:
    """The end user a roster or key request names, on the course's license: a JSON integer is
    an end user's id; a string is a subject (the LMS's user id). A subject held by several end
    users of the license (a JWT issuer's and the API's or an LTI launch's) means the one without
    an issuer (the LMS's own), else the only one; otherwise the caller must name the id. None: a
    subject not known yet. An id that is not on the license is refused (whoever's it is). The
    rules are `_Directory.find`'s, which a roster sync uses for its whole list at once."""
    problem = _roster_entry_problem(student)
    if problem:
        raise _refuse(problem, field)
    directory = _Directory(course.license_id)
    if isinstance(student, int):
        directory.load([student] if 0 < student < 2**63 else [], [])
    else:
        directory.load([], [cast(str, student)])
    known = directory.find(cast(int | str, student), field)
    return None if known is None else EndUser.objects.get(pk=known.pk)


@transaction.atomic
def student_get_or_create(*, course: Course, subject: str) -> tuple[EndUser, bool]:
    """The end user of `subject` on the course's license, made (issuer empty) if unknown. Two
    requests naming the same new subject at once make one: the license row is locked first
    (FOR NO KEY UPDATE: the ledger's inserts, which only share-lock it, are not held up)."""
    from ..models import License

    License.objects.select_for_update(no_key=True).filter(pk=course.license_id).first()
    found = student_find(course, subject)
    if found is not None:
        return found, False
    return EndUser.objects.create(license_id=course.license_id, subject=subject, issuer=None), True


class Leaving(NamedTuple):
    """A member the sync removes."""

    pk: int
    end_user_id: int
    subject: str


@dataclass(frozen=True)
class RosterPlan:
    add: list[object]  # the students (as named) not members yet
    remove: list[Leaving]
    kept: int


# A sync's whole transaction is bounded (docs/decisions/management-api.md, "Roster sync"): on
# PostgreSQL each statement may take at most this long, and the sync checks the time left
# between its steps; past it, everything is rolled back. 10,000 students take a few seconds.
ROSTER_TIME_LIMIT = 60.0  # seconds


class RosterTooSlow(Exception):
    """The sync ran out of ROSTER_TIME_LIMIT (or PostgreSQL cancelled a statement of it): it was
    rolled back, nothing changed."""

    def __init__(self):
        super().__init__(
            f"The roster sync took longer than {ROSTER_TIME_LIMIT:.0f} s and was rolled back: "
            "nothing changed."
        )


def _roster_entries(students: list[object]) -> None:
    if not isinstance(students, list):
        raise _refuse("A list of end user ids or subjects.", "students")
    if len(students) > ROSTER_MAX:
        raise _refuse(f"At most {ROSTER_MAX} students in one sync.", "students")
    for index, student in enumerate(students):
        problem = _roster_entry_problem(student)
        if problem:
            raise ValidationError({"students": [f"{index}: {problem}"]})


def _roster_plan(course: Course, students: list[object]) -> tuple[RosterPlan, list]:
    _roster_entries(students)
    directory = _Directory(course.license_id)
    ids = sorted({s for s in students if isinstance(s, int) and 0 < s < 2**63})
    directory.load(ids, sorted({s for s in students if isinstance(s, str)}))
    members = {
        row[1]: Leaving(*row)
        for row in CourseMember.objects.filter(course=course).values_list(
            "pk", "end_user_id", "end_user__subject"
        )
    }
    listed: set[int] = set()
    add: list[object] = []
    resolved: list[tuple[object, int | None]] = []
    seen_new: set[str] = set()
    for index, student in enumerate(students):
        try:
            found = directory.find(cast(int | str, student))
        except ValidationError as exc:
            messages = exc.message_dict["student"]
            raise ValidationError({"students": [f"{index}: {m}" for m in messages]}) from exc
        if found is not None:
            if found.pk in listed:
                continue
            listed.add(found.pk)
            if found.pk not in members:
                add.append(student)
                resolved.append((student, found.pk))
        elif student not in seen_new:
            seen_new.add(cast(str, student))
            add.append(student)
            resolved.append((student, None))
    remove = [m for end_user_id, m in members.items() if end_user_id not in listed]
    kept = len(members) - len(remove)
    return RosterPlan(add=add, remove=remove, kept=kept), resolved


def _end_users_for(course: Course, subjects: list[str]) -> tuple[dict[str, int], int]:
    """The end users of new `subjects` on the course's license, made (issuer empty) where none
    exists, as `student_get_or_create` makes one, in bulk: the license row locked first, so two
    syncs or member additions naming the same new subject make one; then read again (one made
    meanwhile is taken) and the rest inserted at once. Returns ({subject: end user}, made)."""
    from ..models import License

    License.objects.select_for_update(no_key=True).filter(pk=course.license_id).first()
    directory = _Directory(course.license_id)
    directory.load([], subjects)
    found = {subject: directory.find(subject) for subject in subjects}
    ids = {subject: user.pk for subject, user in found.items() if user is not None}
    missing = [subject for subject, user in found.items() if user is None]
    made = EndUser.objects.bulk_create(
        [EndUser(license_id=course.license_id, subject=s, issuer=None) for s in missing]
    )
    ids.update((user.subject, user.pk) for user in made)
    if any(user.pk is None for user in made):  # a database that returns no ids from a bulk insert
        again = _Directory(course.license_id)
        again.load([], missing)
        ids.update((subject, cast(Known, again.find(subject)).pk) for subject in missing)
    return ids, len(made)


def _revoke_course_keys(course: Course, end_user_ids: list[int]) -> list[int]:
    """Deactivate the course keys of the end users removed: one UPDATE per chunk (no save per
    key; the caller clears the credential caches once). Returns the keys' ids."""
    revoked: list[int] = []
    for chunk in _chunks(end_user_ids):
        keys = ApiKey.objects.filter(course_id=course.pk, end_user_id__in=chunk, active=True)
        ids = list(keys.select_for_update().values_list("pk", flat=True))
        ApiKey.objects.filter(pk__in=ids).update(active=False, updated_at=timezone.now())
        revoked.extend(ids)
    return revoked


class _Clock:
    """The time left of ROSTER_TIME_LIMIT; on PostgreSQL, also each statement's limit."""

    def __init__(self):
        self.deadline = clock.now() + ROSTER_TIME_LIMIT
        if connection.vendor == "postgresql" and ROSTER_TIME_LIMIT > 0:
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {int(ROSTER_TIME_LIMIT * 1000)}")

    def check(self) -> None:
        if clock.now() >= self.deadline:
            raise RosterTooSlow()


def course_roster_sync(
    *,
    course: Course,
    students: list[object],
    dry_run: bool = False,
    request=None,
    actor_name: str = "",
) -> RosterPlan:
    """Make the course's members exactly `students` (ids or subjects, see `student_find`): the
    missing are added (an unknown subject becomes an end user of the license), members not
    listed are removed and their course keys revoked. `dry_run`: the plan, nothing changed.
    In bulk, one transaction, bounded by ROSTER_TIME_LIMIT (RosterTooSlow: rolled back), one
    audit row with the counts (docs/decisions/management-api.md, "Roster sync")."""
    try:
        return _roster_sync(course, students, dry_run, _who(request, actor_name))
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == "57014":  # query_canceled: the timeout
            raise RosterTooSlow() from exc
        raise


@transaction.atomic
def _roster_sync(course: Course, students: list[object], dry_run: bool, who) -> RosterPlan:
    clock = _Clock()
    # One sync of a course at a time: a second waits and then plans on the first's result.
    Course.objects.select_for_update(no_key=True).filter(pk=course.pk).first()
    plan, resolved = _roster_plan(course, students)
    if dry_run or not (plan.add or plan.remove):
        return plan
    clock.check()
    new = [cast(str, student) for student, end_user in resolved if end_user is None]
    made_for, made = _end_users_for(course, new) if new else ({}, 0)
    added = [end_user or made_for[cast(str, student)] for student, end_user in resolved]
    clock.check()
    CourseMember.objects.bulk_create(
        [CourseMember(course=course, end_user_id=user) for user in added], ignore_conflicts=True
    )
    removed = [member.end_user_id for member in plan.remove]
    revoked = _revoke_course_keys(course, removed) if removed else []
    for chunk in _chunks([member.pk for member in plan.remove]):
        # A raw DELETE: Django's would send a signal per row, and each clears every cache.
        CourseMember.objects.filter(pk__in=chunk)._raw_delete(CourseMember.objects.db)
    clock.check()
    if plan.remove:
        clear_all()  # once, for every member and key above (licensing.signals does it per save)
    audit_event_record(
        action=AuditEvent.Action.COURSE_MEMBER_CHANGED,
        institution=course.institution_id,
        target=f"course:{course.pk}",
        detail={
            "code": course.code,
            "roster_sync": {
                "added": len(added),
                "removed": len(removed),
                "kept": plan.kept,
                "end_users_made": made,
                "keys_revoked": len(revoked),
            },
            "added_end_users": added,
            "removed_end_users": removed,
            "revoked_keys": revoked,
        },
        **who,
    )
    return plan
