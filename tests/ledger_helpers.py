"""Ledger entries and budget states for the tests that write the ledger directly (spool, group
commit), made the way the pipeline makes them."""

from __future__ import annotations

from licensing.ledger.budget import BudgetConfig, BudgetState, budget_check
from licensing.ledger.record import LedgerEntry


def entry_for(license, request_id: str, credits: int = 7, **fields) -> LedgerEntry:
    values = {
        "request_id": request_id,
        "license_id": license.id,
        "api_key_id": None,
        "end_user_id": None,
        "service": "embeddings",
        "requested_model": "text-embedding-3-small",
        "billed_model": "text-embedding-3-small",
        "provider": "direct",
        "connection": "default",
        "status_code": 200,
        "credits": credits,
        **fields,
    }
    return LedgerEntry(**values)


def budget_for(license, holder: str = "key:1") -> BudgetState:
    config = BudgetConfig(
        unit=license.budget_unit,
        strategy=license.budget_strategy,
        period=license.budget_period,
        limit=license.budget_limit,
    )
    return budget_check(license_id=license.id, config=config, holder=holder)


def refusal_codes() -> list[str]:
    """The error codes of the ledger's refusal rows (refused before any provider call), in order;
    each is checked to have charged nothing and touched no wallet."""
    from licensing.ledger.record import BEFORE_CALL
    from licensing.models import Transaction

    rows = list(Transaction.objects.filter(error_code__in=BEFORE_CALL).order_by("id"))
    for row in rows:
        assert (row.credits, row.wallet_id) == (0, None), row
        assert row.error_code and row.error_message and row.status_code >= 400, row
    return [row.error_code for row in rows]
