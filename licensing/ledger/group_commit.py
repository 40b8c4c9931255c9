"""Group commit: requests that finish together share one batch, so one transaction.

Every request awaits the commit of its batch before it answers, so nothing is acknowledged
before it is durable. While one batch commits, the next one gathers whatever finishes meanwhile:
at low load a batch is one request (no added wait), under load one round trip carries many.

What a batch's commit does is the ledger door's (licensing.ledger.actions: the store, then the
follow-ups, or the spool); this module gathers the batches and hands each request its
`credits_remaining`, which is exact: the wallet's total after the batch, less what the requests
after it in the same batch added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .budget import BudgetState, remaining_of
from .leases import Lease
from .record import LedgerEntry
from .store import Pending

Commit = Callable[[list[Pending]], Awaitable[dict[int, int]]]


def spent_each(batch: list[Pending], spent_after: dict[int, int]) -> list[int]:
    """Walk the batch backwards: each request's wallet as it was after its own charge."""
    later: dict[int, int] = {}
    result: list[int] = []
    for item in reversed(batch):
        wallet_id = item.wallet_id
        if wallet_id in spent_after and item.entry.credits and item.written:
            spent = spent_after[wallet_id] - later.get(wallet_id, 0)
            later[wallet_id] = later.get(wallet_id, 0) + item.entry.credits
        elif item.budget is None:
            spent = 0
        else:
            spent = item.budget.spent + item.entry.credits
        result.append(spent)
    return result[::-1]


def levels_spent_each(batch: list[Pending], spent_after: dict[int, int]) -> list[list[int]]:
    """`spent_each` for a course member's levels: each level's wallet after the request's own
    charge ([] for anyone else). Level wallets are never license wallets, so one walk."""
    later: dict[int, int] = {}
    result: list[list[int]] = []
    for item in reversed(batch):
        credits, spent_levels = item.entry.credits, []
        for level in item.budget.levels if item.budget is not None else ():
            wallet_id = level.wallet_id
            if wallet_id in spent_after and credits and item.written:
                assert wallet_id is not None
                spent = spent_after[wallet_id] - later.get(wallet_id, 0)
                later[wallet_id] = later.get(wallet_id, 0) + credits
            else:
                spent = level.spent + credits
            spent_levels.append(spent)
        result.append(spent_levels)
    return result[::-1]


def _remaining(batch: list[Pending], spent_after: dict[int, int]) -> list[int | None]:
    spent = spent_each(batch, spent_after)
    if not any(item.budget is not None and item.budget.levels for item in batch):
        return [
            item.budget.remaining_after(s) if item.budget else None
            for item, s in zip(batch, spent, strict=True)
        ]
    return [
        remaining_of(item.budget, s, levels) if item.budget else None
        for item, s, levels in zip(batch, spent, levels_spent_each(batch, spent_after), strict=True)
    ]


class GroupCommit:
    """One per event loop. `write` returns the request's credits remaining once committed.

    `commit` writes a batch and returns {wallet id: spent after it} ({} when it was spooled
    instead); `drained` runs once the queue is empty."""

    def __init__(self, commit: Commit, drained: Callable[[], None]):
        self._commit = commit
        self._drained = drained
        self._queue: list[Pending] = []
        self._task: asyncio.Task | None = None

    async def write(
        self, entry: LedgerEntry, budget: BudgetState | None, lease: Lease | None = None
    ) -> int | None:
        """`lease` (licensing.ledger.leases) is told once the row is committed or spooled."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if lease is not None:
            future.add_done_callback(lease.written)
        self._queue.append(Pending(entry=entry, budget=budget, future=future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        # A client that goes away does not take its charge with it: the batch still commits.
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            spent = await self._commit(batch)
            for item, remaining in zip(batch, _remaining(batch, spent), strict=True):
                if item.future is not None and not item.future.done():
                    item.future.set_result(remaining)
        self._drained()
