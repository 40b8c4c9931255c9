"""A course's rules as every request reads them: a snapshot per course in a TTLCache.

Like the license snapshot (credentials.LicenseInfo) it is read from the cache on the hot path
and rebuilt from the database on a miss. A save or delete of a course, one of its windows or
one of its members goes through licensing.signals → core.localcache.clear_all, which
clears this process's caches at once and every other worker's within POLL_INTERVAL (the
generation file) or at once (Redis): a teacher's exam switch is in force everywhere within a
second, whatever the TTL. Windows are kept as instants and compared with the request's own
instant, so a window opening or closing needs no invalidation at all.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Q

from core import clock
from core.db import run_db
from core.localcache import TTLCache

from ..ledger.budget import course_levels_usage
from ..models import Course, CourseMember, CourseWindow, EndUser
from .rules import CourseRules, compile_course_policies, in_exam, is_open

_course_cache = TTLCache("course-rules", max_entries=5000)


def course_rules(course_id: int) -> CourseRules | None:
    """The snapshot of a course (None: no such course); from the cache, else the database."""
    cached = _course_cache.get(course_id)
    if cached is not None:
        return cached
    generation = _course_cache.generation
    row = (
        Course.objects.select_related("institution", "license__license_type")
        .filter(pk=course_id)
        .first()
    )
    if row is None:
        return None
    policy, policy_broken, exam_policy, broken = compile_course_policies(
        row.license.license_type.policy, row.policy, row.exam_policy
    )
    access: list = []
    exam: list = []
    for kind, starts_at, ends_at in CourseWindow.objects.filter(course_id=course_id).values_list(
        "kind", "starts_at", "ends_at"
    ):
        (exam if kind == CourseWindow.Kind.EXAM else access).append((starts_at, ends_at))
    paused = CourseMember.objects.filter(course_id=course_id, paused=True).values_list(
        "end_user_id", flat=True
    )
    rules = CourseRules(
        id=row.pk,
        code=row.code,
        active=row.active,
        exam_mode=row.exam_mode,
        exam_policy=exam_policy,
        exam_policy_broken=broken,
        access_windows=tuple(access),
        exam_windows=tuple(exam),
        paused=frozenset(paused),
        timezone=row.institution.timezone or "UTC",
        policy=policy,
        policy_broken=policy_broken,
        name=row.name,
        instructions=row.instructions,
        ends_at=row.ends_at,
    )
    _course_cache.set(course_id, rules, generation)
    return rules


async def course_rules_async(course_id: int) -> CourseRules | None:
    """The same, without blocking the event loop: a cache hit costs no thread hop."""
    cached = _course_cache.get(course_id)
    if cached is not None:
        return cached
    return await run_db(course_rules, course_id)


def course_summary(
    course_id: int,
    *,
    end_user_id: int | None,
    license_id: int,
    holder: str,
    now: datetime | None = None,
) -> dict | None:
    """The `course` object of GET /v1/license for a course credential: the course, whether it
    is open and in exam mode (the switch or an exam window) at `now`, and this caller's
    allowance and the course pool as the budget step reads them. None: the course is gone."""
    now = now or clock.utcnow()
    rules = course_rules(course_id)
    levels = course_levels_usage(
        course_id, end_user_id=end_user_id, license_id=license_id, holder=holder, now=now
    )
    if rules is None or levels is None:
        return None
    allowance, pool = levels
    return {
        "id": rules.id,
        "code": rules.code,
        "name": rules.name,
        "exam_mode": in_exam(rules, now),
        "open": is_open(rules, now),
        "allowance": allowance,
        "pool": pool,
    }


def student_candidates(course: Course):
    """Who may become a member of `course`: the end users of its license (member_problem's
    rule), for the course page's autocomplete and its form's choices."""
    return EndUser.objects.filter(license_id=course.license_id).select_related("license")


def teacher_candidates(course: Course):
    """Who may teach `course`: the staff of its institution (teacher_problem's rule), and those
    who teach it already (a superuser among them keeps their row valid)."""
    return (
        get_user_model()
        .objects.filter(
            Q(gateway_profile__institution_id=course.institution_id)
            | Q(taught_courses__course_id=course.pk)
        )
        .distinct()
    )
