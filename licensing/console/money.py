"""Micro-credits shown as money in the console (the admin, the review totals, the usage page,
the ledger's API and CSV): each institution's rate (licensing.rules.money), and sums over rows
of institutions that may count in different currencies or rates."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Sum

from ..models import Institution
from ..rules.money import Rate, format_amount, rate_of


def institution_rate(institution: Institution | None) -> Rate:
    if institution is None:
        return rate_of()
    return rate_of(institution.currency, institution.micro_credits_per_currency_unit)


def with_money(micro_credits: int | None, institution: Institution | None) -> str:
    """`1,500,000 (1.50 USD)`: the exact credits first, their worth beside them."""
    if micro_credits is None:
        return "unlimited"
    return f"{micro_credits:,} ({institution_rate(institution).format(micro_credits)})"


def ledger_money(queryset, institution_path: str = "license__institution") -> str:
    """The money worth of a set of ledger rows (`credits`), each at its institution's rate, one
    amount per currency (`12.50 EUR + 3.00 USD`); one query grouped by rate."""
    rows = (
        queryset.order_by()
        .values(
            f"{institution_path}__currency", f"{institution_path}__micro_credits_per_currency_unit"
        )
        .annotate(total=Sum("credits"))
    )
    amounts: dict[str, Decimal] = {}
    for row in rows:
        rate = rate_of(
            row[f"{institution_path}__currency"],
            row[f"{institution_path}__micro_credits_per_currency_unit"],
        )
        amounts[rate.currency] = amounts.get(rate.currency, Decimal(0)) + rate.amount(
            int(row["total"] or 0)
        )
    if not amounts:
        return rate_of().format(0)
    return " + ".join(format_amount(amounts[c], c) for c in sorted(amounts))
