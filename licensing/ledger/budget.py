"""Budgets: which wallet a request spends from, and whether it may (the charge itself is the
ledger store's: licensing.ledger.store).

A license's budget has a unit (`micro_credits`), a strategy (`pooled`: one wallet for the
license; `per_user`: one per end user or API key), a period (`daily`, `weekly`, `monthly`,
`lifetime`; calendar windows in its institution's time zone, UTC unless it set one) and a limit
(None = unlimited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dt_time
from functools import partial
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import IntegrityError, connection, transaction

from core import clock, pgpool
from core.db import run_db
from core.errors import OUT_OF_BUDGET, BadRequest, BudgetConfigurationError
from core.localcache import TTLCache

from ..models import Course, CourseMember, Wallet
from .leases import (
    Lease,
    LeasesOpen,
    lease_seconds,
    leases,
    wait_for_open_leases,
    wait_for_open_leases_sync,
)
from .reservations import (
    Hold,
    Row,
    held_unless_left,
    hold_batches,
    release_expired,
    reserve_async,
    reserve_sync,
    unless_left,
)

UNITS = ("micro_credits",)
STRATEGIES = ("pooled", "per_user")
PERIODS = ("daily", "weekly", "monthly", "lifetime")
LIFETIME_START = datetime(1970, 1, 1, tzinfo=UTC)

_wallet_ids = TTLCache("wallet-ids", max_entries=50_000)
WALLET_READ_SQL = "SELECT spent, unit, reserved FROM licensing_wallet WHERE id = %s"
WALLETS_READ_SQL = (
    "SELECT id, spent, unit, reserved FROM licensing_wallet WHERE id = ANY(%s::bigint[])"
)
# A course member's three wallets (license, allowance, pool) as scalars, null-padded: an array
# parameter costs psycopg a type inference per call (docs/performance.md).
FEW_WALLETS = 3
FEW_WALLETS_READ_SQL = (
    "SELECT id, spent, unit, reserved FROM licensing_wallet "
    "WHERE id IN (%s::bigint, %s::bigint, %s::bigint)"
)


@dataclass(frozen=True)
class BudgetConfig:
    unit: str
    strategy: str
    period: str
    limit: int | None
    alert_at: int | None = None  # spend that triggers the budget alert (licensing.ledger.alerts)
    timezone: str = "UTC"  # the institution's: its days, weeks and months (window_start)

    def validate(self) -> None:
        if (
            self.unit not in UNITS
            or self.strategy not in STRATEGIES
            or self.period not in PERIODS
            or (self.limit is not None and self.limit < 0)
        ):
            raise BudgetConfigurationError()


# A license's periods as the course periods (course_window_start) name them.
_CALENDAR = {"daily": "day", "weekly": "week", "monthly": "month"}


def window_start(period: str, now: datetime, tz: str = "UTC") -> datetime:
    """The start (an aware UTC instant) of the license's window holding `now`: midnight,
    Monday's midnight or the 1st's midnight in the institution's time zone `tz`, the same
    calendar as its courses' periods (a day with a DST change lasts 23 or 25 hours)."""
    if period == "lifetime":
        return LIFETIME_START
    if tz != "UTC":  # every request of such an institution; UTC below is the same instant
        return course_window_start(_CALENDAR.get(period, ""), now, tz)
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "daily":
        return day
    if period == "weekly":
        return day - timedelta(days=day.weekday())
    if period == "monthly":
        return day.replace(day=1)
    raise BudgetConfigurationError()


# A length that always reaches into the next window from a window's start: window_start of that
# instant is the next window's start (the calendar's own computation, not a second one).
_INTO_NEXT = {
    "daily": timedelta(days=1, hours=2),
    "weekly": timedelta(days=7, hours=2),
    "monthly": timedelta(days=32),
}


def next_window_start(period: str, now: datetime, tz: str = "UTC") -> datetime | None:
    """When the window holding `now` ends (the next one starts); None for a lifetime budget."""
    step = _INTO_NEXT.get(period)
    if step is None:
        return None
    return window_start(period, window_start(period, now, tz) + step, tz)


COURSE_PERIODS = ("day", "week", "month")


def course_window_start(period: str, now: datetime, tz: str) -> datetime:
    """The start (an aware UTC instant) of the course period holding `now`: midnight, Monday's
    midnight or the 1st's midnight in the institution's time zone `tz`. A period is a run of
    local calendar days, so a day with a DST change lasts 23 or 25 hours; a midnight that
    does not exist (a zone that springs forward at 00:00) starts at the day's first instant."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise BudgetConfigurationError() from exc
    day = now.astimezone(zone).date()
    if period == "day":
        first = day
    elif period == "week":
        first = day - timedelta(days=day.weekday())
    elif period == "month":
        first = day.replace(day=1)
    else:
        raise BudgetConfigurationError()
    # fold=0 in a gap takes the offset before it: the UTC instant is the day's first one.
    return datetime.combine(first, dt_time(), tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True)
class WalletKey:
    license_id: int
    holder: str
    period: str
    window_start: datetime


@dataclass
class BudgetState:
    """What the budget step learned, carried to the charge after the provider call."""

    config: BudgetConfig
    key: WalletKey
    wallet_id: int | None = None
    spent: int = 0
    # The request's reservation, on the first state (licensing.ledger.reservations): None when
    # it holds nothing (an unknown cost, or no level with a limit).
    hold: Hold | None = None
    # The lease it was admitted under instead of a hold row of its own (licensing.ledger.leases).
    lease: Lease | None = None
    # A course member's request: the course's levels (the student's allowance, then the pool
    # when it has one), each a wallet charged with the license's in the same transaction.
    levels: tuple[BudgetState, ...] = ()

    def remaining_after(self, spent: int) -> int | None:
        if self.config.limit is None:
            return None
        return max(0, self.config.limit - spent)


def wallet_key(*, license_id: int, config: BudgetConfig, holder: str, now=None) -> WalletKey:
    config.validate()
    name = "license" if config.strategy == "pooled" else holder
    start = window_start(config.period, now or clock.utcnow(), config.timezone)
    return WalletKey(license_id, name, config.period, start)


def _wallet_by_key(key: WalletKey) -> tuple[int, int, str, int] | None:
    """(id, spent, unit, reserved) of the window's wallet, None when not opened yet. A wallet
    is read this way (the ORM, by its key) or by its id (WALLET_READ_SQL, WALLETS_READ_SQL)."""
    return (
        Wallet.objects.filter(
            license_id=key.license_id,
            holder=key.holder,
            period=key.period,
            window_start=key.window_start,
        )
        .values_list("id", "spent", "unit", "reserved")
        .first()
    )


def _wallet(key: WalletKey, unit: str) -> tuple[int, int, str, int]:
    """(id, spent, unit, reserved) of the wallet for this window, opening it if needed."""
    row = None
    wallet_id = _wallet_ids.get(key)
    if wallet_id is not None:
        # The hot path: one primary-key read, without the ORM's per-query overhead.
        with connection.cursor() as cursor:
            cursor.execute(WALLET_READ_SQL, [wallet_id])
            found = cursor.fetchone()
            row = (wallet_id, *found) if found else None
    if row is None:
        row = _wallet_by_key(key)
    if row is None:
        try:
            with transaction.atomic():
                wallet = Wallet.objects.create(
                    license_id=key.license_id,
                    holder=key.holder,
                    period=key.period,
                    window_start=key.window_start,
                    unit=unit,
                )
            row = (wallet.pk, 0, unit, 0)
        except IntegrityError:  # opened concurrently
            row = _wallet_by_key(key)
            if row is None:  # pragma: no cover - opened, then deleted at once
                raise
    if row[2] != unit:
        raise BudgetConfigurationError()
    _wallet_ids.set(key, row[0])
    return row


def budget_check(
    *,
    license_id: int,
    config: BudgetConfig,
    holder: str,
    course_id: int | None = None,
    end_user_id: int | None = None,
    hold: Hold | None = None,
    wait: bool = True,
) -> BudgetState:
    """Refuse (400) when the wallet has nothing left (its spend and its holds reach the limit);
    reads nothing for unlimited licenses. A course member's request (`course_id`) needs budget
    left at every level too. With a `hold`, the request then reserves it on every limited
    wallet, or is refused (licensing.ledger.reservations). A refusal while leases are open
    waits for them here, or (not `wait`) raises LeasesOpen for the caller to wait."""
    key = wallet_key(license_id=license_id, config=config, holder=holder)
    state = BudgetState(config=config, key=key)
    if config.limit is not None:
        _checked(state, *_swept(state, wait))
    if course_id is not None:
        course = course_budget(course_id, end_user_id)
        if course is not None:
            state.levels = course_levels(course, license_id=license_id, holder=holder)
            for level in state.levels:
                if level.config.limit is not None:
                    _checked(level, *_swept(level, wait))
    if hold is not None:
        _hold_sync(state, hold, wait)
    return state


def _full_of_holds(limit: int | None, spent: int, reserved: int) -> bool:
    """Refused only for the holds of requests in flight: some may be a dead worker's."""
    return limit is not None and reserved > 0 and spent + reserved >= limit > spent


def _swept(state: BudgetState, wait: bool) -> tuple[int, int, str, int]:
    """The state's wallet (opened if needed); one that only its holds fill is read again once
    its expired holds are released, then once the leases in their window have closed."""
    row = _wallet(state.key, state.config.unit)
    for freed in _freeing(wait):
        if not _full_of_holds(state.config.limit, row[1], row[3]):
            break
        if freed(wallet_ids=[row[0]]):
            row = _wallet(state.key, state.config.unit)
    return row


def _freeing(wait: bool) -> tuple[Callable[..., object], ...]:
    """What may free a wallet full of holds, in order: its expired holds released, then the
    leases in their window closed (waited for, or LeasesOpen)."""
    if wait:
        return (release_expired, wait_for_open_leases_sync)
    return (release_expired, partial(wait_for_open_leases_sync, wait=False))


def _limited(state: BudgetState) -> list[BudgetState]:
    """The levels with a limit (the license's first), the ones a request reads and holds on."""
    return [s for s in (state, *state.levels) if s.config.limit is not None]


def _hold_sync(state: BudgetState, hold: Hold, wait: bool = True) -> None:
    """The hold on every limited wallet (their ids known: they were just read), or a 400; a
    wallet full of holds first releases the ones that expired (their workers died)."""
    limited = _limited(state)
    if not limited:
        return
    wallets = [(s.wallet_id or 0, s.config.limit or 0) for s in limited]
    if not reserve_sync(wallets, hold):
        ids = [wallet_id for wallet_id, _ in wallets]
        for freed in _freeing(wait):  # then decided again
            if freed(wallet_ids=ids) and reserve_sync(wallets, hold):
                break
        else:
            raise BadRequest(OUT_OF_BUDGET)
    state.hold = hold


def known_wallet_id(state: BudgetState) -> int | None:
    return _wallet_ids.get(state.key)


def wallet_open(state: BudgetState) -> int:
    """The id of the state's wallet, opening it if this window has none yet."""
    return _wallet(state.key, state.config.unit)[0]


def _checked(
    state: BudgetState, wallet_id: int, spent: int, unit: str, reserved: int = 0
) -> BudgetState:
    """Nothing left: the spend and the holds of the requests in flight reach the limit."""
    if unit != state.config.unit:
        raise BudgetConfigurationError()
    state.wallet_id, state.spent = wallet_id, spent
    limit = state.config.limit  # never None here: unlimited licenses read no wallet
    if limit is not None and spent + reserved >= limit:
        raise BadRequest(OUT_OF_BUDGET)
    return state


async def budget_check_async(
    *,
    license_id: int,
    config: BudgetConfig,
    holder: str,
    course_id: int | None = None,
    end_user_id: int | None = None,
    hold: Hold | None = None,
) -> BudgetState:
    """`budget_check` from the event loop: a known wallet is read (or held on) over the async
    pool (no thread hop); the first read of a window, or SQLite, goes through the ORM on a
    thread."""
    key = wallet_key(license_id=license_id, config=config, holder=holder)
    state = BudgetState(config=config, key=key)
    if course_id is not None:
        return await _course_check_async(state, holder, course_id, end_user_id, hold)
    if config.limit is None:
        return state
    wallet_id = _wallet_ids.get(key)
    if wallet_id is not None and pgpool.available():
        if hold is not None:
            if await _hold_async(state, [state], [wallet_id], hold):
                return state
        else:
            row = await _wallet_reads().read(wallet_id)
            if row is not None and not _full_of_holds(config.limit, row[0], row[2]):
                return _checked(state, wallet_id, *row)
    return await _on_a_thread(license_id=license_id, config=config, holder=holder, hold=hold)


async def _on_a_thread(**check) -> BudgetState:
    """`budget_check` through the ORM on a worker thread (the first read of a window, SQLite).
    A refusal while leases are open waits for them here, on the loop, and is decided again
    once: the thread is not held while it waits (the threads serve every license)."""
    try:
        return await _thread_check(check)
    except LeasesOpen as open_leases:
        await wait_for_open_leases(open_leases.wallet_ids)  # closed meanwhile: at once
    try:
        return await _thread_check(check)
    except LeasesOpen:
        raise BadRequest(OUT_OF_BUDGET) from None


async def _thread_check(check: dict) -> BudgetState:
    checked = run_db(budget_check, **check, wait=False)
    hold = check.get("hold")
    return await (checked if hold is None else unless_left(checked, hold.request_id, _state_holds))


def _state_holds(state: BudgetState) -> bool:
    return state.hold is not None


async def _hold_async(
    state: BudgetState, limited: list[BudgetState], ids: list[int], hold: Hold
) -> bool:
    """The hold on the limited levels' wallets (a busy wallet's lease, or one statement), or a
    400 (after releasing the wallets' expired holds, and waiting for open leases, once each);
    False when a wallet is gone (nothing held: the ORM's path opens it again)."""
    if len(ids) == 1 and lease_seconds():
        lease = await leases().admit(ids[0], limited[0].config.limit or 0, hold)
        if lease is not None:
            spent, reserved, unit = lease.before
            _checked(limited[0], ids[0], spent, unit)
            state.hold, state.lease = hold, lease
            return True
    wallets = [(i, s.config.limit or 0) for i, s in zip(ids, limited, strict=True)]
    fits, rows = await _take(wallets, hold)
    if len(rows) < len(ids):
        return False
    for freed in (_expired_released, wait_for_open_leases):  # then decided again
        if fits or not any(row[1] for row in rows.values()):
            break
        if await freed(ids):
            fits, rows = await _take(wallets, hold)
            if len(rows) < len(ids):
                return False
    for level, wallet_id in zip(limited, ids, strict=True):
        spent, reserved, unit = rows[wallet_id]
        _checked(level, wallet_id, spent, unit, reserved)
    if not fits:  # pragma: no cover - the statement decided on the values just checked
        raise BadRequest(OUT_OF_BUDGET)
    state.hold = hold
    return True


async def _expired_released(ids: list[int]) -> bool:
    return bool(await run_db(release_expired, wallet_ids=ids))


async def _take(wallets: list[tuple[int, int]], hold: Hold) -> tuple[bool, dict[int, Row]]:
    """The hold on one wallet goes with the holds of that wallet arriving together; on a
    course member's levels it is a statement of its own."""
    if len(wallets) > 1:
        return await held_unless_left(reserve_async(wallets, hold), hold.request_id)
    ((wallet_id, limit),) = wallets
    fits, row = await hold_batches().take(wallet_id, limit, hold)
    return fits, ({wallet_id: row} if row is not None else {})


async def _course_check_async(
    state: BudgetState, holder: str, course_id: int, end_user_id: int | None, hold: Hold | None
) -> BudgetState:
    """Every level's wallet read in one statement (shared with the requests reading at the
    same time, like a license's); the first read of a window, or SQLite, on a thread."""
    course = _course_budgets.get((course_id, end_user_id))
    if course is None:
        course = await run_db(course_budget, course_id, end_user_id)
    license_id = state.key.license_id
    if course is not None:
        state.levels = course_levels(course, license_id=license_id, holder=holder)
    limited = _limited(state)
    if not limited:
        return state
    known = [_wallet_ids.get(s.key) for s in limited]
    ids = [i for i in known if i is not None]
    if pgpool.available() and len(ids) == len(limited):
        if hold is not None:
            if await _hold_async(state, limited, ids, hold):
                return state
        else:
            rows = await _wallet_reads().read_many(ids)
            if all(rows) and not any(
                _full_of_holds(s.config.limit, r[0], r[2])
                for s, r in zip(limited, rows, strict=True)
                if r is not None
            ):
                for level, wallet_id, row in zip(limited, ids, rows, strict=True):
                    _checked(level, wallet_id, *row)
                return state
    return await _on_a_thread(
        license_id=license_id,
        config=state.config,
        holder=holder,
        course_id=course_id,
        end_user_id=end_user_id,
        hold=hold,
    )


# --- a course's levels ------------------------------------------------------------------------


@dataclass(frozen=True)
class CourseBudget:
    """What a course member's levels need: the course's allowance and pool, its institution's
    time zone, and the member's top-up (cached per course and end user; a save clears it)."""

    course_id: int
    allowance: int | None
    period: str
    pool_limit: int | None
    timezone: str
    top_up: int = 0
    top_up_window_start: datetime | None = None


_course_budgets = TTLCache("course-budgets")
_NO_COURSE = CourseBudget(0, None, "day", None, "UTC")  # cached: the course is gone


def course_budget(course_id: int, end_user_id: int | None) -> CourseBudget | None:
    """None when the course is gone (its key's cache entry is cleared with it)."""
    cache_key = (course_id, end_user_id)
    cached = _course_budgets.get(cache_key)
    if cached is not None:
        return None if cached is _NO_COURSE else cached
    generation = _course_budgets.generation
    row = (
        Course.objects.filter(pk=course_id)
        .values_list("allowance", "allowance_period", "pool_limit", "institution__timezone")
        .first()
    )
    if row is None:
        _course_budgets.set(cache_key, _NO_COURSE, generation)
        return None
    member = None
    if end_user_id is not None:
        member = (
            CourseMember.objects.filter(course_id=course_id, end_user_id=end_user_id)
            .values_list("top_up", "top_up_window_start")
            .first()
        )
    course = CourseBudget(course_id, *row, *(member or ()))
    _course_budgets.set(cache_key, course, generation)
    return course


def course_holders(course_id: int, holder: str) -> tuple[str, str]:
    """(the student's allowance wallet, the course pool's): `course:<id>:user:<end user id>`,
    or `course:<id>:key:<key id>` for a course key without an end user; `course:<id>`."""
    return f"course:{course_id}:{holder}", f"course:{course_id}"


def course_levels(
    course: CourseBudget, *, license_id: int, holder: str, now: datetime | None = None
) -> tuple[BudgetState, ...]:
    """The allowance level (always: an empty allowance is an unlimited wallet, so teachers see
    the usage), then the pool level when the course has a pool. A top-up counts in the one
    period its `top_up_window_start` falls in."""
    start = course_window_start(course.period, now or clock.utcnow(), course.timezone)
    allowance = course.allowance
    topped = course.top_up_window_start
    if allowance is not None and course.top_up and topped is not None:
        if course_window_start(course.period, topped, course.timezone) == start:
            allowance += course.top_up
    student, pool = course_holders(course.course_id, holder)
    levels = [_level(license_id, student, course.period, start, allowance)]
    if course.pool_limit is not None:
        levels.append(_level(license_id, pool, course.period, start, course.pool_limit))
    return tuple(levels)


def level_usage(level: BudgetState) -> dict:
    """A course level as GET /v1/license and the portal show it: {period, window_start, limit,
    used, remaining}, read by the wallet's key (no wallet yet: nothing used)."""
    row = _wallet_by_key(level.key)
    if row is not None and row[2] != level.config.unit:
        raise BudgetConfigurationError()
    used = row[1] if row else 0
    limit = level.config.limit
    return {
        "period": level.config.period,
        "window_start": level.key.window_start.isoformat(),
        "limit": limit,
        "used": used,
        "remaining": None if limit is None else max(0, limit - used),
    }


def course_levels_usage(
    course_id: int,
    *,
    end_user_id: int | None,
    license_id: int,
    holder: str,
    now: datetime | None = None,
) -> tuple[dict, dict | None] | None:
    """(the allowance level, the pool level or None) of this caller in the course, the same
    levels and wallets the budget step reads (course_budget, course_levels); None when the
    course is gone."""
    course = course_budget(course_id, end_user_id)
    if course is None:
        return None
    levels = course_levels(course, license_id=license_id, holder=holder, now=now)
    allowance = level_usage(levels[0])
    pool = level_usage(levels[1]) if len(levels) > 1 else None
    return allowance, pool


def _level(license_id: int, holder: str, period: str, start: datetime, limit: int | None):
    config = BudgetConfig(unit=UNITS[0], strategy="per_user", period=period, limit=limit)
    return BudgetState(config=config, key=WalletKey(license_id, holder, period, start))


def remaining_of(state: BudgetState, spent: int, levels_spent: list[int]) -> int | None:
    """`credits_remaining`: the smallest remaining across the license and the course's levels;
    None only when every level is unlimited."""
    remaining = state.remaining_after(spent)
    for level, level_spent in zip(state.levels, levels_spent, strict=True):
        left = level.remaining_after(level_spent)
        if left is not None and (remaining is None or left < remaining):
            remaining = left
    return remaining


WalletRow = tuple[int, str, int]  # (spent, unit, reserved), as the budget reads return them


class WalletReads:
    """Budget reads of requests that arrive together share one query (and one pool checkout);
    requests on the same wallet share its row. At low load a batch is one read, no wait."""

    def __init__(self):
        self._waiting: dict[int, list[asyncio.Future]] = {}
        self._task: asyncio.Task | None = None

    async def read(self, wallet_id: int) -> WalletRow | None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.setdefault(wallet_id, []).append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        return await future

    async def read_many(self, wallet_ids: list[int]) -> list[WalletRow | None]:
        """Several wallets of one request (a course member's levels), in the same batch."""
        loop = asyncio.get_running_loop()
        futures = []
        for wallet_id in wallet_ids:
            future = loop.create_future()
            self._waiting.setdefault(wallet_id, []).append(future)
            futures.append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        # Awaited in turn (all are answered by the same read): cheaper than gather's wrapper.
        results = []
        try:
            for future in futures:
                results.append(await future)
        except BaseException:
            for future in futures:  # the others hold the same error: mark it retrieved
                if future.done() and not future.cancelled():
                    future.exception()
            raise
        return results

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            try:
                rows = await _read_wallets(list(batch))
            except Exception as exc:  # every waiting request answers it (503 for an outage)
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for wallet_id, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(rows.get(wallet_id))


async def _read_wallets(ids: list[int]) -> dict[int, WalletRow]:
    """{id: (spent, unit, reserved)}. One wallet (every read at low load) by its plain primary-key
    statement: an array parameter costs ~40 µs more to send and to plan around."""
    if len(ids) == 1:
        found = await pgpool.fetch(WALLET_READ_SQL, ids)
        return {ids[0]: found[0]} if found else {}
    if len(ids) <= FEW_WALLETS:
        padded = [*ids, *[None] * (FEW_WALLETS - len(ids))]
        rows = await pgpool.fetch(FEW_WALLETS_READ_SQL, padded)
    else:
        rows = await pgpool.fetch(WALLETS_READ_SQL, [ids])
    return {row[0]: row[1:] for row in rows}


_wallet_reads = pgpool.per_loop(WalletReads)


def budget_usage(
    *, license_id: int, config: BudgetConfig, holder: str, now: datetime | None = None
) -> dict:
    """The `budget` object of GET /v1/license for this caller's wallet (`now`: the portal's
    tests pass their own instant; the request path reads the clock)."""
    key = wallet_key(license_id=license_id, config=config, holder=holder, now=now)
    row = _wallet_by_key(key)
    if row is not None and row[2] != config.unit:
        raise BudgetConfigurationError()
    used = row[1] if row else 0
    remaining = None if config.limit is None else max(0, config.limit - used)
    return {
        "unit": config.unit,
        "strategy": config.strategy,
        "period": config.period,
        "window_start": key.window_start.isoformat() if config.period != "lifetime" else None,
        "limit": config.limit,
        "used": used,
        "remaining": remaining,
    }
