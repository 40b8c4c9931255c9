"""Group commit: a batch's charges and rows in one transaction, each request's remaining exact."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import psycopg
import pytest

from core import pgpool
from licensing.ledger.actions import transaction_record
from licensing.ledger.budget import BudgetConfig, BudgetState
from licensing.ledger.group_commit import _remaining
from licensing.ledger.store import Pending, commit_batch_async
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


def test_a_batch_writes_every_row_and_each_wallet_once(make_license, db_route):
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
                transaction_record(entry=entry_for(lic, f"req-{i}", credits=i + 1), budget=state)
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


needs_pool = pytest.mark.skipif(
    not pgpool.available(), reason="the async pool's statements are PostgreSQL's (SQLite: the ORM)"
)


METADATA = {"course": "Bio 101 – Zoë", "n": 3, "nested": {"a": [1, None]}}


def _full_entry(license, request_id: str, **fields):
    values = {
        "api_key_id": None,
        "prompt_tokens": 11,
        "completion_tokens": None,
        "total_tokens": 11,
        "images": 2,
        "megapixels": Decimal("1.048576"),
        "units": None,
        "metadata": METADATA,
        "latency_ms": 1234,
        "upstream_id": "chatcmpl-abc",
        "outcome": "",
        "error_code": "",
        "error_message": "",
        **fields,
    }
    return entry_for(license, request_id, credits=9, **values)


def _commit(items):
    async def run():
        try:
            return await commit_batch_async(items)
        finally:
            await pgpool.close_all()

    return asyncio.run(run())


def _row(request_id: str) -> dict:
    row = Transaction.objects.filter(request_id=request_id).values().get()
    return {k: v for k, v in row.items() if k not in ("id", "request_id")}


@needs_pool
def test_a_batch_of_one_writes_the_row_a_larger_batch_writes(make_license, db_route):
    """A batch of one goes by its own plain statement (licensing.ledger.store._single_sql):
    the row, the wallet and the returned total are those of the JSON batch statement."""
    lic = make_license(name="capped", limit=1_000)
    state = budget_for(lic, "license")
    one = Pending(entry=_full_entry(lic, "one"), budget=state, future=None)
    one.wallet_id = state.wallet_id
    assert _commit([one]) == {state.wallet_id: 9}
    pair = [
        Pending(entry=_full_entry(lic, f"pair-{i}"), budget=state, future=None) for i in range(2)
    ]
    for item in pair:
        item.wallet_id = state.wallet_id
    pair[0].entry.created_at = pair[1].entry.created_at = one.entry.created_at
    assert _commit(pair) == {state.wallet_id: 27}
    assert _row("one") == _row("pair-0") == _row("pair-1")
    assert _row("one")["megapixels"] == Decimal("1.0486")  # the column keeps 4 places
    assert _row("one")["metadata"] == METADATA
    assert Wallet.objects.get(pk=state.wallet_id).spent == 27


@needs_pool
def test_a_batch_of_one_without_credits_touches_no_wallet(make_license):
    lic = make_license(name="capped", limit=1_000)
    state = budget_for(lic, "license")
    refusal = Pending(entry=entry_for(lic, "refused", credits=0), budget=None, future=None)
    assert _commit([refusal]) == {}
    assert _row("refused")["wallet_id"] is None
    assert Wallet.objects.get(pk=state.wallet_id).spent == 0


@needs_pool
@pytest.mark.parametrize("size", [1, 2])
def test_an_over_long_value_is_refused_whole_by_either_statement(make_license, size):
    """Never cut short: the row fails (and is spooled by the caller), nothing is charged."""
    lic = make_license(name="capped", limit=1_000)
    state = budget_for(lic, "license")
    items = [
        Pending(entry=entry_for(lic, f"r{i}", requested_model="m" * 500), budget=state, future=None)
        for i in range(size)
    ]
    for item in items:
        item.wallet_id = state.wallet_id
    with pytest.raises(psycopg.errors.StringDataRightTruncation):
        _commit(items)
    assert Transaction.objects.count() == 0
    assert Wallet.objects.get(pk=state.wallet_id).spent == 0
