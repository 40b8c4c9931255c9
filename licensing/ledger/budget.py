"""Budgets: which wallet a request spends from, and whether it may (the charge itself is the
ledger store's: licensing.ledger.store).

A license's budget has a unit (`micro_credits`), a strategy (`pooled`: one wallet for the
license; `per_user`: one per end user or API key), a period (`daily`, `weekly`, `monthly`,
`lifetime`; calendar windows in UTC) and a limit (None = unlimited).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, connection, transaction

from core import clock
from core.errors import OUT_OF_BUDGET, BadRequest, BudgetConfigurationError
from gateway_site import pgpool
from gateway_site.db import run_db
from gateway_site.localcache import TTLCache

from ..models import Wallet

UNITS = ("micro_credits",)
STRATEGIES = ("pooled", "per_user")
PERIODS = ("daily", "weekly", "monthly", "lifetime")
LIFETIME_START = datetime(1970, 1, 1, tzinfo=UTC)

_wallet_ids = TTLCache("wallet-ids", max_entries=50_000)
WALLET_READ_SQL = "SELECT spent, unit FROM licensing_wallet WHERE id = %s"
WALLETS_READ_SQL = "SELECT id, spent, unit FROM licensing_wallet WHERE id = ANY(%s::bigint[])"


@dataclass(frozen=True)
class BudgetConfig:
    unit: str
    strategy: str
    period: str
    limit: int | None
    alert_at: int | None = None  # spend that triggers the budget alert (licensing.ledger.alerts)

    def validate(self) -> None:
        if (
            self.unit not in UNITS
            or self.strategy not in STRATEGIES
            or self.period not in PERIODS
            or (self.limit is not None and self.limit < 0)
        ):
            raise BudgetConfigurationError()


def window_start(period: str, now: datetime) -> datetime:
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "daily":
        return day
    if period == "weekly":
        return day - timedelta(days=day.weekday())
    if period == "monthly":
        return day.replace(day=1)
    if period == "lifetime":
        return LIFETIME_START
    raise BudgetConfigurationError()


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

    def remaining_after(self, spent: int) -> int | None:
        if self.config.limit is None:
            return None
        return max(0, self.config.limit - spent)


def wallet_key(*, license_id: int, config: BudgetConfig, holder: str, now=None) -> WalletKey:
    config.validate()
    name = "license" if config.strategy == "pooled" else holder
    start = window_start(config.period, now or clock.utcnow())
    return WalletKey(license_id, name, config.period, start)


def _wallet_by_key(key: WalletKey) -> tuple[int, int, str] | None:
    """(id, spent, unit) of the window's wallet, None when not opened yet. A wallet is read
    this way (the ORM, by its key) or by its id (WALLET_READ_SQL, WALLETS_READ_SQL)."""
    return (
        Wallet.objects.filter(
            license_id=key.license_id,
            holder=key.holder,
            period=key.period,
            window_start=key.window_start,
        )
        .values_list("id", "spent", "unit")
        .first()
    )


def _wallet(key: WalletKey, unit: str) -> tuple[int, int]:
    """(id, spent) of the wallet for this window, opening it if needed."""
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
            row = (wallet.pk, 0, unit)
        except IntegrityError:  # opened concurrently
            row = _wallet_by_key(key)
            if row is None:  # pragma: no cover - opened, then deleted at once
                raise
    if row[2] != unit:
        raise BudgetConfigurationError()
    _wallet_ids.set(key, row[0])
    return row[0], row[1]


def budget_check(*, license_id: int, config: BudgetConfig, holder: str) -> BudgetState:
    """Refuse (400) when the wallet has nothing left; reads nothing for unlimited licenses."""
    key = wallet_key(license_id=license_id, config=config, holder=holder)
    state = BudgetState(config=config, key=key)
    if config.limit is not None:
        wallet_id, spent = _wallet(key, config.unit)
        _checked(state, wallet_id, spent, config.unit)
    return state


def known_wallet_id(state: BudgetState) -> int | None:
    return _wallet_ids.get(state.key)


def wallet_open(state: BudgetState) -> int:
    """The id of the state's wallet, opening it if this window has none yet."""
    return _wallet(state.key, state.config.unit)[0]


def _checked(state: BudgetState, wallet_id: int, spent: int, unit: str) -> BudgetState:
    if unit != state.config.unit:
        raise BudgetConfigurationError()
    state.wallet_id, state.spent = wallet_id, spent
    limit = state.config.limit  # never None here: unlimited licenses read no wallet
    if limit is not None and spent >= limit:
        raise BadRequest(OUT_OF_BUDGET)
    return state


async def budget_check_async(*, license_id: int, config: BudgetConfig, holder: str) -> BudgetState:
    """`budget_check` from the event loop: a known wallet is read over the async pool (no
    thread hop); the first read of a window, or SQLite, goes through the ORM on a thread."""
    key = wallet_key(license_id=license_id, config=config, holder=holder)
    state = BudgetState(config=config, key=key)
    if config.limit is None:
        return state
    wallet_id = _wallet_ids.get(key)
    if wallet_id is not None and pgpool.available():
        row = await _wallet_reads().read(wallet_id)
        if row is not None:
            return _checked(state, wallet_id, row[0], row[1])
    return await run_db(budget_check, license_id=license_id, config=config, holder=holder)


class WalletReads:
    """Budget reads of requests that arrive together share one query (and one pool checkout);
    requests on the same wallet share its row. At low load a batch is one read, no wait."""

    def __init__(self):
        self._waiting: dict[int, list[asyncio.Future]] = {}
        self._task: asyncio.Task | None = None

    async def read(self, wallet_id: int) -> tuple[int, str] | None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.setdefault(wallet_id, []).append(future)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        return await future

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


async def _read_wallets(ids: list[int]) -> dict[int, tuple[int, str]]:
    """{id: (spent, unit)}. One wallet (every read at low load) by its plain primary-key
    statement: an array parameter costs ~40 µs more to send and to plan around."""
    async with (await pgpool.pool()).connection() as conn:
        if len(ids) == 1:
            cursor = await conn.execute(WALLET_READ_SQL, ids)
            found = await cursor.fetchone()
            return {ids[0]: found} if found else {}
        cursor = await conn.execute(WALLETS_READ_SQL, [ids])
        return {row[0]: row[1:] for row in await cursor.fetchall()}


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
