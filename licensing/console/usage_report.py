"""Usage over a range of days, for the usage page and /manage/v1/usage: credits and
requests per day in total, by service, by model (the top models, the rest as one "other"
series) and by status class, and the top licenses, API keys and end users by credits.

Everything comes from four GROUP BY queries over a Transaction queryset the caller has already
scoped (licensing.access.scoping.scoped), plus a lookup of the top rows' names; no ledger row is
loaded into Python. Refusals (0 credits, outcome "denied") count as requests like every other row.
Credits are micro-credits. The days are those of the current time zone: the institution's on
its staff's usage page (licensing.console.local_time), UTC for a superuser and in the
management API.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Case, Count, F, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, NullIf, TruncDate
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from ..models import ApiKey, EndUser, License, Outcome

MAX_DAYS = 366
DEFAULT_DAYS = 30
PRESETS = (7, 30, 90)
TOP_MODELS = 8
TOP_ROWS = 10
EARLIEST = date(1970, 1, 1)
OTHER_MODELS = gettext_noop("(other models)")  # translated where it is shown
OUTCOMES = tuple(Outcome.values)


class RangeError(ValueError):
    """A date range the report refuses; `field` names the parameter to blame."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def today_utc() -> date:
    return datetime.now(UTC).date()


def today_here() -> date:
    """Today in the current time zone (UTC unless a page activated its institution's)."""
    return timezone.localdate(timezone.now())


def preset_range(days: int, today: date | None = None) -> tuple[date, date]:
    """The last `days` days, today included (`until` is exclusive)."""
    until = (today or today_here()) + timedelta(days=1)
    return until - timedelta(days=days), until


def resolve_range(
    since: date | None, until: date | None, today: date | None = None
) -> tuple[date, date]:
    """The range to report: the last 30 days by default, `until` after `since`, at most
    366 days. Raises RangeError."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and value < EARLIEST:
            raise RangeError(
                name, gettext("Dates start at %(day)s.") % {"day": EARLIEST.isoformat()}
            )
    if until is None:
        today = today or today_here()
        start = today if since is None or since <= today else since  # a future start: one day
        if start == date.max:
            raise RangeError("since", gettext("Date out of range."))
        until = start + timedelta(days=1)
    if since is None:
        since = until - timedelta(days=DEFAULT_DAYS)
    if until <= since:
        raise RangeError(
            "until", gettext("'until' must be after 'since' ('until' is not included).")
        )
    if (until - since).days > MAX_DAYS:
        raise RangeError("until", gettext("The range is at most %(n)s days.") % {"n": MAX_DAYS})
    return since, until


@dataclass(frozen=True)
class Series:
    """One line of a chart: values per day, aligned with UsageReport.days."""

    name: str
    credits: list[int]
    requests: list[int]
    other: bool = False  # the sum of the models outside the top ones

    @property
    def total_credits(self) -> int:
        return sum(self.credits)

    @property
    def total_requests(self) -> int:
        return sum(self.requests)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "other": self.other,
            "total_credits": self.total_credits,
            "total_requests": self.total_requests,
            "credits": self.credits,
            "requests": self.requests,
        }


@dataclass(frozen=True)
class TopRow:
    id: int
    label: str
    credits: int
    requests: int

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "label": self.label,
            "credits": self.credits,
            "requests": self.requests,
        }


@dataclass(frozen=True)
class UsageReport:
    since: date
    until: date  # not included
    days: list[date]
    total: Series
    by_service: list[Series]
    by_model: list[Series]
    by_outcome: list[Series]
    top_licenses: list[TopRow]
    top_api_keys: list[TopRow]
    top_end_users: list[TopRow]

    @property
    def last_day(self) -> date:
        return self.until - timedelta(days=1)

    def as_dict(self) -> dict:
        return {
            "since": self.since,
            "until": self.until,
            "unit": "micro_credits",
            "days": self.days,
            "totals": {
                "credits": self.total.total_credits,
                "requests": self.total.total_requests,
                "requests_by_outcome": {s.name: s.total_requests for s in self.by_outcome},
            },
            "total": {"credits": self.total.credits, "requests": self.total.requests},
            "by_service": [s.as_dict() for s in self.by_service],
            "by_model": [s.as_dict() for s in self.by_model],
            "by_outcome": [s.as_dict() for s in self.by_outcome],
            "top": {
                "licenses": [r.as_dict() for r in self.top_licenses],
                "api_keys": [r.as_dict() for r in self.top_api_keys],
                "end_users": [r.as_dict() for r in self.top_end_users],
            },
        }


class _Grid:
    """Per-day sums by series name, filled from grouped query rows."""

    def __init__(self, days: list[date]):
        self.index = {day: i for i, day in enumerate(days)}
        self.cells: dict[str | None, tuple[list[int], list[int]]] = {}

    def add(self, name, day: date, credits, requests: int) -> None:
        i = self.index.get(day)
        if i is None:  # cannot happen with the range filter; never index out of the chart
            return
        credit_list, request_list = self.cells.setdefault(
            name, ([0] * len(self.index), [0] * len(self.index))
        )
        credit_list[i] += credits or 0
        request_list[i] += requests

    def series(self, order: list | None = None) -> list[Series]:
        """Series by credits, then requests, then name; or in the given order (all of it)."""
        if order is None:
            order = sorted(self.cells, key=self._rank)
        empty = ([0] * len(self.index), [0] * len(self.index))
        return [Series(name, *self.cells.get(name, empty)) for name in order]

    def _rank(self, name) -> tuple:
        credits, requests = self.cells[name]
        return (-sum(credits), -sum(requests), str(name))

    def total(self) -> Series:
        credits, requests = [0] * len(self.index), [0] * len(self.index)
        for credit_list, request_list in self.cells.values():
            for i, value in enumerate(credit_list):
                credits[i] += value
                requests[i] += request_list[i]
        return Series("total", credits, requests)


def in_range(
    transactions: QuerySet,
    since: date,
    until: date,
    *,
    institution_id: int | None = None,
    license_id: int | None = None,
) -> QuerySet:
    zone = timezone.get_current_timezone()
    start = datetime.combine(since, time.min, tzinfo=zone)
    end = datetime.combine(until, time.min, tzinfo=zone)
    rows = transactions.filter(created_at__gte=start, created_at__lt=end)
    if institution_id is not None:
        rows = rows.filter(license__institution_id=institution_id)
    if license_id is not None:
        rows = rows.filter(license_id=license_id)
    return rows.order_by()  # no Meta.ordering in the GROUP BYs


def usage_report(
    transactions: QuerySet,
    since: date,
    until: date,
    *,
    institution_id: int | None = None,
    license_id: int | None = None,
    top_models: int = TOP_MODELS,
) -> UsageReport:
    """The report of `transactions` (already scoped) from `since` to `until` (excluded)."""
    rows = in_range(
        transactions, since, until, institution_id=institution_id, license_id=license_id
    )
    days = [since + timedelta(days=i) for i in range((until - since).days)]
    services, outcomes = _by_service_and_outcome(rows, days)
    tops = _tops(rows)
    return UsageReport(
        since=since,
        until=until,
        days=days,
        total=services.total(),
        by_service=services.series(),
        by_model=_by_model(rows, days, top_models),
        by_outcome=outcomes.series(_outcome_order(outcomes)),
        top_licenses=tops["license"],
        top_api_keys=tops["api_key"],
        top_end_users=tops["end_user"],
    )


def _day():
    return TruncDate("created_at", tzinfo=timezone.get_current_timezone())


def _by_service_and_outcome(rows: QuerySet, days: list[date]) -> tuple[_Grid, _Grid]:
    services, outcomes = _Grid(days), _Grid(days)
    grouped = rows.values("service", "outcome", day=_day()).annotate(
        credits_sum=Sum("credits"), requests=Count("id")
    )
    for row in grouped:
        services.add(row["service"], row["day"], row["credits_sum"], row["requests"])
        outcomes.add(row["outcome"], row["day"], row["credits_sum"], row["requests"])
    return services, outcomes


def _outcome_order(outcomes: _Grid) -> list[str]:
    """Every status class, always in the same order (a stable chart legend and API shape)."""
    return [*OUTCOMES, *sorted(n for n in outcomes.cells if n is not None and n not in OUTCOMES)]


def _model():
    """The model billed, else (a refusal, a failure) the one asked for."""
    return Coalesce(NullIf("billed_model", Value("")), "requested_model")


def _by_model(rows: QuerySet, days: list[date], top_models: int) -> list[Series]:
    ranked = (
        rows.values(model_name=_model())
        .annotate(credits_sum=Sum("credits"), requests=Count("id"))
        .order_by("-credits_sum", "-requests", "model_name")
    )
    top = [row["model_name"] for row in ranked[:top_models]]
    if not top:
        return []
    # NULL groups every other model: no model name can collide with it.
    bucket = Case(When(model_name__in=top, then=F("model_name")), default=None)
    grouped = (
        rows.annotate(model_name=_model())
        .values(day=_day(), bucket=bucket)
        .annotate(credits_sum=Sum("credits"), requests=Count("id"))
    )
    grid = _Grid(days)
    for row in grouped:
        grid.add(row["bucket"], row["day"], row["credits_sum"], row["requests"])
    series = grid.series(top)
    if None in grid.cells:
        series.append(Series(OTHER_MODELS, *grid.cells[None], other=True))
    return series


# The name of each kind of top row, read for the ten ids only.
# Each kind's (pk, *label parts) rows for a list of pks.
_NAMES: dict[str, Callable[[list[int]], Any]] = {
    "license": lambda ids: License.objects.filter(pk__in=ids).values_list("pk", "name"),
    "api_key": lambda ids: [
        (pk, prefix, _key_name(name, kind))
        for pk, prefix, name, kind in ApiKey.objects.filter(pk__in=ids).values_list(
            "pk", "prefix", "name", "kind"
        )
    ],
    "end_user": lambda ids: EndUser.objects.filter(pk__in=ids).values_list("pk", "subject"),
}


def _tops(rows: QuerySet) -> dict[str, list[TopRow]]:
    """The top licenses, API keys and end users from one pass over the range: grouped by
    holder (bounded by the keys and end users that exist, not by the rows)."""
    sums: dict[str, defaultdict[int, list[int]]] = {
        kind: defaultdict(lambda: [0, 0]) for kind in _NAMES
    }
    grouped = rows.values("license_id", "api_key_id", "end_user_id").annotate(
        credits_sum=Sum("credits"), requests=Count("id")
    )
    for row in grouped:
        for kind, cells in sums.items():
            pk = row[f"{kind}_id"]
            if pk is not None:
                cells[pk][0] += row["credits_sum"] or 0
                cells[pk][1] += row["requests"]
    return {kind: _ranked(kind, cells) for kind, cells in sums.items()}


def _ranked(kind: str, cells: dict[int, list[int]]) -> list[TopRow]:
    ranked = sorted(cells.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    ranked = ranked[:TOP_ROWS]
    if not ranked:
        return []
    names = {pk: _label(*rest) for pk, *rest in _NAMES[kind]([pk for pk, _ in ranked])}
    return [
        TopRow(id=pk, label=names.get(pk, f"#{pk}"), credits=credits, requests=requests)
        for pk, (credits, requests) in ranked
    ]


def _key_name(name: str, kind: str) -> str:
    """A key's name, and "front-end key" for one (it stands for many students)."""
    if kind != ApiKey.Kind.FRONT_END:
        return name
    return ", ".join(part for part in (name, gettext("front-end key")) if part)


def _label(name: str, extra: str | None = None) -> str:
    """A license's name, an end user's subject, or an API key's prefix with its name."""
    if extra is None:
        return name
    return f"{name}…" + (f" ({extra})" if extra else "")
