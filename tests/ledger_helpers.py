"""Ledger entries and budget states for the tests that write the ledger directly (spool, group
commit), made the way the pipeline makes them."""

from __future__ import annotations

from licensing.budget import BudgetConfig, BudgetState, budget_check
from licensing.ledger import LedgerEntry


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
