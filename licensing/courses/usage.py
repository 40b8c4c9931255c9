"""Per-student usage of one course, for its teachers: one reader for the admin's course page,
the portal's instructor view and `GET /manage/v1/courses/{id}/usage`.

What a teacher sees is counts, credits, models and times from the ledger (rows with
`Transaction.course` = the course), and each member's spend in the current allowance period
from their allowance wallet (`course:<id>:user:<end user id>`). Never prompts or answers: the
ledger holds none. `requests` counts the rows the gateway did not refuse (answered, or failed at
the provider or on the client's input); `refusals` counts the rows it refused (budget, policy,
a closed course, exam mode, a paused member).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, Q, Sum

from core import clock

from ..ledger.budget import course_holders, course_window_start
from ..models import Course, CourseMember, EndUser, Outcome, Transaction, Wallet

NO_STUDENT = "(course keys without a student)"


@dataclass(frozen=True)
class StudentUsage:
    end_user_id: int | None  # None: rows of the course's service keys (no student)
    student: str  # the portal user's name or e-mail, else the end user's subject
    member: bool  # still a member of the course
    paused: bool
    requests: int
    refusals: int
    credits: int
    models: tuple[str, ...]  # requested models, most used first
    first_at: datetime | None
    last_at: datetime | None
    period_used: int  # spent in the current allowance period
    allowance: int | None  # the allowance of the current period (top-up included); None: no limit

    @property
    def period_remaining(self) -> int | None:
        if self.allowance is None:
            return None
        return max(0, self.allowance - self.period_used)


@dataclass(frozen=True)
class CourseUsage:
    course_id: int
    since: datetime | None
    until: datetime | None
    period: str
    period_start: datetime
    rows: list[StudentUsage]  # members first (by name), then former members and service keys

    @property
    def requests(self) -> int:
        return sum(row.requests for row in self.rows)

    @property
    def refusals(self) -> int:
        return sum(row.refusals for row in self.rows)

    @property
    def credits(self) -> int:
        return sum(row.credits for row in self.rows)


def _student_name(end_user) -> str:
    user = end_user.user
    if user is not None:
        full = user.get_full_name().strip()
        return full or user.email or user.get_username()
    return end_user.subject


def course_usage(
    course: Course,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
) -> CourseUsage:
    """One row per member (those who never used the course included) and per other end user
    with rows in the course, between `since` (inclusive) and `until` (exclusive); None: no
    bound. Four queries, whatever the size of the course."""
    now = now or clock.utcnow()
    tz = course.institution.timezone or "UTC"
    period_start = course_window_start(course.allowance_period, now, tz)
    rows = _ledger_rows(course, since, until)
    totals = _totals_by_end_user(rows)
    models = _models_by_end_user(rows)
    members = {
        m.end_user_id: m
        for m in CourseMember.objects.filter(course_id=course.pk).select_related("end_user__user")
    }
    end_user_ids = set(members) | {k for k in totals if k is not None}
    tables = UsageTables(
        course=course,
        tz=tz,
        period_start=period_start,
        totals=totals,
        models=models,
        period_used=_period_used(course, end_user_ids, period_start),
    )
    others = _other_end_users(course, [k for k in totals if k is not None and k not in members])
    result = _by_name(
        tables.row_of(eu_id, m, _student_name(m.end_user)) for eu_id, m in members.items()
    )
    result += _by_name(
        tables.row_of(eu_id, None, _student_name(eu)) for eu_id, eu in others.items()
    )
    if None in totals:
        result.append(tables.row_of(None, None, NO_STUDENT))
    return CourseUsage(
        course_id=course.pk,
        since=since,
        until=until,
        period=course.allowance_period,
        period_start=period_start,
        rows=result,
    )


def _ledger_rows(course: Course, since: datetime | None, until: datetime | None):
    rows = Transaction.objects.filter(course_id=course.pk)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    return rows


def _totals_by_end_user(rows) -> dict[int | None, dict]:
    """Counts, credits and first and last times of the rows, by end user (one query)."""
    denied = Q(outcome=Outcome.DENIED)
    return {
        row["end_user_id"]: dict(row)
        for row in rows.values("end_user_id")
        .annotate(
            requests=Count("id", filter=~denied),
            refusals=Count("id", filter=denied),
            credits=Sum("credits"),
            first_at=Min("created_at"),
            last_at=Max("created_at"),
        )
        .order_by()
    }


def _models_by_end_user(rows) -> dict[int | None, list[tuple[int, str]]]:
    """(minus the count, model) of each requested model, by end user (one query): sorted,
    the most used first."""
    models: dict[int | None, list[tuple[int, str]]] = {}
    for row in (
        rows.exclude(requested_model="")
        .values("end_user_id", "requested_model")
        .annotate(n=Count("id"))
        .order_by()
    ):
        models.setdefault(row["end_user_id"], []).append((-row["n"], row["requested_model"]))
    return models


def _period_used(course: Course, end_user_ids: set[int], period_start: datetime) -> dict[int, int]:
    """What each end user spent in the current allowance period, from their course wallet."""
    wallet_holders = {
        course_holders(course.pk, f"user:{end_user_id}")[0]: end_user_id
        for end_user_id in end_user_ids
    }
    return {
        wallet_holders[holder]: spent
        for holder, spent in Wallet.objects.filter(
            license_id=course.license_id,
            holder__in=list(wallet_holders),
            period=course.allowance_period,
            window_start=period_start,
        ).values_list("holder", "spent")
    }


def _other_end_users(course: Course, end_user_ids: list[int]) -> dict[int, EndUser]:
    """End users with rows in the course who are no members (any more)."""
    return {
        eu.pk: eu
        for eu in course.license.end_users.filter(pk__in=end_user_ids).select_related("user")
    }


def _by_name(rows: Iterable[StudentUsage]) -> list[StudentUsage]:
    return sorted(rows, key=lambda r: (r.student.casefold(), r.end_user_id or 0))


@dataclass(frozen=True)
class UsageTables:
    """What course_usage read, by end user, and makes one row of."""

    course: Course
    tz: str
    period_start: datetime
    totals: dict[int | None, dict]
    models: dict[int | None, list[tuple[int, str]]]
    period_used: dict[int, int]

    def allowance_of(self, member: CourseMember | None) -> int | None:
        """The course's allowance, with the member's top-up when it is of this period."""
        course = self.course
        if course.allowance is None:
            return None
        extra = 0
        if member is not None and member.top_up and member.top_up_window_start is not None:
            start = course_window_start(
                course.allowance_period, member.top_up_window_start, self.tz
            )
            if start == self.period_start:
                extra = member.top_up
        return course.allowance + extra

    def row_of(
        self, end_user_id: int | None, member: CourseMember | None, name: str
    ) -> StudentUsage:
        total: dict = self.totals.get(end_user_id, {})
        used = sorted(self.models.get(end_user_id, []))
        return StudentUsage(
            end_user_id=end_user_id,
            student=name,
            member=member is not None,
            paused=bool(member and member.paused),
            requests=total.get("requests", 0),
            refusals=total.get("refusals", 0),
            credits=total.get("credits") or 0,
            models=tuple(model for _, model in used),
            first_at=total.get("first_at"),
            last_at=total.get("last_at"),
            period_used=self.period_used.get(end_user_id, 0) if end_user_id is not None else 0,
            allowance=self.allowance_of(member) if end_user_id is not None else None,
        )
