"""Leases of a busy wallet: one hold that many requests are admitted under, in memory.

A hold is a statement before every provider call (licensing.ledger.reservations). On a wallet
that this worker holds on again within a window (`GATEWAY_BUDGET_LEASE_SECONDS`, half a second),
the request takes a **lease** instead: a hold of `LEASE_HOLDS` times its own, by the same
statement, under the request id `lease:<end>:<token>`. The requests on that wallet in the
window after it are admitted against the lease in memory (checked and counted in one
synchronous step) while their holds fit in it, so most requests on a busy wallet send no
statement before their provider call. The rules that keep the contract exact
(docs/decisions/money-path-log.md, "Leases of a busy wallet"):

- **never past the limit**: the lease is counted on the wallet's `reserved` like any hold, and
  its requests' holds fit inside it; `spent + reserved` counts every admitted request, as before
  (a request charged while its lease is open is counted twice until the lease closes: never
  too little);
- **far from the limit only**: a lease is granted only while the wallet keeps `LEASE_MARGIN - 1`
  leases' worth after it; nearer the limit every request holds by itself, so small allowances
  never lease and their refusals stay exact;
- **short**: at the end of its window (or once full) the lease closes in one statement: its
  row and amount go, and the requests it admitted that have not handed their ledger row over
  get hold rows of their own (released by their rows, as every hold). It first waits for the
  rows handed over to be committed, and a request that hands its row over while its lease is
  closing waits for the close, so no hold row comes after the row that releases it;
- **a refusal waits for open leases**: a hold that does not fit while the wallet has leases in
  their window waits for them to close and is decided again (`wait_for_open_leases`); a lease
  whose worker died counts until it expires, like that worker's holds;
- **outages**: a lease with a spooled row is not closed: its row is charged by the replay, and
  the lease expires (`GATEWAY_BUDGET_RESERVATION_SECONDS`), counted twice meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import weakref

from django.conf import settings
from django.db import connection

from core import clock, crashpoints, jsonio, pgpool

from .reservations import (
    HOLD_CAP,
    Hold,
    Row,
    held_unless_left,
    hold_for,
    release_left,
    reserve_async,
    tables,
)

logger = logging.getLogger("gateway")

LEASE_HOLDS = 128  # a lease holds this many of its first request's hold
LEASE_MARGIN = 4  # granted while the wallet has 4 leases' worth left: room for 3 more after it
LEASE_PREFIX = "lease:"
WAIT_POLL = 0.02  # seconds between a refusal's looks at the open leases
GRACE = 1.0  # seconds a lease's close may take past its window before its worker counts as gone

OPEN, CLOSING, ENDED = "open", "closing", "ended"


def lease_seconds() -> float:
    return settings.GATEWAY["BUDGET_LEASE_SECONDS"]


class Lease:
    """One lease of one wallet by this worker: what it admitted, what is being written."""

    __slots__ = (
        "wallet_id", "limit", "amount", "request_id", "before", "used", "pending", "writing",
        "spooled", "state", "ended", "_idle",
    )  # fmt: skip

    def __init__(self, wallet_id: int, limit: int, hold: Hold, before: Row):
        self.wallet_id, self.limit, self.amount = wallet_id, limit, hold.amount
        self.request_id = hold.request_id
        self.before = before  # the wallet's (spent, reserved, unit) before the lease
        self.used = 0
        self.pending: dict[str, Hold] = {}  # admitted, ledger row not handed over yet
        self.writing = 0  # ledger rows handed over, not committed yet
        self.spooled = False
        self.state = OPEN
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle: asyncio.Future[None] | None = None

    def admit(self, limit: int, hold: Hold) -> bool:
        """One synchronous step: no other request can come between the check and the count."""
        if self.state is not OPEN or limit != self.limit or self.used + hold.amount > self.amount:
            return False
        self.used += hold.amount
        self.pending[hold.request_id] = hold
        return True

    def written(self, _future: object = None) -> None:
        self.writing -= 1
        if not self.writing and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def all_written(self) -> None:
        while self.writing:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle


_everywhere: weakref.WeakSet[Leases] = weakref.WeakSet()


class Leases:
    """This event loop's leases, one admitting per wallet at a time."""

    def __init__(self):
        self.loop = asyncio.get_running_loop()
        self._open: dict[int, Lease] = {}
        self._taking: dict[int, asyncio.Future[None]] = {}  # a lease's statement in flight
        self._last: dict[int, float] = {}  # wallet id: when this worker last held on it
        self._refused: dict[int, float] = {}  # wallet id: no lease tried again before then
        self.live: set[Lease] = set()  # open or closing
        self._closing: set[asyncio.Task] = set()
        _everywhere.add(self)

    async def admit(self, wallet_id: int, limit: int, hold: Hold) -> Lease | None:
        """The lease `hold` was admitted under (taking one when the wallet is busy), or None:
        the request holds by itself."""
        lease = self._open.get(wallet_id)
        if lease is not None:
            if lease.admit(limit, hold):
                return lease
            self.close_soon(lease)  # full, or the limit changed
        taking = self._taking.get(wallet_id)
        if taking is not None:
            await asyncio.shield(taking)
            lease = self._open.get(wallet_id)
            return lease if lease is not None and lease.admit(limit, hold) else None
        window = lease_seconds()
        amount = min(hold.amount * LEASE_HOLDS, HOLD_CAP)
        if not self._busy(wallet_id, window) or limit - LEASE_MARGIN * amount < 0:
            return None
        return await self._take(wallet_id, limit, hold, amount, window)

    def _busy(self, wallet_id: int, window: float) -> bool:
        """Held on by this worker within the window before (and not refused a lease in it)."""
        now = self.loop.time()
        last = self._last.get(wallet_id)
        if len(self._last) > 10_000:  # forget the quiet wallets
            self._last = {k: v for k, v in self._last.items() if now - v < window}
        self._last[wallet_id] = now
        return last is not None and now - last < window and now >= self._refused.get(wallet_id, 0)

    async def _take(
        self, wallet_id: int, limit: int, hold: Hold, amount: int, window: float
    ) -> Lease | None:
        taking = self.loop.create_future()
        self._taking[wallet_id] = taking
        ends = int((clock.utcnow().timestamp() + window) * 1000)
        lease_hold = hold_for(f"{LEASE_PREFIX}{ends:013d}:{secrets.token_hex(6)}", amount)
        try:
            # Taken when the wallet keeps LEASE_MARGIN leases' worth: spent + reserved +
            # LEASE_MARGIN * amount <= limit, as `spent + reserved < lim`.
            lim = limit - LEASE_MARGIN * amount + 1
            fits, before = await held_unless_left(
                reserve_async([(wallet_id, lim)], lease_hold), lease_hold.request_id
            )
        finally:
            del self._taking[wallet_id]
            taking.set_result(None)
        if not fits or wallet_id not in before:
            self._refused[wallet_id] = self.loop.time() + window
            return None
        lease = Lease(wallet_id, limit, lease_hold, before[wallet_id])
        self._open[wallet_id] = lease
        self.live.add(lease)
        self.loop.call_later(window, self.close_soon, lease)
        lease.admit(limit, hold)
        return lease

    def close_soon(self, lease: Lease) -> None:
        """Stop admitting under the lease and close it (a task of its own)."""
        if lease.state is not OPEN:
            return
        lease.state = CLOSING
        self._last[lease.wallet_id] = self.loop.time()  # still busy: the next one leases
        if self._open.get(lease.wallet_id) is lease:
            del self._open[lease.wallet_id]
        task = self.loop.create_task(self._close(lease))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def close_all(self) -> None:
        for lease in list(self._open.values()):
            self.close_soon(lease)

    async def _close(self, lease: Lease) -> None:
        try:
            await lease.all_written()
            if lease.spooled:  # its rows' charges wait for the replay: the lease expires
                logger.warning("budget lease %s left to expire (a row spooled)", lease.request_id)
                return
            crashpoints.reached("lease.closing")
            await pgpool.fetch(_close_sql(), _close_params(lease))
            crashpoints.reached("lease.closed")
        except Exception:  # it counts until it expires, as a dead worker's
            logger.exception("closing budget lease %s failed; it expires", lease.request_id)
        finally:
            lease.state = ENDED
            self.live.discard(lease)
            lease.ended.set_result(None)


_leases = pgpool.per_loop(Leases)


def leases() -> Leases:
    return _leases()


def _close_sql() -> str:
    """The lease's row and amount go; its admitted requests not handed over yet get holds of
    their own; one statement, committed without waiting for the WAL flush (lost with the
    server, the lease stays and expires: never too little)."""
    wallets, reservations = tables()
    return (
        f"WITH d AS (DELETE FROM {reservations} WHERE request_id = %s RETURNING amount), "
        "p AS MATERIALIZED (SELECT * FROM json_to_recordset(%s::json) "
        "AS r(request_id text, amount bigint, expires timestamptz)), "
        f"i AS (INSERT INTO {reservations} (wallet_id, request_id, amount, expires_at) "
        "SELECT %s, request_id, amount, expires FROM p), "
        "sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)) "
        f"UPDATE {wallets} SET reserved = reserved - coalesce((SELECT sum(amount) FROM d), 0) "
        "+ coalesce((SELECT sum(amount) FROM p), 0) "
        "WHERE id = %s AND (SELECT count(*) FROM sc) = 1 RETURNING id"
    )


def _close_params(lease: Lease) -> list:
    pending = [
        {"request_id": h.request_id, "amount": h.amount, "expires": h.expires_at.isoformat()}
        for h in lease.pending.values()
    ]
    return [lease.request_id, jsonio.dumps(pending).decode(), lease.wallet_id, lease.wallet_id]


# --- a request admitted under a lease ----------------------------------------------------------


def handed_over(lease: Lease | None, request_id: str) -> Lease | None:
    """The request's ledger row goes to the group commit now, its lease open: the lease, to be
    told when the row is written (`Lease.written`); None when it has no lease or its lease
    has ended. (One whose lease is closing waits for the close first: `after_close`.)"""
    if lease is None or lease.state is not OPEN:
        return None
    if lease.pending.pop(request_id, None) is None:
        return None
    lease.writing += 1
    return lease


async def after_close(lease: Lease) -> None:
    """The close gives the request a hold row, which its ledger row then releases."""
    await asyncio.shield(lease.ended)


async def release_held(lease: Lease | None, request_id: str) -> None:
    """A request ends without a ledger row: its hold released (`reservations.release_left`),
    or, admitted under an open lease, dropped from it in memory."""
    if lease is not None and await leave(lease, request_id):
        return
    await release_left(request_id)


async def leave(lease: Lease, request_id: str) -> bool:
    """A request admitted under the lease ends without a ledger row: dropped in memory while
    the lease is open (True); else, once it has closed, its hold row (if the close gave it
    one) is the caller's to release (False)."""
    if lease.state is OPEN:
        hold = lease.pending.pop(request_id, None)
        if hold is not None:
            lease.used -= hold.amount
        return True
    await asyncio.shield(lease.ended)
    return False


def note_spooled(lease: Lease | None) -> None:
    if lease is not None:
        lease.spooled = True


# --- a refusal while leases are open -----------------------------------------------------------


def _open_leases_sql() -> str:
    _, reservations = tables()
    return (
        f"SELECT request_id FROM {reservations} WHERE wallet_id = ANY(%s::bigint[]) "
        f"AND left(request_id, {len(LEASE_PREFIX)}) = '{LEASE_PREFIX}'"
    )


def _in_window(request_id: str, now_ms: int) -> bool:
    try:
        ends = int(request_id.split(":")[1])
    except (IndexError, ValueError):
        return False
    return ends + GRACE * 1000 > now_ms


def _waiting_for(rows: list[tuple]) -> set[str]:
    now_ms = int(clock.utcnow().timestamp() * 1000)
    return {row[0] for row in rows if _in_window(row[0], now_ms)}


async def wait_for_open_leases(wallet_ids: list[int]) -> bool:
    """A hold on these wallets did not fit: wait until the leases in their window (this
    worker's or another's) have closed or their window and its grace have passed; True when
    there were some (the hold is then decided again), False at once when there were none."""
    if not lease_seconds():
        return False
    waiting = _waiting_for(await pgpool.fetch(_open_leases_sql(), [wallet_ids]))
    if not waiting:
        return False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lease_seconds() + GRACE
    while loop.time() < deadline:
        await asyncio.sleep(WAIT_POLL)
        rows = await pgpool.fetch(_open_leases_sql(), [wallet_ids])
        if not waiting & {row[0] for row in rows}:
            break
    return True


class LeasesOpen(Exception):
    """A hold refused on the ORM's thread while leases in their window are open: the event
    loop waits for them (`wait_for_open_leases`), not the thread, which is the worker's for
    every license (budget.budget_check_async)."""

    def __init__(self, wallet_ids: list[int]):
        super().__init__(wallet_ids)
        self.wallet_ids = wallet_ids


def wait_for_open_leases_sync(*, wallet_ids: list[int], wait: bool = True) -> bool:
    """`wait_for_open_leases` for the ORM's path (on a worker thread: the first request of a
    window); never on SQLite, which has no leases. Not `wait`: LeasesOpen instead of waiting."""
    if not lease_seconds() or connection.vendor != "postgresql":
        return False

    def rows() -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(_open_leases_sql(), [wallet_ids])
            return cursor.fetchall()

    waiting = _waiting_for(rows())
    if not waiting:
        return False
    if not wait:
        raise LeasesOpen(wallet_ids)
    deadline = time.monotonic() + lease_seconds() + GRACE
    while time.monotonic() < deadline:
        time.sleep(WAIT_POLL)
        if not waiting & {row[0] for row in rows()}:
            break
    return True


async def close_at_exit(timeout: float = 5.0) -> None:
    """The worker stops (gateway_site.lifespan): its leases close now, not at their expiry."""
    if not lease_seconds():
        return
    found = leases()
    found.close_all()
    ending = [lease.ended for lease in found.live]
    if ending:
        await asyncio.wait(ending, timeout=timeout)


# --- tests ---------------------------------------------------------------------------------------


def close_everywhere() -> None:
    """Close every loop's open leases (from any thread): tests.kit.drain_background_writes."""
    for found in list(_everywhere):
        if not found.loop.is_closed():
            found.loop.call_soon_threadsafe(found.close_all)


def live_anywhere() -> set:
    found = set()
    for instance in list(_everywhere):
        found |= instance.live.copy() | instance._closing.copy()
    return found
