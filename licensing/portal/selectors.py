"""Reads for the student portal: who may come in, their wallet, their usage, the models they
may use and where their requests may go. Every read is of the signed-in student's own rows
(`EndUser` found by `user=request.user`); nothing here takes another student's id."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate
from django.utils.translation import gettext_noop

from catalog.routing import Catalog, load_catalog_snapshot
from core import clock
from core.languages import grouped
from core.zones import zone_or_utc

from ..access.reach import ModelAccess, models_reached
from ..courses.selectors import course_rules
from ..ledger.budget import BudgetConfig, budget_usage, next_window_start, window_start
from ..models import (
    AdminProfile,
    ApiKey,
    Course,
    EndUser,
    IdentityProvider,
    Institution,
    Transaction,
)
from ..rules.money import Rate, rate_of
from ..rules.policy import Policy, PolicyDocumentError, compile_policy

USAGE_DAYS = 30
# More providers than this: the login page also finds the institution by e-mail domain.
# An id in a URL: a positive bigint. Anything else (2**64, "abc", NUL) is a 404.
MAX_ID = 2**63 - 1


def portal_end_user(user) -> EndUser | None:
    """The student's end user: active, on an active license of an active license type. A user
    on several student licenses (two institutions) gets the newest."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    return (
        EndUser.objects.select_related("license__institution", "license__license_type")
        .filter(
            user=user,
            active=True,
            license__active=True,
            license__license_type__active=True,
        )
        .order_by("-created_at", "-pk")
        .first()
    )


@dataclass(frozen=True)
class Contact:
    """Whom a signed-in user without student access should ask."""

    institution: Institution | None
    emails: list[str]


def no_access_contact(user) -> Contact:
    """The institution the user came from (an end user of theirs, even inactive, or the
    identity provider they signed in with) and its admins' e-mail addresses."""
    institution = None
    end_user = (
        EndUser.objects.select_related("license__institution")
        .filter(user=user)
        .order_by("-created_at", "-pk")
        .first()
    )
    if end_user is not None:
        institution = end_user.license.institution
    else:
        provider = (
            IdentityProvider.objects.select_related("institution")
            .filter(identities__user=user)
            .first()
        )
        if provider is not None:
            institution = provider.institution
    emails: list[str] = []
    if institution is not None:
        emails = sorted(
            set(
                AdminProfile.objects.filter(
                    institution=institution,
                    role=AdminProfile.Role.ADMIN,
                    user__is_active=True,
                )
                .exclude(user__email="")
                .values_list("user__email", flat=True)
            )
        )
    return Contact(institution=institution, emails=emails)


def institution_rate(institution: Institution) -> Rate:
    return rate_of(institution.currency, institution.micro_credits_per_currency_unit)


# --- the wallet ---------------------------------------------------------------------------


class SpendFigures:
    """How a limit, what was used and what remains are shown (credits and money): shared by the
    license wallet's view and a course level's (licensing.portal.courses.Level)."""

    limit: int | None
    used: int
    remaining: int | None
    rate: Rate

    @property
    def unlimited(self) -> bool:
        return self.limit is None

    @property
    def used_text(self) -> str:
        return grouped(self.used)

    @property
    def remaining_text(self) -> str:
        return "" if self.remaining is None else grouped(self.remaining)

    @property
    def limit_text(self) -> str:
        return "" if self.limit is None else grouped(self.limit)

    @property
    def remaining_money(self) -> str:
        return self.rate.format(self.remaining)

    @property
    def used_money(self) -> str:
        return self.rate.format(self.used)

    @property
    def limit_money(self) -> str:
        return self.rate.format(self.limit)

    @property
    def used_percent(self) -> int:
        if not self.limit:
            return 0
        return min(100, self.used * 100 // self.limit)


# The period words the pages translate where they show a period ({% translate wallet.period %}):
# licenses' budget periods and courses' allowance periods.
PERIOD_WORDS = (
    gettext_noop("daily"),
    gettext_noop("weekly"),
    gettext_noop("monthly"),
    gettext_noop("lifetime"),
    gettext_noop("day"),
    gettext_noop("week"),
    gettext_noop("month"),
)


@dataclass(frozen=True)
class WalletView(SpendFigures):
    pooled: bool  # True: the license's one wallet, shared by everyone on it
    period: str
    limit: int | None  # micro-credits per period; None = unlimited
    used: int
    remaining: int | None
    window_start: datetime | None  # None: lifetime
    resets_at: datetime | None  # None: never (lifetime)
    rate: Rate

    @property
    def period_noun(self) -> str:
        """ "day", "week", "month"; "" for a lifetime budget."""
        return {"daily": "day", "weekly": "week", "monthly": "month"}.get(self.period, "")


def wallet_view(end_user: EndUser, now: datetime | None = None) -> WalletView:
    """What the budget step would read for this student's requests (licensing.ledger.budget):
    the per-user wallet `user:<end user id>` or, on a pooled license, the license's."""
    license = end_user.license
    now = now or clock.utcnow()
    tz = license.institution.timezone or "UTC"
    config = BudgetConfig(
        unit=license.budget_unit,
        strategy=license.budget_strategy,
        period=license.budget_period,
        limit=license.budget_limit,
        timezone=tz,
    )
    usage = budget_usage(
        license_id=license.pk, config=config, holder=f"user:{end_user.pk}", now=now
    )
    lifetime = license.budget_period == "lifetime"
    return WalletView(
        pooled=license.budget_strategy == "pooled",
        period=license.budget_period,
        limit=usage["limit"],
        used=usage["used"],
        remaining=usage["remaining"],
        window_start=None if lifetime else window_start(license.budget_period, now, tz),
        resets_at=next_window_start(license.budget_period, now, tz),
        rate=institution_rate(license.institution),
    )


# --- usage from the ledger ------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    label: str
    requests: int
    credits: int
    money: str

    @property
    def credits_text(self) -> str:
        return grouped(self.credits)

    @property
    def requests_text(self) -> str:
        return grouped(self.requests)


@dataclass(frozen=True)
class Usage:
    days: list[date]
    by_day: list[UsageRow]  # one per day, oldest first, zero days included
    by_model: list[UsageRow]  # most credits first
    total: UsageRow


def usage_of(end_user: EndUser, now: datetime | None = None, course: Course | None = None) -> Usage:
    """The student's ledger rows of the last 30 days (today included) of the institution's
    time zone: counts, credits and money by day and by model. Only counts: the ledger holds no
    prompts or answers. With a `course`: only the rows of that course (made with its course
    keys)."""
    zone = zone_or_utc(end_user.license.institution.timezone)
    now = (now or clock.utcnow()).astimezone(zone)
    today = now.date()
    first = today - timedelta(days=USAGE_DAYS - 1)
    since = datetime.combine(first, time(), tzinfo=zone)
    rows = Transaction.objects.filter(end_user=end_user, created_at__gte=since)
    if course is not None:
        rows = rows.filter(course=course)
    rate = institution_rate(end_user.license.institution)
    per_day = {
        row["day"]: (row["requests"], row["credits"] or 0)
        for row in rows.annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day")
        .annotate(requests=Count("id"), credits=Sum("credits"))
    }
    days = [first + timedelta(days=n) for n in range(USAGE_DAYS)]
    by_day = []
    for day in days:
        requests, credits = per_day.get(day, (0, 0))
        by_day.append(UsageRow(day.isoformat(), requests, credits, rate.format(credits)))
    by_model = [
        UsageRow(
            row["requested_model"] or "(none)",
            row["requests"],
            row["credits"] or 0,
            rate.format(row["credits"] or 0),
        )
        for row in rows.values("requested_model")
        .annotate(requests=Count("id"), credits=Sum("credits"))
        .order_by("-credits", "-requests", "requested_model")
    ]
    requests = sum(r.requests for r in by_day)
    credits = sum(r.credits for r in by_day)
    total = UsageRow("Total", requests, credits, rate.format(credits))
    return Usage(days=days, by_day=by_day, by_model=by_model, total=total)


def _policy(end_user: EndUser) -> Policy | None:
    try:
        return compile_policy(end_user.license.license_type.policy)
    except PolicyDocumentError:
        return None  # every request would be a 503: no model is usable


def course_policy(course: Course) -> Policy | None:
    """The course's policy as its requests meet it: the cached snapshot's overlay applied, the
    license type's when it has none; None when it cannot be evaluated (every request a 503)."""
    rules = course_rules(course.pk)
    if rules is None or rules.policy_broken:
        return None
    if rules.policy is not None:
        return rules.policy
    try:
        return compile_policy(course.license.license_type.policy)
    except PolicyDocumentError:
        return None


def usable_models(
    end_user: EndUser, catalog: Catalog | None = None, course: Course | None = None
) -> list[ModelAccess]:
    """The listed catalog models the student's license lets them use, and for each where a
    request for it may go. The same test as GET /v1/models (inference.model_access, which
    this wing may not import): for a service the model's features map to, the policy admits
    `{"model": id}` and provider selection (catalog.routing) finds a route. Where it may go:
    every route of the unpinned request (first and failovers) and of the request pinned to
    each of the model's providers (X-Service-Provider), with the residency tags applied.
    With a `course`: its policy (the overlay applied), as GET /v1/models for its course keys."""
    policy = _policy(end_user) if course is None else course_policy(course)
    if policy is None:
        return []
    return models_reached(catalog or load_catalog_snapshot(), policy)


# --- keys --------------------------------------------------------------------------------


def keys_of(end_user: EndUser, course: Course | None = None) -> list[ApiKey]:
    """The student's keys; with a `course`, only their keys for that course."""
    rows = ApiKey.objects.filter(end_user=end_user).select_related("course")
    if course is not None:
        rows = rows.filter(course=course)
    return list(rows.order_by("-created_at", "-pk"))


def active_key_count(end_user: EndUser) -> int:
    return ApiKey.objects.filter(end_user=end_user, active=True).count()


def parse_id(raw: str) -> int | None:
    """A key's or a course's id from a URL, or None for anything that is not a positive
    bigint (2**64, -1, "abc", NUL: a 404, never a 500)."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        return None
    value = int(raw)
    return value if 0 < value <= MAX_ID else None


def own_key(end_user: EndUser, key_id: int) -> ApiKey | None:
    """The student's own active key by id; another student's, a revoked one: None."""
    return ApiKey.objects.filter(pk=key_id, end_user=end_user, active=True).first()


def terms_pending(end_user: EndUser) -> bool:
    return bool(end_user.license.institution.terms_of_use.strip()) and (
        end_user.terms_accepted_at is None
    )
