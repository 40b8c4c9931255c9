"""Budget reservations: the credits a request in flight holds on its wallets.

The rule (docs/decisions/money-path-log.md; the contract's "nothing left", with the requests in
flight counted as spent): a request is admitted when, at every limited level (the license's
wallet, a course member's allowance and the course pool), `spent + reserved < limit`; it then
holds its estimated cost (`Hold.amount`, the catalog's price for the request as sent) on each
of them, in the same statement that checked them. Its ledger row's batch releases the hold in
the transaction that charges the actual cost (licensing.ledger.store), a refusal's row too, so
`spent + reserved` counts every request admitted and not yet charged: 30 requests of 100 at
once on an allowance of 1,000 answer at most 10.

A hold is a `Reservation` row per wallet, summed into the wallet's `reserved` by the statements
that add and release it: a row is deleted exactly once (by the charge, a refusal's row, the
request's own clean-up, or the sweep), and its amount leaves `reserved` in that statement. A
hold left by a worker that died expires (`GATEWAY_BUDGET_RESERVATION_SECONDS`): the budget step
releases a wallet's expired holds before it refuses it, and `manage.py release_reservations`
sweeps the rest.

Two implementations, like the store's: `reserve_async` (PostgreSQL, one statement over the async
pool, committed without waiting for the WAL flush: a hold lost with the server is a hold
released, and its row and `reserved` go together) and `reserve_sync` (the ORM's connection:
SQLite, and the first request of a window on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from core import clock, jsonio, pgpool
from core.db import run_db

from ..models import Reservation, Wallet

logger = logging.getLogger("gateway")

# A request holds on at most three wallets: its license's, its course allowance's and the
# course pool's. Null-padded scalars: an array parameter costs psycopg a type inference per call.
MAX_WALLETS = 3
# A billion currency units in micro-credits: beyond any budget, 9,000 of them below a bigint.
HOLD_CAP = 10**15
SWEEP_BATCH = 10_000  # holds released per transaction (a sweep after an outage loops)


@dataclass(frozen=True)
class Hold:
    """What one request reserves on each limited wallet it spends from."""

    request_id: str
    amount: int
    expires_at: datetime


def hold_for(request_id: str, amount: int, now: datetime | None = None) -> Hold:
    """The hold of `amount` (capped: a hold only has to exceed what any wallet has left, and
    the sums of `reserved` must stay far inside a bigint whatever a catalog price says)."""
    seconds = settings.GATEWAY["BUDGET_RESERVATION_SECONDS"]
    expires = (now or clock.utcnow()) + timedelta(seconds=seconds)
    return Hold(request_id, min(amount, HOLD_CAP), expires)


def tables() -> tuple[str, str]:
    quote = connection.ops.quote_name
    return quote(Wallet._meta.db_table), quote(Reservation._meta.db_table)


@functools.cache
def _reserve_sql() -> str:
    """Lock the wallets in id order (as every charge does: no deadlock), decide on their latest
    values, add the hold to each only if every one fits; returns each wallet's values before."""
    wallets, reservations = tables()
    pairs = ", ".join(["(%s::bigint, %s::bigint)"] * MAX_WALLETS)
    return (
        f"WITH v(id, lim) AS (VALUES {pairs}), "
        f"l AS MATERIALIZED (SELECT w.id, w.spent, w.reserved, w.unit, v.lim FROM {wallets} w "
        "JOIN v ON w.id = v.id ORDER BY w.id FOR UPDATE OF w), "
        "ok AS MATERIALIZED (SELECT count(*) = %s AND coalesce(bool_and(spent + reserved < lim), "
        "false) AS fits FROM l), "
        "sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
        f"u AS (UPDATE {wallets} w SET reserved = w.reserved + %s FROM l WHERE w.id = l.id "
        "AND (SELECT fits FROM ok) AND (SELECT count(*) FROM sc) = 1 RETURNING w.id), "
        f"r AS (INSERT INTO {reservations} (wallet_id, request_id, amount, expires_at) "
        "SELECT id, %s, %s, %s FROM u) "
        "SELECT id, spent, reserved, unit, (SELECT fits FROM ok) FROM l"
    )


Row = tuple[int, int, str]  # (spent, reserved, unit) of one wallet, before the hold


async def reserve_async(wallets: list[tuple[int, int]], hold: Hold) -> tuple[bool, dict[int, Row]]:
    """(whether the hold was taken, {wallet id: its values before}) for [(wallet id, limit)];
    a wallet that is gone is missing from the dict (and nothing was held)."""
    assert len(wallets) <= MAX_WALLETS, "a level more: widen _reserve_sql"
    params: list = []
    for wallet_id, limit in wallets:
        params += [wallet_id, limit]
    params += [None, None] * (MAX_WALLETS - len(wallets))
    params += [len(wallets), hold.amount, hold.request_id, hold.amount, hold.expires_at]
    rows = await pgpool.fetch(_reserve_sql(), params)
    fits = bool(rows) and bool(rows[0][4])
    return fits, {row[0]: (row[1], row[2], row[3]) for row in rows}


@functools.cache
def _batch_sql() -> str:
    """Several requests' holds, one wallet each, in one statement (`HoldBatches`): request i of
    a wallet fits when the wallet's spend, its holds and the holds of the batch's requests
    before it stay under its limit. Counting the earlier ones that did not fit changes nothing:
    holds are never negative, so once one does not fit, none after it on that wallet does."""
    wallets, reservations = tables()
    record = (
        "ord int, wallet bigint, lim bigint, amount bigint, request_id text, expires timestamptz"
    )
    return (
        f"WITH req AS MATERIALIZED (SELECT * FROM json_to_recordset(%s::json) AS r({record})), "
        f"l AS MATERIALIZED (SELECT id, spent, reserved, unit FROM {wallets} "
        "WHERE id IN (SELECT wallet FROM req) ORDER BY id FOR UPDATE), "
        "c AS MATERIALIZED (SELECT req.*, l.spent, l.unit, l.reserved + coalesce(sum(req.amount) "
        "OVER (PARTITION BY req.wallet ORDER BY req.ord ROWS BETWEEN UNBOUNDED PRECEDING AND "
        "1 PRECEDING), 0) AS before FROM req JOIN l ON l.id = req.wallet), "
        "ok AS MATERIALIZED (SELECT * FROM c WHERE spent + before < lim), "
        "sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
        f"u AS (UPDATE {wallets} w SET reserved = w.reserved + s.total FROM (SELECT wallet, "
        "sum(amount) AS total FROM ok GROUP BY wallet) s WHERE w.id = s.wallet "
        "AND (SELECT count(*) FROM sc) = 1 RETURNING w.id), "
        f"r AS (INSERT INTO {reservations} (wallet_id, request_id, amount, expires_at) "
        "SELECT wallet, request_id, amount, expires FROM ok) "
        "SELECT ord, spent, before, unit, spent + before < lim FROM c"
    )


Held = tuple[bool, Row | None]  # (taken, the wallet's values before it) of one request's hold


class HoldBatches:
    """Holds on one wallet each (a request without course levels: the license's wallet) that
    arrive together for the same wallet share one statement, as the charges do: under load one
    round trip and one lock of a pooled wallet's row carry many. A hold that finds no statement
    of its wallet in flight sends its own from its request's task (`take`), with no hand-over:
    a task started and two futures resolved cost a stream's first byte three turns of a busy
    event loop (docs/decisions/money-path-log.md, "The hold without a hand-over"); those that
    arrive meanwhile wait for it and go together next. Batched per wallet, so that a busy wallet
    (its holds wait for its row's lock) never delays another license's holds."""

    def __init__(self):
        self._waiting: dict[int, list[tuple[int, int, Hold, asyncio.Future]]] = {}
        self._tasks: dict[int, asyncio.Task] = {}
        self._own: set[int] = set()  # wallets with a requester's own statement in flight

    async def take(self, wallet_id: int, limit: int, hold: Hold) -> Held:
        """The hold's answer: by a statement of its own when its wallet has none in flight,
        else in the wallet's next batch (`submit`)."""
        if wallet_id in self._own or wallet_id in self._tasks:
            return await unless_left(self.submit(wallet_id, limit, hold), hold.request_id, _taken)
        self._own.add(wallet_id)
        try:
            fits, before = await held_unless_left(
                reserve_async([(wallet_id, limit)], hold), hold.request_id
            )
        finally:
            self._own.discard(wallet_id)
            if wallet_id in self._waiting and wallet_id not in self._tasks:
                self._start(wallet_id)
        return fits, before.get(wallet_id)

    def submit(self, wallet_id: int, limit: int, hold: Hold) -> asyncio.Future[Held]:
        """The hold joins its wallet's next statement; the future has its answer. The statement
        runs on the batch's task, not the requester's: one that leaves does not cut it."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(wallet_id, []).append((wallet_id, limit, hold, future))
        if wallet_id not in self._tasks and wallet_id not in self._own:
            self._start(wallet_id)
        return future

    def _start(self, wallet_id: int) -> None:
        self._tasks[wallet_id] = asyncio.get_running_loop().create_task(self._run(wallet_id))

    async def _run(self, wallet_id: int) -> None:
        try:
            while batch := self._waiting.pop(wallet_id, None):
                try:
                    results = await _hold_batch(batch)
                except Exception as exc:  # every waiting request answers it (503: an outage)
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (*_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:  # nothing can arrive between the last pop and this: no await in between
            del self._tasks[wallet_id]


async def _hold_batch(batch: list[tuple[int, int, Hold, asyncio.Future]]) -> list[Held]:
    if len(batch) == 1:
        wallet_id, limit, hold, _ = batch[0]
        fits, before = await reserve_async([(wallet_id, limit)], hold)
        return [(fits, before.get(wallet_id))]
    items = [
        {
            "ord": n,
            "wallet": wallet_id,
            "lim": limit,
            "amount": hold.amount,
            "request_id": hold.request_id,
            "expires": hold.expires_at.isoformat(),
        }
        for n, (wallet_id, limit, hold, _) in enumerate(batch)
    ]
    rows = await pgpool.fetch(_batch_sql(), [jsonio.dumps(items).decode()])
    found: dict[int, Held] = {row[0]: (bool(row[4]), (row[1], row[2], row[3])) for row in rows}
    return [found.get(n, (False, None)) for n in range(len(batch))]


hold_batches = pgpool.per_loop(HoldBatches)

# Releases of holds whose requester left while the hold's statement was in flight (tests wait
# for them, as for the ledger's background writes: tests.kit.drain_background_writes).
releasing: set[asyncio.Task] = set()


def _taken(result: Held) -> bool:
    return bool(result[0])


async def unless_left(pending, request_id: str, held):
    """Await a hold's statement that runs elsewhere (a batch's task, a thread); should the
    requester leave meanwhile (a client that hangs up cancels its request), the statement still
    answers, and what it held is released then (`release_when_answered`): the pipeline, which
    never saw the hold, would not."""
    future = asyncio.ensure_future(pending)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        release_when_answered(future, request_id, held)
        raise


async def held_unless_left(statement, request_id: str):
    """Await a hold's statement sent from the requester's own task. Should the requester leave
    meanwhile, psycopg cancels the statement on the server and waits until it has ended (rolled
    back, or committed just before the cancel came) before the cancellation goes on; so a
    release sent then comes after it, and takes whatever it held."""
    try:
        return await statement
    except asyncio.CancelledError:
        _release_soon(request_id)
        raise


def _release_soon(request_id: str) -> None:
    task = asyncio.get_running_loop().create_task(release_left(request_id))
    releasing.add(task)
    task.add_done_callback(releasing.discard)


def release_when_answered(pending: asyncio.Future, request_id: str, held) -> None:
    """The requester of `pending` (a hold's statement, still running) has left: no ledger row
    will release what it holds, and the pipeline, which never saw the hold, cannot. Once the
    statement answers, a hold it took (`held(result)`) is released; one that failed or was
    refused took nothing."""

    def answered(future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None or not held(future.result()):
            return
        _release_soon(request_id)

    pending.add_done_callback(answered)


async def release_left(request_id: str) -> None:
    """Release the holds of a request that ended without a ledger row, from the event loop; a
    failure is logged (the holds then expire: GATEWAY_BUDGET_RESERVATION_SECONDS)."""
    try:
        await run_db(release_request, request_id)
    except Exception:
        logger.exception("releasing the budget hold of request %s failed", request_id)


def reserve_sync(wallets: list[tuple[int, int]], hold: Hold) -> bool:
    """`reserve_async` through the ORM's connection: each wallet's conditional update in id
    order (the first one takes SQLite's write lock), all or nothing."""
    wallet_table, _ = tables()
    sql = (
        f"UPDATE {wallet_table} SET reserved = reserved + %s "
        "WHERE id = %s AND spent + reserved < %s"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        for wallet_id, limit in sorted(wallets):
            cursor.execute(sql, [hold.amount, wallet_id, limit])
            if cursor.rowcount != 1:
                transaction.set_rollback(True)
                return False
        Reservation.objects.bulk_create(
            Reservation(
                wallet_id=wallet_id,
                request_id=hold.request_id,
                amount=hold.amount,
                expires_at=hold.expires_at,
            )
            for wallet_id, _ in wallets
        )
    return True


# --- releasing what no ledger row will release ------------------------------------------------


def release_expired(now: datetime | None = None, wallet_ids: list[int] | None = None) -> int:
    """Release the holds that expired by `now` (of these wallets, or all): the sweep. Returns
    how many were released. Holds a charge is releasing at this moment are skipped."""
    expired = Reservation.objects.filter(expires_at__lte=now or clock.utcnow())
    if wallet_ids is not None:
        expired = expired.filter(wallet_id__in=wallet_ids)
    return _release(expired)


def release_request(request_id: str) -> int:
    """Release one request's holds: it ended without a ledger row (its client went away before
    the provider call, or an unexpected error)."""
    return _release(Reservation.objects.filter(request_id=request_id))


def _release(found) -> int:
    """Delete the found holds and take their sums off their wallets' `reserved`, in one
    transaction; the rows are locked first (another release of the same row waits for it, then
    finds it gone) and the wallets in id order, like every charge."""
    released: dict[int, int] = {}
    with transaction.atomic():
        locked = found.order_by("id").select_for_update(skip_locked=True)
        ids = list(locked.values_list("id", flat=True)[:SWEEP_BATCH])
        if not ids:
            return 0
        _, reservations = tables()
        marks = ", ".join(["%s"] * len(ids))
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {reservations} WHERE id IN ({marks}) RETURNING wallet_id, amount",
                ids,
            )
            for wallet_id, amount in cursor.fetchall():
                released[wallet_id] = released.get(wallet_id, 0) + amount
        for wallet_id, amount in sorted(released.items()):
            Wallet.objects.filter(pk=wallet_id).update(reserved=F("reserved") - amount)
    return len(ids)
