"""The ledger's one door: every ledger row and every wallet charge goes through here.

- `transaction_record` (the request path, on the event loop): the request's entry joins the
  group commit (licensing.ledger.group_commit); its batch is written by the store
  (licensing.ledger.store), then the follow-ups are written (licensing.ledger.alerts), the rows
  published to the live feed (licensing.ledger.feed) and the spool's replay scheduled
  (licensing.ledger.spool). If the batch cannot be written it goes to the spool instead.
- `transaction_record_once` (the spool's replay, on a worker thread or in a command): one entry
  through the same store, written and charged unless its request id is in the ledger already,
  then its follow-ups.

If the spool cannot take a batch either (a race: the pre-call check `spool_refuses` found it
writable, or the database had not failed yet), the requests still answer: their provider calls
are made and paid, a 503 would only make the clients call again, unrecorded again. Each such row
is logged at CRITICAL with its spool line (an operator can append the line to a spool file and
replay it) and counted in `gateway_ledger_rows_lost` (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging

import psycopg
from django.db import DatabaseError

from core import crashpoints, metrics, pgpool
from core.db import run_db

from . import feed
from .alerts import FollowUp, alerts_waiting, follow_up, follow_ups_write
from .budget import BudgetState, known_wallet_id, wallet_open
from .group_commit import GroupCommit, spent_each
from .leases import CLOSING, Lease, after_close, handed_over, note_spooled
from .record import LedgerEntry
from .spool import (
    encoded_line,
    note_database_down,
    note_database_up,
    replay_files,
    replay_soon,
    spool_append_many,
)
from .store import Pending, WalletGone, commit_batch_sync, store

logger = logging.getLogger("gateway.ledger")


async def transaction_record(
    *, entry: LedgerEntry, budget: BudgetState | None, lease: Lease | None = None
) -> int | None:
    """Charge and record one request (group-committed); returns its credits remaining.
    budget None records a refusal: 0 credits, no wallet. `lease`: the one the request was
    admitted under (licensing.ledger.leases), which its row must not overtake."""
    if lease is not None and lease.state is CLOSING:
        return await asyncio.shield(_after_close(entry, budget, lease))
    return await _group_commit().write(entry, budget, handed_over(lease, entry.request_id))


async def _after_close(entry: LedgerEntry, budget: BudgetState | None, lease: Lease) -> int | None:
    await after_close(lease)
    return await _group_commit().write(entry, budget, None)


def transaction_record_once(*, entry: LedgerEntry, budget: BudgetState | None) -> bool:
    """A spooled entry: written and charged unless a row with its request id exists (its first
    write committed and only the acknowledgement was lost). True when written."""
    batch = [Pending(entry=entry, budget=budget, future=None)]
    if not _known_wallets(batch) and budget is not None:
        _open_wallets(batch[0])
    try:
        spent = commit_batch_sync(batch)
    except WalletGone:  # a wallet was deleted since (a refusal has none): open them again
        assert budget is not None
        batch[0].wallet_id = None
        for level in budget.levels:
            level.wallet_id = None
        _open_wallets(batch[0])
        spent = commit_batch_sync(batch)
    try:
        _follow_ups_write(_follow_ups(batch, spent))
    except Exception:  # the row is in: last use and alerts are worth a log line, no more
        logger.exception("writing last use / budget alerts failed")
    return batch[0].written


def spool_replay() -> tuple[int, int]:
    """Write every spooled entry through `transaction_record_once`; returns (written, already
    there). Raises OperationalError/InterfaceError when the database is still unavailable."""
    return replay_files(transaction_record_once)


# --- a batch of the request path -------------------------------------------------------------


async def _record_batch(batch: list[Pending]) -> dict[int, int]:
    """Write a batch (or spool it); returns {wallet id: spent after it}, {} when spooled."""
    try:
        if not _known_wallets(batch):
            for item in batch:
                if item.budget is not None and item.entry.credits:
                    await run_db(_open_wallets, item)
        crashpoints.reached("ledger.called")
        spent = await store().commit(batch)
        crashpoints.reached("ledger.committed")
        note_database_up()
    except Exception as exc:
        # An outage, or anything else: the provider calls happened all the same, keep them.
        outage = isinstance(exc, DatabaseError | psycopg.Error)
        if outage:
            note_database_down()
        logger.error(
            "ledger batch of %d failed (%s); spooling it", len(batch), exc, exc_info=not outage
        )
        for item in batch:  # their charges wait for the replay: their leases must not close
            if item.budget is not None:
                note_spooled(item.budget.lease)
        await _spool(batch)
        return {}
    items = _follow_ups(batch, spent)
    if items or alerts_waiting():
        try:
            await run_db(_follow_ups_write, items)
        except Exception:  # last use and alerts are worth a log line, never a failed request
            logger.exception("writing last use / budget alerts failed")
    feed.publish([item.entry for item in batch if item.written])
    return spent


_group_commit = pgpool.per_loop(
    lambda: GroupCommit(_record_batch, functools.partial(replay_soon, spool_replay))
)


def _known_wallets(batch: list[Pending]) -> bool:
    """Wallet ids from the budget check or the cache; False when a charge needs a wallet not
    opened yet (an unlimited level's first charge in a window)."""
    known = True
    for item in batch:
        if item.budget is None:
            continue
        item.wallet_id = item.budget.wallet_id or known_wallet_id(item.budget)
        known = known and (item.wallet_id is not None or not item.entry.credits)
        for level in item.budget.levels:  # a course member's: the same for each level
            level.wallet_id = level.wallet_id or known_wallet_id(level)
            known = known and (level.wallet_id is not None or not item.entry.credits)
    return known


def _open_wallets(item: Pending) -> None:
    """Open the wallets an item's charge needs and has not got (license and course levels)."""
    assert item.budget is not None
    if item.wallet_id is None:
        item.wallet_id = wallet_open(item.budget)
    for level in item.budget.levels:
        if level.wallet_id is None:
            level.wallet_id = wallet_open(level)


def _follow_ups(batch: list[Pending], spent_after: dict[int, int]) -> list[FollowUp]:
    """A written batch's keys' last use and budget alerts (licensing.ledger.alerts): decided
    in memory, written (rarely: once a minute per key, or a threshold crossed) before the
    batch's requests answer, so an alert is in place when the request that crossed it returns."""
    items = []
    for item, spent in zip(batch, spent_each(batch, spent_after), strict=True):
        entry = item.entry
        if item.budget is None or not item.written:
            continue
        found = follow_up(
            api_key_id=entry.api_key_id, budget=item.budget, credits=entry.credits, spent=spent
        )
        if found is not None:
            items.append(found)
    return items


def _follow_ups_write(items: list[FollowUp]) -> None:
    # Each part in its own transaction (licensing.ledger.alerts): a failed last-use write must
    # not take the batch's alerts with it. Alerts an earlier batch could not write go now.
    if items or alerts_waiting():
        follow_ups_write(items)


async def _spool(batch: list[Pending]) -> None:
    """Spool a batch that could not be written. When even that fails the requests answer
    all the same (module docstring) and each row is logged with its spool line."""
    try:
        await run_db(spool_append_many, [(i.entry, i.budget) for i in batch])
    except Exception as exc:
        _rows_lost(batch, exc)
        return
    crashpoints.reached("spool.appended")


def _rows_lost(batch: list[Pending], exc: Exception) -> None:
    refusals = sum(item.budget is None for item in batch)
    for item in batch:
        entry = item.entry
        if item.budget is None:  # a refusal: no provider call, no charge
            logger.warning("ledger row of refused request %s lost: %s", entry.request_id, exc)
            continue
        logger.critical(
            "ledger row of request %s LOST (database and spool unavailable: %s); its spool "
            "line, to replay: %s",
            entry.request_id,
            exc,
            encoded_line(entry, item.budget),
        )
    metrics.ledger_rows_lost("call", len(batch) - refusals)
    metrics.ledger_rows_lost("refusal", refusals)
