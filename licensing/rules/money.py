"""Micro-credits shown as money: one rate per institution (or the gateway's default), one
format everywhere (the admin, the review totals, the usage page, the portal, the CSV).

`GATEWAY_CURRENCY` and `GATEWAY_CREDITS_PER_CURRENCY_UNIT` (micro-credits per unit; the
catalog's list prices are in USD at 1,000,000) are the default; `Institution.currency` and
`Institution.micro_credits_per_currency_unit` override them for one institution. Only display:
budgets, charges and the ledger stay in micro-credits, exact integers."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from django.conf import settings

from core.languages import grouped


@dataclass(frozen=True)
class Rate:
    currency: str
    micro_credits_per_unit: int

    def amount(self, micro_credits: int) -> Decimal:
        """The money worth of `micro_credits`, exact (a Decimal, not rounded)."""
        return Decimal(micro_credits) / Decimal(self.micro_credits_per_unit)

    def format(self, micro_credits: int | None) -> str:
        """`12.35 EUR`; below one cent four decimals (`0.0004 EUR`); None (unlimited) as ``."""
        if micro_credits is None:
            return ""
        return format_amount(self.amount(micro_credits), self.currency)


def format_amount(value: Decimal, currency: str) -> str:
    """An amount of money in the one format (Rate.format's): for sums across rates."""
    places = Decimal("0.01") if value == 0 or abs(value) >= Decimal("0.01") else Decimal("0.0001")
    return f"{grouped(value.quantize(places, rounding=ROUND_HALF_EVEN))} {currency}"


def default_rate() -> Rate:
    gateway = settings.GATEWAY
    return Rate(gateway["CURRENCY"], gateway["CREDITS_PER_CURRENCY_UNIT"])


def rate_of(currency: str = "", micro_credits_per_unit: int | None = None) -> Rate:
    """An institution's rate from its two fields (empty: the gateway's default)."""
    fallback = default_rate()
    return Rate(
        currency or fallback.currency,
        micro_credits_per_unit or fallback.micro_credits_per_unit,
    )
