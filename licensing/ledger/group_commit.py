"""Group commit of charges and ledger rows: requests that finish together share one transaction.

Every request awaits the commit of its batch before it answers, so nothing is acknowledged
before it is durable. While one batch commits, the next one gathers whatever finishes meanwhile:
at low load a batch is one request (no added wait), under load one round trip carries many.

A batch is one transaction: one `UPDATE ... RETURNING spent` per wallet with the batch's sum
(wallets in id order, so two processes' batches never deadlock) and one multi-row INSERT of the
ledger rows. On PostgreSQL it is sent from the event loop over the async pool as one statement
(one round trip, no thread hop; a batch of one by a plainer statement of its own); elsewhere it
runs through the ORM on a worker thread. Each
request's `credits_remaining` is exact: the wallet's total after the batch, less what the
requests after it in the same batch added. If the batch cannot be written, every entry goes to
the durable spool (licensing.ledger.spool) and is written when the database is back.

If the spool cannot take them either (a race: the pre-call check `spool_refuses` found it
writable, or the database had not failed yet), the requests still answer: their provider calls
are made and paid, a 503 would only make the clients call again, unrecorded again. Each such row
is logged at CRITICAL with its spool line (an operator can append the line to a spool file and
replay it) and counted in `gateway_ledger_rows_lost` (README, "Reliability").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass

import psycopg
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core import jsonio, metrics
from gateway_site import pgpool
from gateway_site.db import run_db

from ..models import Transaction
from . import feed
from .alerts import follow_up, follow_ups_write
from .budget import BudgetState, known_wallet_id, wallet_open
from .record import COLUMNS, FIELDS, WALLET_ADD_SQL, LedgerEntry, insert_statement, row_values
from .spool import (
    encoded_line,
    note_database_down,
    note_database_up,
    replay_soon,
    spool_append_many,
)

logger = logging.getLogger("gateway.ledger")


@dataclass
class Pending:
    entry: LedgerEntry
    budget: BudgetState | None  # None: a refusal (0 credits, never a wallet)
    future: asyncio.Future
    wallet_id: int | None = None


def _wallet_sums(batch: list[Pending]) -> list[tuple[int, int]]:
    sums: dict[int, int] = {}
    for item in batch:
        if item.entry.credits and item.wallet_id is not None:
            sums[item.wallet_id] = sums.get(item.wallet_id, 0) + item.entry.credits
    return sorted(sums.items())


def _spent_each(batch: list[Pending], spent_after: dict[int, int]) -> list[int]:
    """Walk the batch backwards: each request's wallet as it was after its own charge."""
    later: dict[int, int] = {}
    result: list[int] = []
    for item in reversed(batch):
        wallet_id = item.wallet_id
        if wallet_id in spent_after and item.entry.credits:
            spent = spent_after[wallet_id] - later.get(wallet_id, 0)
            later[wallet_id] = later.get(wallet_id, 0) + item.entry.credits
        elif item.budget is None:
            spent = 0
        else:
            spent = item.budget.spent + item.entry.credits
        result.append(spent)
    return result[::-1]


def _remaining(batch: list[Pending], spent_after: dict[int, int]) -> list[int | None]:
    return [
        item.budget.remaining_after(spent) if item.budget else None
        for item, spent in zip(batch, _spent_each(batch, spent_after), strict=True)
    ]


async def _follow_up(batch: list[Pending], spent_after: dict[int, int]) -> None:
    """A committed batch's keys' last use and budget alerts (licensing.ledger.alerts): decided in
    memory, written (rarely: once a minute per key, or a threshold crossed) before the batch's
    requests answer, so an alert is in place when the request that crossed it returns."""
    items = []
    for item, spent in zip(batch, _spent_each(batch, spent_after), strict=True):
        entry = item.entry
        if item.budget is None:
            continue
        found = follow_up(
            api_key_id=entry.api_key_id, budget=item.budget, credits=entry.credits, spent=spent
        )
        if found is not None:
            items.append(found)
    if not items:
        return
    try:
        await run_db(_follow_ups_atomic, items)
    except Exception:  # last use and alerts are worth a log line, never a failed request
        logger.exception("writing last use / budget alerts failed")


def _follow_ups_atomic(items) -> None:
    with transaction.atomic():
        follow_ups_write(items)


def commit_batch_sync(batch: list[Pending]) -> dict[int, int]:
    """The batch through the ORM's connection (SQLite, or PostgreSQL without the pool)."""
    now = timezone.now()
    spent: dict[int, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for wallet_id, amount in _wallet_sums(batch):
            cursor.execute(WALLET_ADD_SQL, [amount, now, wallet_id])
            row = cursor.fetchone()
            if row is None:
                raise DatabaseError(f"wallet {wallet_id} is gone")
            spent[wallet_id] = row[0]
        sql, params = insert_statement([row_values(i.entry, i.wallet_id) for i in batch])
        cursor.execute(sql, params)
    return spent


async def commit_batch_async(batch: list[Pending]) -> dict[int, int]:
    """The batch over the async pool as one prepared statement: one round trip, no explicit
    transaction (a single statement is atomic), the same text whatever the batch size.

    The rows travel as one JSON document (orjson, in C) that PostgreSQL unpacks with
    json_to_recordset: preparing each value through its model field and dumping one array per
    column cost more CPU than the rest of the commit (the profile at 32 connections)."""
    sums = _wallet_sums(batch)
    if len(batch) == 1:
        sql, params = _single_sql(), _single_params(batch[0], sums)
    else:
        wallets = jsonio.dumps([{"id": w, "amount": a} for w, a in sums]).decode()
        rows = jsonio.dumps([_row_json(i.entry, i.wallet_id) for i in batch]).decode()
        sql, params = _batch_sql(), [wallets, timezone.now(), rows]
    pool = await pgpool.pool()
    async with pool.connection() as conn:
        cursor = await conn.execute(sql, params)
        spent = dict(await cursor.fetchall())
    missing = {w for w, _ in sums} - set(spent)
    if missing:  # pragma: no cover - a wallet deleted under a charge: nothing was written
        raise DatabaseError(f"wallets {sorted(missing)} are gone")
    return spent


def _row_json(entry: LedgerEntry, wallet_id: int | None) -> dict:
    row = row_values(entry, wallet_id)
    return {column: row[attname] for attname, column in _COLUMNS}


_COLUMNS = [(f.attname, f.column) for f in FIELDS]


@functools.cache
def _batch_sql() -> str:
    """Lock the batch's wallets in id order (two processes' batches never deadlock), add each
    wallet's sum, and insert the rows."""
    table, names = _ledger_columns()
    quote = connection.ops.quote_name
    record = ", ".join(
        f"{quote(c)} {_column_type(f)}" for c, f in zip(COLUMNS, FIELDS, strict=True)
    )
    return (
        "WITH c AS MATERIALIZED (SELECT * FROM json_to_recordset(%s::json) "
        "AS c(id bigint, amount bigint)), "
        "locked AS (SELECT id FROM licensing_wallet WHERE id IN (SELECT id FROM c) "
        "ORDER BY id FOR UPDATE), "
        "charged AS (UPDATE licensing_wallet AS w SET spent = w.spent + c.amount, "
        "updated_at = %s FROM c "
        "WHERE w.id = c.id AND c.id IN (SELECT id FROM locked) RETURNING w.id, w.spent), "
        f"ledger AS (INSERT INTO {table} ({names}) SELECT {names} "
        f"FROM json_to_recordset(%s::json) AS r({record})) "
        "SELECT id, spent FROM charged"
    )


@functools.cache
def _single_sql() -> str:
    """A batch of one (every batch at low load): one wallet, so no lock order to keep, and plain
    parameters, ~0.1 ms less than the JSON document to send and unpack. The values are cast
    as the batch statement casts them, so both refuse the same rows."""
    table, names = _ledger_columns()
    values = ", ".join(f"%s::{_column_type(f)}" for f in FIELDS)
    return (
        "WITH charged AS (UPDATE licensing_wallet SET spent = spent + %s, updated_at = %s "
        "WHERE id = %s RETURNING id, spent), "
        f"ledger AS (INSERT INTO {table} ({names}) VALUES ({values})) "
        "SELECT id, spent FROM charged"
    )


def _single_params(item: Pending, sums: list[tuple[int, int]]) -> list:
    wallet_id, amount = sums[0] if sums else (None, 0)
    row = _row_json(item.entry, item.wallet_id)
    row["metadata"] = jsonio.dumps(row["metadata"]).decode()
    return [amount, timezone.now(), wallet_id, *row.values()]


def _ledger_columns() -> tuple[str, str]:
    """(the ledger's table, its columns) quoted, as both statements insert them."""
    quote = connection.ops.quote_name
    return quote(Transaction._meta.db_table), ", ".join(quote(c) for c in COLUMNS)


def _column_type(field) -> str:
    # Without the length: the INSERT's own cast then refuses an over-long value instead of
    # a conversion cutting it short.
    return field.cast_db_type(connection).split("(")[0].strip()


class GroupCommit:
    """One per event loop. `write` returns the request's credits remaining once committed."""

    def __init__(self):
        self._queue: list[Pending] = []
        self._task: asyncio.Task | None = None

    async def write(self, entry: LedgerEntry, budget: BudgetState | None) -> int | None:
        loop = asyncio.get_running_loop()
        item = Pending(entry=entry, budget=budget, future=loop.create_future())
        self._queue.append(item)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        # A client that goes away does not take its charge with it: the batch still commits.
        return await asyncio.shield(item.future)

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            await self._commit(batch)
        replay_soon()

    async def _commit(self, batch: list[Pending]) -> None:
        try:
            await _resolve_wallets(batch)
            if pgpool.available():
                spent = await commit_batch_async(batch)
            else:
                spent = await run_db(commit_batch_sync, batch)
            note_database_up()
            await _follow_up(batch, spent)
            feed.publish([item.entry for item in batch])
        except Exception as exc:
            # An outage, or anything else: the provider calls happened all the same, keep them.
            outage = isinstance(exc, DatabaseError | psycopg.Error)
            if outage:
                note_database_down()
            logger.error(
                "ledger batch of %d failed (%s); spooling it", len(batch), exc, exc_info=not outage
            )
            spent = await self._spool(batch)
        for item, remaining in zip(batch, _remaining(batch, spent), strict=True):
            if not item.future.done():
                item.future.set_result(remaining)

    async def _spool(self, batch: list[Pending]) -> dict:
        """Spool a batch that could not be written. When even that fails the requests answer
        all the same (module docstring) and each row is logged with its spool line."""
        try:
            await run_db(spool_append_many, [(i.entry, i.budget) for i in batch])
        except Exception as exc:
            _rows_lost(batch, exc)
        return {}


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


async def _resolve_wallets(batch: list[Pending]) -> None:
    """Wallet ids come from the budget check or the cache; a charge to a wallet not opened yet
    (an unlimited license's first charge in a window) opens it on a worker thread."""
    for item in batch:
        if item.budget is None:
            continue
        item.wallet_id = item.budget.wallet_id or known_wallet_id(item.budget)
        if item.wallet_id is None and item.entry.credits:
            item.wallet_id = await run_db(wallet_open, item.budget)


_writer = pgpool.per_loop(GroupCommit)


async def ledger_write(*, entry: LedgerEntry, budget: BudgetState | None) -> int | None:
    """Charge and record one request (group-committed); returns its credits remaining.
    budget None records a refusal: 0 credits, no wallet."""
    return await _writer().write(entry, budget)
