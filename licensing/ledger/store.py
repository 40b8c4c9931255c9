"""The ledger's store: the one writer of ledger rows and wallet charges.

A batch (one request, or the requests the group commit gathered, or one replayed spool entry)
is written in one transaction: its rows are inserted with `ON CONFLICT (request_id) DO NOTHING`
and each wallet is charged the sum of the rows actually inserted, so a replayed entry whose
first write had committed is neither written nor charged twice. A live request never meets the
conflict: its request id is the gateway's own (a uuid4 made by gateway_site.middleware).

The SQL is made here, once: `_insert` is the only text that inserts ledger rows and `_charge`
the only one that charges wallets. Two implementations of `LedgerStore` send it:

- `commit_batch_async` (PostgreSQL, from the event loop over the async pool): the whole batch
  as one statement, one round trip, no thread hop. The rows travel as one JSON document
  (orjson, in C) that PostgreSQL unpacks with json_to_recordset (preparing each value through
  its model field and dumping one array per column cost more CPU than the rest of the commit);
  the wallets are locked in id order, so two processes' batches never deadlock. A batch of one
  (every batch at low load) goes by plain parameters, ~0.1 ms less to send and unpack.
- A batch with a course member's request (licensing.ledger.budget: its course's levels) goes
  as the JSON batch too, each row carrying its level wallets, charged with the rest; a batch
  of one such request by plain parameters, its level wallets as one array.
- `commit_batch_sync` (the ORM's connection, on a worker thread: SQLite, and every synchronous
  caller such as the spool's replay): one multi-row INSERT with each value prepared by its model
  field as the ORM would, then one UPDATE per wallet in id order.

Each returns {wallet id: spent after the batch} and marks every item `written` or not.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Protocol

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core import jsonio, pgpool
from core.db import run_db

from ..models import Reservation, Transaction, Wallet
from .budget import BudgetState
from .record import COLUMNS, FIELDS, LedgerEntry, row_values


@dataclass
class Pending:
    """One ledger entry on its way to the store."""

    entry: LedgerEntry
    budget: BudgetState | None  # None: a refusal (0 credits, never a wallet)
    future: asyncio.Future | None
    wallet_id: int | None = None
    written: bool = True  # False once the store found its request id already in the ledger


class WalletGone(DatabaseError):
    """A wallet was deleted under a charge: nothing of the batch was written."""


class LedgerStore(Protocol):
    async def commit(self, batch: list[Pending]) -> dict[int, int]: ...


# --- the SQL --------------------------------------------------------------------------------


def _insert(source: str) -> str:
    """The ledger rows of `source` (a VALUES list or a SELECT of every column), each written
    unless its request id is there already; returns what the wallets' charge needs."""
    table, names = _ledger_columns()
    return (
        f"INSERT INTO {table} ({names}) {source} ON CONFLICT (request_id) DO NOTHING "
        "RETURNING request_id, wallet_id, credits"
    )


def _charge(source: str) -> str:
    """Add each wallet's amount of `source` (rows of wallet, amount, released) to its spend and
    take what its requests had reserved off its holds; returns its spend."""
    quote = connection.ops.quote_name
    return (
        f"UPDATE {quote(Wallet._meta.db_table)} SET spent = spent + c.amount, "
        "reserved = reserved - c.released, updated_at = %s "
        f"FROM {source} AS c WHERE id = c.wallet RETURNING id, spent"
    )


def _release_and_charge(charges: str) -> str:
    """The CTEs after `ins` of every batch statement: the inserted rows' holds deleted (a
    refusal's too: licensing.ledger.reservations), then `charges` (a SELECT of wallet, amount,
    0) and the released sums added up per wallet, the wallets locked in id order (two
    processes' batches never deadlock), each charged. A replayed row that was written before
    has no hold left: its first write released it."""
    quote = connection.ops.quote_name
    wallets, holds = quote(Wallet._meta.db_table), quote(Reservation._meta.db_table)
    return (
        f"rel AS (DELETE FROM {holds} WHERE request_id IN (SELECT request_id FROM ins) "
        "RETURNING wallet_id, amount), "
        "c AS MATERIALIZED (SELECT wallet, sum(amount)::bigint AS amount, "
        f"sum(released)::bigint AS released FROM ({charges} UNION ALL "
        "SELECT wallet_id, 0::bigint, amount FROM rel) AS x(wallet, amount, released) "
        "GROUP BY wallet), "
        f"locked AS (SELECT id FROM {wallets} WHERE id IN (SELECT wallet FROM c) "
        "ORDER BY id FOR UPDATE), "
        f"charged AS ({_charge('(SELECT * FROM c WHERE wallet IN (SELECT id FROM locked))')}) "
    )


def _result(charged: str, inserted: str) -> str:
    """One result for both: (wallet id, spent, NULL) rows, then (NULL, NULL, request id) rows."""
    return (
        f"SELECT id, spent, NULL FROM {charged} UNION ALL SELECT NULL, NULL, request_id "
        f"FROM {inserted}"
    )


# The rows a batch's inserted ledger rows charge: (wallet, amount, 0 released).
_ROW_CHARGES = (
    "SELECT wallet_id, credits::bigint, 0::bigint FROM ins "
    "WHERE wallet_id IS NOT NULL AND credits <> 0"
)


@functools.cache
def _single_sql() -> str:
    """A batch of one, by plain parameters. The values are cast as the batch statement casts
    them, so both refuse the same rows."""
    values = ", ".join(f"%s::{_column_type(f)}" for f in FIELDS)
    return (
        f"WITH ins AS ({_insert(f'VALUES ({values})')}), {_release_and_charge(_ROW_CHARGES)}"
        + _result("charged", "ins")
    )


@functools.cache
def _batch_sql() -> str:
    """Insert the rows (their own request ids never collide), release their holds, add each
    wallet's sum."""
    _, names = _ledger_columns()
    quote = connection.ops.quote_name
    record = ", ".join(
        f"{quote(c)} {_column_type(f)}" for c, f in zip(COLUMNS, FIELDS, strict=True)
    )
    rows = f"SELECT {names} FROM json_to_recordset(%s::json) AS r({record})"
    return f"WITH ins AS ({_insert(rows)}), {_release_and_charge(_ROW_CHARGES)}" + _result(
        "charged", "ins"
    )


@functools.cache
def _course_single_sql() -> str:
    """`_single_sql` for one course member's request: its row, then its credits added to its
    license wallet and its levels' (MAX_LEVELS scalar parameters, null where a level has no
    wallet: an array parameter costs psycopg a type inference per call), locked in id order
    like a batch's (another worker may be charging the same course pool and license at once)."""
    values = ", ".join(f"%s::{_column_type(f)}" for f in FIELDS)
    charges = (
        "SELECT w.wallet, ins.credits::bigint, 0::bigint FROM ins CROSS JOIN LATERAL "
        f"unnest(ARRAY[ins.wallet_id, {', '.join(['%s::bigint'] * MAX_LEVELS)}]) AS w(wallet) "
        "WHERE w.wallet IS NOT NULL AND ins.credits <> 0"
    )
    return (
        f"WITH ins AS ({_insert(f'VALUES ({values})')}), {_release_and_charge(charges)}"
        + _result("charged", "ins")
    )


@functools.cache
def _course_batch_sql() -> str:
    """`_batch_sql` for a batch with course members: each row also carries the ids of its
    course's level wallets (`levels`, not a ledger column), and every inserted row charges its
    credits to its license wallet and to each of them, locked in one id order with the rest."""
    _, names = _ledger_columns()
    quote = connection.ops.quote_name
    record = ", ".join(
        f"{quote(c)} {_column_type(f)}" for c, f in zip(COLUMNS, FIELDS, strict=True)
    )
    source = f"SELECT * FROM json_to_recordset(%s::json) AS r({record}, levels bigint[])"
    charges = (
        "SELECT w.wallet, ins.credits::bigint, 0::bigint FROM ins "
        "JOIN src ON src.request_id = ins.request_id CROSS JOIN LATERAL "
        "unnest(array_prepend(ins.wallet_id, coalesce(src.levels, '{}'::bigint[]))) AS w(wallet) "
        "WHERE w.wallet IS NOT NULL AND ins.credits <> 0"
    )
    return (
        f"WITH src AS MATERIALIZED ({source}), "
        f"ins AS ({_insert(f'SELECT {names} FROM src')}), {_release_and_charge(charges)}"
        + _result("charged", "ins")
    )


def _orm_insert(rows: list[dict]) -> tuple[str, list]:
    """One multi-row INSERT, each value prepared by its model field as the ORM would (a quarter
    of the CPU of Model.objects.create on this path)."""
    marks = "(" + ", ".join(["%s"] * len(FIELDS)) + ")"
    sql = _insert("VALUES " + ", ".join([marks] * len(rows)))
    params = [f.get_db_prep_save(row.get(f.attname), connection) for row in rows for f in FIELDS]
    return sql, params


_ORM_CHARGE = functools.cache(
    lambda: _charge("(SELECT %s AS wallet, %s AS amount, %s AS released)")
)


def _orm_release(request_ids: list[str]) -> tuple[str, list]:
    """Delete the holds of the rows just inserted, returning (wallet id, amount) of each."""
    holds = connection.ops.quote_name(Reservation._meta.db_table)
    marks = ", ".join(["%s"] * len(request_ids))
    return (
        f"DELETE FROM {holds} WHERE request_id IN ({marks}) RETURNING wallet_id, amount",
        request_ids,
    )


def _ledger_columns() -> tuple[str, str]:
    """(the ledger's table, its columns) quoted, as every statement inserts them."""
    quote = connection.ops.quote_name
    return quote(Transaction._meta.db_table), ", ".join(quote(c) for c in COLUMNS)


def _column_type(field) -> str:
    # Without the length: the INSERT's own cast then refuses an over-long value instead of
    # a conversion cutting it short.
    return field.cast_db_type(connection).split("(")[0].strip()


# --- the two implementations ------------------------------------------------------------------


# A course member's levels besides the license: the student's allowance and the course pool.
MAX_LEVELS = 2


def level_wallets(item: Pending) -> list[int]:
    """The wallet ids of a course member's levels (none for anyone else)."""
    if item.budget is None:
        return []
    return [level.wallet_id for level in item.budget.levels if level.wallet_id is not None]


def _wallet_sums(batch: list[Pending]) -> list[tuple[int, int]]:
    """(wallet id, amount) of the written rows, in wallet id order: each row's license wallet
    and its course's levels."""
    sums: dict[int, int] = {}
    for item in batch:
        if not (item.written and item.entry.credits):
            continue
        for wallet_id in (item.wallet_id, *level_wallets(item)):
            if wallet_id is not None:
                sums[wallet_id] = sums.get(wallet_id, 0) + item.entry.credits
    return sorted(sums.items())


def _charges_and_releases(
    batch: list[Pending], released: list[tuple[int, int]]
) -> list[tuple[int, int, int]]:
    """(wallet id, amount charged, amount released) in wallet id order."""
    sums = {wallet_id: [amount, 0] for wallet_id, amount in _wallet_sums(batch)}
    for wallet_id, amount in released:
        sums.setdefault(wallet_id, [0, 0])[1] += amount
    return [(wallet_id, charged, freed) for wallet_id, (charged, freed) in sorted(sums.items())]


def _mark_written(batch: list[Pending], inserted: set[str]) -> None:
    for item in batch:
        item.written = item.entry.request_id in inserted


def _check_charged(batch: list[Pending], spent: dict[int, int]) -> None:
    missing = {w for w, _ in _wallet_sums(batch)} - set(spent)
    if missing:
        raise WalletGone(f"wallets {sorted(missing)} are gone")


def commit_batch_sync(batch: list[Pending]) -> dict[int, int]:
    """The batch through the ORM's connection (SQLite, or any synchronous caller)."""
    now = timezone.now()
    spent: dict[int, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = _orm_insert([row_values(i.entry, i.wallet_id) for i in batch])
        cursor.execute(sql, params)
        inserted = {row[0] for row in cursor.fetchall()}
        _mark_written(batch, inserted)
        released: list[tuple[int, int]] = []
        if inserted:
            cursor.execute(*_orm_release(sorted(inserted)))
            released = cursor.fetchall()
        for wallet_id, amount, freed in _charges_and_releases(batch, released):
            cursor.execute(_ORM_CHARGE(), [now, wallet_id, amount, freed])
            spent.update(cursor.fetchall())
        _check_charged(batch, spent)  # raised inside the transaction: nothing is kept
    return spent


async def commit_batch_async(batch: list[Pending]) -> dict[int, int]:
    """The batch over the async pool as one prepared statement: one round trip, no explicit
    transaction (a single statement is atomic), the same text whatever the batch size."""
    courses = any(item.budget is not None and item.budget.levels for item in batch)
    if courses and len(batch) == 1:
        item = batch[0]
        sql = _course_single_sql()
        levels = level_wallets(item)
        assert len(levels) <= MAX_LEVELS, "a level more: widen _course_single_sql"
        padded = [*levels, *[None] * (MAX_LEVELS - len(levels))]
        params = [*_single_params(item), *padded, timezone.now()]
    elif courses:
        rows = jsonio.dumps(
            [{**_row_json(i.entry, i.wallet_id), "levels": level_wallets(i)} for i in batch]
        ).decode()
        sql, params = _course_batch_sql(), [rows, timezone.now()]
    elif len(batch) == 1:
        sql, params = _single_sql(), [*_single_params(batch[0]), timezone.now()]
    else:
        rows = jsonio.dumps([_row_json(i.entry, i.wallet_id) for i in batch]).decode()
        sql, params = _batch_sql(), [rows, timezone.now()]
    result = await pgpool.fetch(sql, params)
    spent = {wallet_id: total for wallet_id, total, _ in result if wallet_id is not None}
    _mark_written(batch, {request_id for wallet_id, _, request_id in result if wallet_id is None})
    _check_charged(batch, spent)  # pragma: no cover - a wallet deleted under a charge
    return spent


def _row_json(entry: LedgerEntry, wallet_id: int | None) -> dict:
    row = row_values(entry, wallet_id)
    return {column: row[attname] for attname, column in _COLUMNS}


_COLUMNS = [(f.attname, f.column) for f in FIELDS]


def _single_params(item: Pending) -> list:
    row = _row_json(item.entry, item.wallet_id)
    row["metadata"] = jsonio.dumps(row["metadata"]).decode()
    return list(row.values())


class PgStore:
    async def commit(self, batch: list[Pending]) -> dict[int, int]:
        return await commit_batch_async(batch)


class OrmStore:
    async def commit(self, batch: list[Pending]) -> dict[int, int]:
        return await run_db(commit_batch_sync, batch)


_PG, _ORM = PgStore(), OrmStore()


def store() -> LedgerStore:
    """The store of the event loop: the async pool on PostgreSQL, the ORM elsewhere."""
    return _PG if pgpool.available() else _ORM
