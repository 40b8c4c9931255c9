"""The admin's front page above the app list (licensing.console.admin.site): what each kind of
staff needs first.

- An institution admin: a first-run checklist (sign-in configured, a provider connected, a
  license, a course), each step with a link to do it, and this month's spend in the
  institution's money, the month read in the institution's time zone.
- A superuser: the same per institution, in one table (the first INSTITUTIONS_SHOWN by name).
- A teacher: the courses they teach, each with its course page (the exam switch and the
  per-student usage) and its settings.
- A reviewer: this month's spend.

Reads only; a few small queries (the month's spend of an institution is one index-only range
scan of the ledger's `tx_license_time` over its licenses' ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db.models import Sum
from django.urls import reverse
from django.utils import dateformat
from django.utils.translation import gettext as _

from catalog.models import Connection
from core import clock
from core.languages import grouped

from ..access.scoping import ADMIN, REVIEWER, SAFEGUARDING, TEACHER, Scope, scope_of, scoped
from ..models import (
    Course,
    IdentityProvider,
    Institution,
    License,
    LtiPlatform,
    SafeguardingAlert,
    Transaction,
)
from .money import institution_rate
from .review import licenses_of

INSTITUTIONS_SHOWN = 50


@dataclass(frozen=True)
class Step:
    key: str  # "sign_in", "provider", "license", "course"
    label: str
    done: bool
    link: str  # where to do it ("" when the viewer cannot: `how` says who can)
    how: str


@dataclass(frozen=True)
class InstitutionSummary:
    institution: Institution
    steps: list[Step]
    spend: str  # this month's spend as money, with the micro-credits
    month: str  # e.g. "November 2026 (Europe/Berlin)"

    @property
    def done(self) -> bool:
        return all(step.done for step in self.steps)


def month_start(institution: Institution, now: datetime) -> tuple[datetime, str]:
    """The first instant of the institution's current calendar month in its time zone (a zone
    this host does not know: UTC), and the month's name with the zone."""
    try:
        zone = ZoneInfo(institution.timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    local = now.astimezone(zone)
    first = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    # fold=0: a 1st whose midnight does not exist starts at the day's first instant.
    # The month's name in the page's language (Django's, not the C locale's strftime).
    return first, f"{dateformat.format(local, 'F Y')} ({zone.key})"


def month_spend(institution: Institution, now: datetime) -> tuple[int, str]:
    """The micro-credits the institution's ledger charged this month, and the month's name."""
    start, month = month_start(institution, now)
    total = (
        Transaction.objects.filter(
            license_id__in=licenses_of(institution.pk), created_at__gte=start
        ).aggregate(total=Sum("credits"))["total"]
        or 0
    )
    return int(total), month


def _spends(institutions: list[Institution], now: datetime) -> dict[int, tuple[int, str]]:
    """Each institution's month_spend, one aggregate query per month start (institutions in
    the same time zone share one), not one per institution."""
    by_start: dict[datetime, list[Institution]] = {}
    months: dict[int, str] = {}
    for institution in institutions:
        start, months[institution.pk] = month_start(institution, now)
        by_start.setdefault(start, []).append(institution)
    spent: dict[int, int] = {}
    for start, group in by_start.items():
        rows = (
            Transaction.objects.filter(
                license__institution__in=[i.pk for i in group], created_at__gte=start
            )
            .values_list("license__institution_id")
            .annotate(total=Sum("credits"))
        )
        spent.update({pk: int(total or 0) for pk, total in rows})
    return {i.pk: (spent.get(i.pk, 0), months[i.pk]) for i in institutions}


def _provider_connected() -> bool:
    connections = Connection.objects.filter(active=True)
    return any(connection.has_credentials for connection in connections)


def _set_up(ids: list[int]) -> dict[str, set[int]]:
    """Which of the institutions have each step done: four queries whatever their number."""
    providers = IdentityProvider.objects.filter(institution__in=ids, active=True)
    platforms = LtiPlatform.objects.filter(institution__in=ids, active=True)
    return {
        "sign_in": set(providers.values_list("institution_id", flat=True))
        | set(platforms.values_list("institution_id", flat=True)),
        "license": set(
            License.objects.filter(institution__in=ids).values_list("institution_id", flat=True)
        ),
        "course": set(
            Course.objects.filter(institution__in=ids).values_list("institution_id", flat=True)
        ),
    }


def _steps(pk: int, done: dict[str, set[int]], scope: Scope, connected: bool) -> list[Step]:
    superuser = scope.superuser
    return [
        Step(
            "sign_in",
            _("Sign-in configured (single sign-on or an LMS)"),
            pk in done["sign_in"],
            reverse("admin:licensing_identityprovider_add")
            if superuser
            else reverse("admin:licensing_ltiplatform_add"),
            "" if superuser else _("Single sign-on is set up by the gateway's operator."),
        ),
        Step(
            "provider",
            _("A provider connected"),
            connected,
            reverse("admin:catalog_connection_add") if superuser else "",
            _("The gateway's operator connects providers (configure_connection)."),
        ),
        Step(
            "license",
            _("A license"),
            pk in done["license"],
            reverse("admin:licensing_license_add"),
            "",
        ),
        Step(
            "course", _("A course"), pk in done["course"], reverse("admin:licensing_course_add"), ""
        ),
    ]


def institution_summaries(
    institutions: list[Institution], scope: Scope, now: datetime
) -> list[InstitutionSummary]:
    """Each institution's checklist and this month's spend, in a few queries for them all."""
    connected = _provider_connected()
    done = _set_up([i.pk for i in institutions])
    spends = _spends(institutions, now)
    summaries = []
    for institution in institutions:
        spent, month = spends[institution.pk]
        spend = _("%(money)s (%(micro)s micro-credits)") % {
            "money": institution_rate(institution).format(spent),
            "micro": grouped(spent),
        }
        steps = _steps(institution.pk, done, scope, connected)
        summaries.append(InstitutionSummary(institution, steps, spend, month))
    return summaries


def teacher_courses(user) -> list[dict]:
    """The courses `user` teaches, with the links to their course page and their settings."""
    courses = Course.objects.filter(teachers__user=user).order_by("code")
    return [
        {
            "course": course,
            "page": reverse("portal:course", args=[course.pk]),
            "settings": reverse("admin:licensing_course_change", args=[course.pk]),
        }
        for course in courses
    ]


def dashboard_context(request) -> dict:
    """What the admin's index shows above the app list, for the signed-in user."""
    scope = scope_of(request.user)
    now = clock.utcnow()
    if scope.superuser:
        institutions = list(Institution.objects.order_by("name")[: INSTITUTIONS_SHOWN + 1])
        rows = institution_summaries(institutions[:INSTITUTIONS_SHOWN], scope, now)
        return {
            "dashboard": "superuser",
            "dashboard_rows": rows,
            "dashboard_more": len(institutions) > INSTITUTIONS_SHOWN,
            "dashboard_connected": _provider_connected(),
            "dashboard_courses": teacher_courses(request.user),
        }
    if scope.institution_id is None:
        return {}
    institution = Institution.objects.filter(pk=scope.institution_id).first()
    if institution is None:
        return {}
    if scope.role == ADMIN:
        (summary,) = institution_summaries([institution], scope, now)
        return {"dashboard": "admin", "dashboard_summary": summary}
    if scope.role == REVIEWER:
        spent, month = month_spend(institution, now)
        summary = InstitutionSummary(
            institution, [], institution_rate(institution).format(spent), month
        )
        return {"dashboard": "reviewer", "dashboard_summary": summary}
    if scope.role == TEACHER:
        return {
            "dashboard": "teacher",
            "dashboard_courses": teacher_courses(request.user),
            "dashboard_alerts": alerts_not_closed(scope),
        }
    if scope.role == SAFEGUARDING:
        return {
            "dashboard": "safeguarding",
            "dashboard_institution": institution,
            "dashboard_alerts": alerts_not_closed(scope),
        }
    return {}


def alerts_not_closed(scope: Scope) -> int:
    """The safeguarding alerts the person sees that are not closed yet (docs/safeguarding.md)."""
    alerts = SafeguardingAlert.objects.exclude(status=SafeguardingAlert.Status.CLOSED)
    return scoped(alerts, scope).count()
