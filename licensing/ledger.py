"""The ledger: one row per request that reached the provider call, written with its charge."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.db import transaction

from .budget import BudgetState, wallet_charge
from .models import Transaction


@dataclass
class LedgerEntry:
    request_id: str
    license_id: int
    api_key_id: int | None
    end_user_id: int | None
    service: str
    requested_model: str
    billed_model: str
    provider: str
    connection: str
    status_code: int
    credits: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    images: int | None = None
    megapixels: Decimal | None = None
    metadata: dict = field(default_factory=dict)
    latency_ms: int = 0


def transaction_record(*, entry: LedgerEntry, budget: BudgetState) -> int | None:
    """Charge the wallet and write the ledger row atomically; returns credits remaining."""
    with transaction.atomic():
        wallet_id, spent = wallet_charge(budget, entry.credits)
        Transaction.objects.create(wallet_id=wallet_id, **entry.__dict__)
    return budget.remaining_after(spent)
