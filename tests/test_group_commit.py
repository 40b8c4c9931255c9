"""Group commit: a batch's charges and rows in one transaction, each request's remaining exact."""

from __future__ import annotations

import asyncio

import pytest

from gateway_site import pgpool
from licensing.budget import BudgetConfig, BudgetState
from licensing.group_commit import Pending, _remaining, ledger_write
from licensing.models import Transaction, Wallet
from tests.ledger_helpers import budget_for, entry_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_request_sees_the_wallet_after_its_own_charge():
    config = BudgetConfig("micro_credits", "pooled", "lifetime", 200)
    state = BudgetState(config=config, key=None, wallet_id=1, spent=100)
    batch = [
        Pending(entry=type("E", (), {"credits": c})(), budget=state, future=None, wallet_id=1)
        for c in (5, 0, 7)
    ]
    # The wallet stood at 100 before the batch, 112 after it.
    assert _remaining(batch, {1: 112}) == [95, 100, 88]


def test_a_batch_writes_every_row_and_each_wallet_once(make_license):
    capped = make_license(name="capped", limit=1_000)
    other = make_license(name="other", limit=1_000)
    states = [budget_for(capped, "license"), budget_for(other, "license")]

    async def write_all():
        try:
            return await _gather()
        finally:
            await pgpool.close_all()

    async def _gather():
        return await asyncio.gather(
            *(
                ledger_write(entry=entry_for(lic, f"req-{i}", credits=i + 1), budget=state)
                for i, (lic, state) in enumerate(
                    [(capped, states[0]), (other, states[1]), (capped, states[0])] * 3
                )
            )
        )

    remaining = asyncio.run(write_all())
    assert Transaction.objects.count() == 9
    spent = {w.license.name: w.spent for w in Wallet.objects.select_related("license")}
    assert spent == {"capped": 1 + 3 + 4 + 6 + 7 + 9, "other": 2 + 5 + 8}
    capped_remaining = sorted(r for i, r in enumerate(remaining) if i % 3 != 1)
    assert capped_remaining[0] == 1_000 - spent["capped"]  # the last charge saw all the others
    assert len(set(capped_remaining)) == 6
