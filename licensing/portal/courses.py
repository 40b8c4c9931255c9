"""Reads for the portal's course page (`/portal/courses/<id>/`, issue 26): who may see a course
and as what (a member: the learner view; a teacher of it or an admin of its institution: the
instructor view; anyone else: nothing, a 404), a student's levels in it (their allowance, the
course pool, the license) as the budget step reads them, the course's state at an instant (the
same snapshot and decisions as /v1, licensing.courses.selectors and licensing.courses.rules) and
its settings in words for its teachers. Times are shown in the institution's time zone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils.translation import gettext, gettext_noop

from catalog.registry import service_label
from core import clock
from core.languages import grouped

from ..access.scoping import owns, scope_of
from ..courses.rules import has_ended, in_exam, is_open, next_opening
from ..courses.selectors import course_rules
from ..ledger.budget import course_levels_usage, course_window_start
from ..models import Course, CourseMember, CourseTeacher, CourseWindow, EndUser
from ..rules.money import Rate
from ..rules.policy import Policy
from .selectors import SpendFigures, WalletView, course_policy, institution_rate, wallet_view

LEARNER = "learner"
INSTRUCTOR = "instructor"


@dataclass(frozen=True)
class CourseAccess:
    course: Course
    role: str  # LEARNER or INSTRUCTOR
    end_user: EndUser | None  # the learner's end user (a member); None for an instructor


def zone_of(course: Course) -> ZoneInfo:
    """The institution's zone; one this host does not know shows UTC (still exact instants)."""
    try:
        return ZoneInfo(course.institution.timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def course_access(user, course_id: int) -> CourseAccess | None:
    """What `user` may see of the course: a teacher of it (CourseTeacher) or an admin of its
    institution (scoping's `owns`) sees the instructor view; a member (through an active end
    user on an active license) the learner view; anyone else None (a 404: another course's or
    another institution's ids are not told apart from ids that do not exist)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    course = (
        Course.objects.select_related("institution", "license__license_type")
        .filter(pk=course_id)
        .first()
    )
    if course is None:
        return None
    if CourseTeacher.objects.filter(course=course, user=user).exists():
        return CourseAccess(course, INSTRUCTOR, None)
    scope = scope_of(user)
    if scope.is_institution_admin and owns(scope, course):
        return CourseAccess(course, INSTRUCTOR, None)
    member = (
        CourseMember.objects.select_related("end_user__license__institution")
        .filter(
            course=course,
            end_user__user=user,
            end_user__active=True,
            end_user__license__active=True,
            end_user__license__license_type__active=True,
        )
        .first()
    )
    if member is not None:
        return CourseAccess(course, LEARNER, member.end_user)
    return None


# --- a student's levels -----------------------------------------------------------------------

# A length from a period's start that always lands in the next period (a day is 23 to 25 hours
# long); course_window_start of that instant is the next period's start.
_INTO_NEXT = {
    "day": timedelta(hours=26),
    "week": timedelta(days=7, hours=2),
    "month": timedelta(days=32),
}


@dataclass(frozen=True)
class Level(SpendFigures):
    """One level a course key pays at, as the budget step reads it."""

    name: str
    period: str  # day, week, month
    limit: int | None
    used: int
    remaining: int | None
    window_start: datetime
    resets_at: datetime
    rate: Rate


@dataclass(frozen=True)
class CourseLevels:
    allowance: Level
    pool: Level | None
    license: WalletView

    @property
    def remaining(self) -> int | None:
        """What `credits_remaining` says on /v1 (before a request's own charge): the smallest
        remaining across the levels; None only when every level is unlimited."""
        values = [self.allowance.remaining, self.license.remaining]
        if self.pool is not None:
            values.append(self.pool.remaining)
        limited = [v for v in values if v is not None]
        return min(limited) if limited else None

    @property
    def remaining_text(self) -> str:
        return "" if self.remaining is None else grouped(self.remaining)

    @property
    def remaining_money(self) -> str:
        return self.allowance.rate.format(self.remaining)

    @property
    def limited_by(self) -> str:
        """The level whose remaining is the smallest ("" when all are unlimited)."""
        remaining = self.remaining
        if remaining is None:
            return ""
        for name, value in (
            (gettext_noop("your allowance"), self.allowance.remaining),
            (gettext_noop("the course pool"), self.pool.remaining if self.pool else None),
            (gettext_noop("the license"), self.license.remaining),
        ):
            if value == remaining:
                return name
        return ""  # pragma: no cover - one of them is the minimum


def course_levels_of(
    course: Course, end_user: EndUser, now: datetime | None = None
) -> CourseLevels | None:
    """The student's allowance and the course pool in this period (the wallets a request by
    their course key reads: course:<id>:user:<end user id> and course:<id>) and the license's
    wallet (user:<end user id>, the portal's wallet view). None: the course is gone."""
    now = now or clock.utcnow()
    holder = f"user:{end_user.pk}"
    levels = course_levels_usage(
        course.pk, end_user_id=end_user.pk, license_id=course.license_id, holder=holder, now=now
    )
    if levels is None:
        return None
    rate = institution_rate(course.institution)
    tz = course.institution.timezone or "UTC"

    def level(name: str, usage: dict) -> Level:
        start = datetime.fromisoformat(usage["window_start"])
        return Level(
            name=name,
            period=usage["period"],
            limit=usage["limit"],
            used=usage["used"],
            remaining=usage["remaining"],
            window_start=start,
            resets_at=course_window_start(usage["period"], start + _INTO_NEXT[usage["period"]], tz),
            rate=rate,
        )

    allowance, pool = levels
    return CourseLevels(
        allowance=level("allowance", allowance),
        pool=level("pool", pool) if pool is not None else None,
        license=wallet_view(end_user, now=now),
    )


# --- the course's state now -----------------------------------------------------------------


@dataclass(frozen=True)
class CourseState:
    open: bool  # open for everyone (active, inside an access window when it has any)
    opens_at: datetime | None  # closed: the next access window's start, if any
    exam: bool  # exam mode in force (the switch or an exam window)
    exam_switch: bool  # the teacher's switch
    exam_allows: bool  # exam mode has an exam policy (narrower), not every service off
    paused: bool  # this student is paused
    broken: bool  # the overlay or the exam policy cannot be evaluated (503 on /v1)
    ended_at: datetime | None = None  # past its end: its keys no longer work


def course_state(
    course: Course, *, end_user: EndUser | None = None, now: datetime | None = None
) -> CourseState:
    """The course at `now` as the /v1 gate sees it (licensing.courses.rules.course_gate, on the
    same cached snapshot)."""
    now = now or clock.utcnow()
    rules = course_rules(course.pk)
    if rules is None:  # pragma: no cover - deleted while the page was being built
        return CourseState(False, None, False, False, False, False, False)
    exam = in_exam(rules, now)
    opened = is_open(rules, now)
    ended = has_ended(rules, now)
    return CourseState(
        open=opened,
        opens_at=None if opened or ended or not rules.active else next_opening(rules, now),
        exam=exam,
        exam_switch=rules.exam_mode,
        exam_allows=rules.exam_policy is not None,
        paused=end_user is not None and end_user.pk in rules.paused,
        broken=(rules.exam_policy_broken if exam else rules.policy_broken),
        ended_at=rules.ends_at if ended else None,
    )


# --- the settings in words, for teachers ------------------------------------------------------


@dataclass(frozen=True)
class ServiceWords:
    service: str
    providers: str
    models: str

    @property
    def label(self) -> str:
        return service_label(self.service)


def policy_in_words(policy: Policy | None) -> list[ServiceWords]:
    """The services a policy enables, with the providers and the models it allows."""
    if policy is None:
        return []
    found = []
    for service, rules in sorted(policy.services.items()):
        every = gettext("any")
        providers = every if rules.providers is None else ", ".join(sorted(rules.providers))
        # The first model rule holds the merged values of every model rule in force
        # (licensing.rules.scopes.conjoin); a later one is a patterns list of its own.
        model = next((rule for rule in rules.rules if rule.name == "model"), None)
        found.append(ServiceWords(service, providers, _models_in_words(model)))
    return found


def _models_in_words(rule) -> str:
    if rule is None:
        return gettext("any")
    if rule.forbidden:
        return gettext("none")
    if rule.allowed is not None:
        return ", ".join(str(v) for v in rule.allowed)
    if rule.patterns is not None:
        return gettext("matching %(patterns)s") % {
            "patterns": ", ".join(p.pattern for p in rule.patterns)
        }
    if rule.excluded is not None:
        return gettext("any but %(models)s") % {"models": ", ".join(str(v) for v in rule.excluded)}
    return gettext("any")


@dataclass(frozen=True)
class WindowRow:
    kind: str
    starts_at: datetime
    ends_at: datetime
    now: bool  # `now` falls inside it


@dataclass(frozen=True)
class CourseSettings:
    rate: Rate
    windows: list[WindowRow]
    services: list[ServiceWords]  # the course's policy (its overlay applied)
    exam_services: list[ServiceWords]  # what exam mode allows (empty: nothing)
    has_overlay: bool

    @staticmethod
    def credits(rate: Rate, value: int | None) -> str:
        if value is None:
            return gettext("no limit")
        return gettext("%(credits)s micro-credits (%(money)s)") % {
            "credits": grouped(value),
            "money": rate.format(value),
        }


def course_settings(course: Course, now: datetime | None = None) -> CourseSettings:
    now = now or clock.utcnow()
    rules = course_rules(course.pk)
    windows = [
        WindowRow(w.get_kind_display(), w.starts_at, w.ends_at, w.starts_at <= now < w.ends_at)
        for w in CourseWindow.objects.filter(course=course).order_by("starts_at", "pk")
    ]
    return CourseSettings(
        rate=institution_rate(course.institution),
        windows=windows,
        services=policy_in_words(course_policy(course)),
        exam_services=policy_in_words(rules.exam_policy if rules is not None else None),
        has_overlay=bool(course.policy),
    )


# --- the dashboard's list ---------------------------------------------------------------------


@dataclass(frozen=True)
class MyCourse:
    course: Course
    levels: CourseLevels | None


def courses_of(end_user: EndUser, now: datetime | None = None) -> list[MyCourse]:
    """The student's courses (their memberships as this end user), with their levels."""
    now = now or clock.utcnow()
    courses = Course.objects.select_related("institution", "license").filter(
        members__end_user=end_user, active=True
    )
    return [MyCourse(c, course_levels_of(c, end_user, now=now)) for c in courses.order_by("code")]
