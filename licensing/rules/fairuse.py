"""Fair-use limits: requests and tokens per minute, per holder and per license (policy `limits`).

Fixed one-minute windows (UTC). A request is admitted only when every limit it falls under has
room: its request counters then go up together, atomically (a Lua script in Redis), so a holder
refused at its own limit does not use up the license's. Tokens are added when the answer is known
(after the ledger write) and checked before the next request: a request that finds the window's
tokens at or over the limit is refused. A refusal is 429 `Rate limit exceeded` with `Retry-After`
(seconds to the next window), checked before the budget and never charged.

With `REDIS_URL` the counters are shared by every worker and host; without it they are per process
(docs/policy.md, "Fair-use limits"). If Redis cannot be reached the request is admitted (a
limiter outage must not take the service down) and a warning is logged at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings

from core import clock
from core.errors import GatewayError

logger = logging.getLogger("gateway")

WINDOW = 60
RATE_LIMITED = "Rate limit exceeded"


# Whose counter is full, in the client's words (the holder: the API key, or the end user of a JWT).
_WHOSE = {
    "holder": "for each API key or user of this license",
    "license": "for this license as a whole (all its keys and users together)",
}


class RateLimited(GatewayError):
    """429. The message begins with decisions.md's `Rate limit exceeded` and says which limit
    (requests or tokens per minute, the holder's or the license's), its figure and when the
    window resets; the same seconds are in `Retry-After`."""

    status = 429

    def __init__(self, retry_after: int, reason: str, *, limit: int | None = None):
        whose, _, what = reason.partition(" ")  # "holder requests", "license tokens", ...
        message = RATE_LIMITED
        if limit is not None and whose in _WHOSE:
            unit = what if limit != 1 else what[:-1]  # "1 request", "2 requests"
            message = (
                f"{RATE_LIMITED}: the limit of {limit:,} {unit} per minute {_WHOSE[whose]} is "
                f"reached; it resets in {retry_after} s (at the next UTC minute; Retry-After)"
            )
        super().__init__(message, reason=f"{reason} per minute")
        self.headers = {"Retry-After": str(retry_after)}


@dataclass(frozen=True)
class Limits:
    """A license type's fair-use limits; None = not limited."""

    holder_requests: int | None = None
    holder_tokens: int | None = None
    license_requests: int | None = None
    license_tokens: int | None = None

    @property
    def counts_tokens(self) -> bool:
        return self.holder_tokens is not None or self.license_tokens is not None


@dataclass(frozen=True)
class Window:
    """The counters of one request's holder and license in the current minute."""

    limits: Limits
    license_id: int
    holder: str
    index: int
    retry_after: int

    def keys(self) -> tuple[str, str, str, str]:
        base = f"gw:fu:{self.index}:{self.license_id}"
        holder = f"{base}:{self.holder}"
        return f"{holder}:r", f"{base}:r", f"{holder}:t", f"{base}:t"

    def refused(self, which: str) -> RateLimited:
        """`which`: "holder requests", "license requests", "holder tokens" or "license tokens"."""
        limit = getattr(self.limits, which.replace(" ", "_"))
        return RateLimited(self.retry_after, which, limit=limit)


def window_of(limits: Limits, license_id: int, holder: str, now: float | None = None) -> Window:
    now = clock.now() if now is None else now
    index = int(now // WINDOW)
    retry_after = max(1, math.ceil((index + 1) * WINDOW - now))
    return Window(limits, license_id, holder, index, retry_after)


# Admit-or-refuse in one step: 0 = admitted (request counters incremented), 1..4 = the first limit
# that is full (holder requests, license requests, holder tokens, license tokens).
_ADMIT = """
local limits = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
local order = {3, 4, 1, 2}
for _, i in ipairs(order) do
  if limits[i] >= 0 then
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if (i <= 2 and used + 1 > limits[i]) or (i > 2 and used >= limits[i]) then
      return i
    end
  end
end
for i = 1, 2 do
  if limits[i] >= 0 then
    redis.call('INCR', KEYS[i])
    redis.call('EXPIRE', KEYS[i], tonumber(ARGV[5]))
  end
end
return 0
"""
_WHICH = {1: "holder requests", 2: "license requests", 3: "holder tokens", 4: "license tokens"}


def _arg(limit: int | None) -> int:
    return -1 if limit is None else limit


class LocalCounters:
    """This process's counters (no REDIS_URL): the same rules as the Lua script."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.index = 0

    def _roll(self, index: int) -> None:
        if index != self.index:  # a new minute: the old windows are over
            self.counts, self.index = {}, index

    async def admit(self, window: Window) -> int:
        self._roll(window.index)
        limits = window.limits
        wanted = (
            limits.holder_requests,
            limits.license_requests,
            limits.holder_tokens,
            limits.license_tokens,
        )
        keys = window.keys()
        for i in (2, 3, 0, 1):
            limit = wanted[i]
            if limit is None:
                continue
            used = self.counts.get(keys[i], 0)
            if (i < 2 and used + 1 > limit) or (i >= 2 and used >= limit):
                return i + 1
        for i in (0, 1):
            if wanted[i] is not None:
                self.counts[keys[i]] = self.counts.get(keys[i], 0) + 1
        return 0

    async def add_tokens(self, window: Window, tokens: int) -> None:
        self._roll(window.index)
        for key in window.keys()[2:]:
            self.counts[key] = self.counts.get(key, 0) + tokens


class RedisCounters:
    def __init__(self, url: str):
        import redis.asyncio as redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        self.script = self.client.register_script(_ADMIT)

    async def admit(self, window: Window) -> int:
        limits = window.limits
        args = [
            _arg(limits.holder_requests),
            _arg(limits.license_requests),
            _arg(limits.holder_tokens),
            _arg(limits.license_tokens),
            WINDOW * 2,
        ]
        return int(await self.script(keys=list(window.keys()), args=args))

    async def add_tokens(self, window: Window, tokens: int) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for key in window.keys()[2:]:
                pipe.incrby(key, tokens)
                pipe.expire(key, WINDOW * 2)
            await pipe.execute()


_counters: dict[int, tuple] = {}  # per event loop: (loop, counters)


def counters() -> LocalCounters | RedisCounters:
    """This event loop's counters (a Redis client belongs to one loop)."""
    loop = asyncio.get_running_loop()
    found = _counters.get(id(loop))
    if found is None or found[0] is not loop:
        url = settings.REDIS_URL
        found = _counters[id(loop)] = (loop, RedisCounters(url) if url else LocalCounters())
    return found[1]


def counters_reset() -> None:
    """Forget every loop's counters (tests; a changed REDIS_URL)."""
    _counters.clear()


_last_warning = 0.0


def _warn(exc: Exception) -> None:
    global _last_warning
    if time.monotonic() - _last_warning > 60:
        _last_warning = time.monotonic()
        logger.warning("fair-use counters unreachable, requests admitted: %s", exc)


async def admit(window: Window) -> None:
    """Raise RateLimited when a limit of the window is full; otherwise count the request."""
    try:
        full = await counters().admit(window)
    except Exception as exc:  # Redis down or slow: fair use is not worth an outage
        _warn(exc)
        return
    if full:
        raise window.refused(_WHICH[full])


async def add_tokens(window: Window, tokens: int | None) -> None:
    if not tokens or not window.limits.counts_tokens:
        return
    try:
        await counters().add_tokens(window, tokens)
    except Exception as exc:
        _warn(exc)
