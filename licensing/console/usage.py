"""Budget usage of licenses for people (admin pages, the management API): spent and remaining
in the current window and when it resets, for many licenses in one query."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Sum

from core import clock

from ..ledger.budget import next_window_start, window_start
from ..models import ApiKey, EndUser, License, Wallet


@dataclass(frozen=True)
class LicenseUsage:
    period: str
    window_start: datetime | None  # None: lifetime
    resets_at: datetime | None  # None: never (lifetime)
    limit: int | None
    spent: int  # every wallet of the window together
    holders: int  # wallets opened in the window
    pooled: bool
    highest: int  # the largest single wallet (per-user: the holder closest to the limit)

    @property
    def remaining(self) -> int | None:
        """Left in the pooled wallet, or for the holder with the least left (per user)."""
        if self.limit is None:
            return None
        return max(0, self.limit - (self.spent if self.pooled else self.highest))

    def as_dict(self) -> dict:
        return {
            "unit": "micro_credits",
            "period": self.period,
            "window_start": self.window_start,
            "resets_at": self.resets_at,
            "limit": self.limit,
            "spent": self.spent,
            "remaining": self.remaining,
            "holders": self.holders,
        }


def _window(period: str, now: datetime, tz: str) -> datetime | None:
    try:
        return window_start(period, now, tz)
    except Exception:  # an unknown period: the API answers 500 for it; here just no window
        return None


def _resets(period: str, start: datetime | None, tz: str) -> datetime | None:
    if start is None:
        return None
    try:
        return next_window_start(period, start, tz)
    except Exception:  # as _window
        return None


def licenses_usage(licenses, now: datetime | None = None) -> dict[int, LicenseUsage]:
    """Usage of each license (by id) in its current window, in one query (the licenses with
    their institution: `select_related("institution")`, its time zone)."""
    now = now or clock.utcnow()
    zones = {lic.pk: lic.institution.timezone or "UTC" for lic in licenses}
    windows = {lic.pk: _window(lic.budget_period, now, zones[lic.pk]) for lic in licenses}
    starts = {start for start in windows.values() if start is not None}
    totals: dict[tuple, Any] = {}
    if windows and starts:
        rows = (
            Wallet.objects.filter(license_id__in=list(windows), window_start__in=starts)
            .values("license_id", "period", "window_start")
            .annotate(total=Sum("spent"), holders=Count("id"), highest=Max("spent"))
        )
        for row in rows:
            totals[(row["license_id"], row["period"], row["window_start"])] = row
    usage = {}
    for lic in licenses:
        start = windows[lic.pk]
        row = totals.get((lic.pk, lic.budget_period, start), {})
        lifetime = lic.budget_period == License.Period.LIFETIME
        usage[lic.pk] = LicenseUsage(
            period=lic.budget_period,
            window_start=None if lifetime else start,
            resets_at=_resets(lic.budget_period, start, zones[lic.pk]),
            limit=lic.budget_limit,
            spent=row.get("total") or 0,
            holders=row.get("holders") or 0,
            pooled=lic.budget_strategy == License.Strategy.POOLED,
            highest=row.get("highest") or 0,
        )
    return usage


def holder_names(holders: list[str]) -> dict[str, str]:
    """Readable names for wallet holders (`key:<id>`, `user:<id>`), in two queries at most."""
    key_ids: set[int] = set()
    user_ids: set[int] = set()
    for holder in holders:
        kind, _, ident = holder.partition(":")
        if ident.isdigit():
            (key_ids if kind == "key" else user_ids if kind == "user" else set()).add(int(ident))
    names = {"license": "whole license (pooled)"}
    if key_ids:
        for pk, prefix, name in ApiKey.objects.filter(pk__in=key_ids).values_list(
            "pk", "prefix", "name"
        ):
            names[f"key:{pk}"] = f"API key {prefix}…" + (f" ({name})" if name else "")
    if user_ids:
        for pk, subject, issuer in EndUser.objects.filter(pk__in=user_ids).values_list(
            "pk", "subject", "issuer__issuer"
        ):
            names[f"user:{pk}"] = f"{subject} ({issuer})"
    return names
