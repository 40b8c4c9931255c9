"""Micro-credits shown as money in the console (the admin, the review totals, the usage page,
the ledger's API and CSV): each institution's rate (licensing.rules.money), and sums over rows
of institutions that may count in different currencies or rates."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Sum
from django.utils.translation import gettext

from core.languages import grouped

from ..models import Institution
from ..rules.money import Rate, format_amount, rate_of


def institution_rate(institution: Institution | None) -> Rate:
    if institution is None:
        return rate_of()
    return rate_of(institution.currency, institution.micro_credits_per_currency_unit)


def with_money(micro_credits: int | None, institution: Institution | None) -> str:
    """`1,500,000 (1.50 USD)`: the exact credits first, their worth beside them."""
    if micro_credits is None:
        return gettext("unlimited")
    return f"{grouped(micro_credits)} ({institution_rate(institution).format(micro_credits)})"


def ledger_money(queryset) -> str:
    """The money worth of a set of ledger rows (`credits`), each at its institution's rate, one
    amount per currency (`12.50 EUR + 3.00 USD`). Two queries whatever the rows: the credits
    per institution (the ledger joined to its licenses only, so a scoped ledger stays scoped
    by license ids), then the institutions' rates (a small table)."""
    per_institution = (
        queryset.order_by()
        .values("license__institution_id")
        .annotate(total=Sum("credits"))
        .values_list("license__institution_id", "total")
    )
    totals = list(per_institution)
    rates = {
        pk: rate_of(currency, per_unit)
        for pk, currency, per_unit in Institution.objects.values_list(
            "pk", "currency", "micro_credits_per_currency_unit"
        )
    }
    amounts: dict[str, Decimal] = {}
    for institution_id, total in totals:
        rate = rates.get(institution_id) or rate_of()
        amounts[rate.currency] = amounts.get(rate.currency, Decimal(0)) + rate.amount(
            int(total or 0)
        )
    if not amounts:
        return rate_of().format(0)
    return " + ".join(format_amount(amounts[c], c) for c in sorted(amounts))
