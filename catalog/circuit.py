"""Circuit breaking per connection: a connection that keeps failing is skipped for a while.

States (docs/routing.md, "Circuit breaking"):
- closed: requests go through; retryable failures are counted, a success resets the count.
- open: `CIRCUIT_FAILURES` consecutive retryable failures, or a 429 with `Retry-After`, open
  the circuit until a cool-down ends (`CIRCUIT_COOLDOWN`, or the Retry-After); routing skips the
  connection meanwhile.
- half-open: the cool-down is over; exactly one request (the probe, claimed by whichever worker
  asks first, atomically: one Lua script in Redis, a lock locally) is let through. Its success
  closes the circuit, its failure opens it again; a probe that never reports (its worker died)
  loses its claim after `PROBE_SECONDS` (a lease on the same clock as the cool-down), and one
  that did not reach the provider (our own pool was busy, its client left) gives it back.

A circuit is keyed by the connection and its `updated_at`, so saving a connection (a new URL,
key or weight) starts it on a fresh, closed circuit everywhere.

With `REDIS_URL` the state is shared by every worker and host: failures are counted in Redis by
one script, each worker keeps a copy of what it last read for at most `REFRESH` seconds, so a
healthy connection costs no Redis call per request. Without Redis each process keeps its own
(a connection is then found dead once per worker). If Redis cannot be reached the circuit acts
closed: a breaker outage must not take the service down.

No library is used: purgatory (asyncio, Redis) has no per-failure open time (Retry-After) and
no last error to show, and makes a Redis round trip per call; aiobreaker's Redis storage is
blocking (docs/routing.md, "Why no library").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings

from core import clock

logger = logging.getLogger("gateway")

_seen_open = False  # whether this process has seen any circuit open (routing's fast path)
REFRESH = 1.0  # seconds a worker trusts its copy of a shared circuit
PROBE_SECONDS = 60.0  # a probe's lease: one that never reports frees the half-open slot after this
TTL = 86400  # seconds an idle circuit's state is kept in Redis
CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}  # the gauge's values


def _noted(circuit: Circuit) -> Circuit:
    global _seen_open
    if circuit.open_until and not _seen_open:
        _seen_open = True
    return circuit


def circuit_key(provider: str, connection: str, updated_at: float) -> str:
    return f"{provider}/{connection}@{updated_at:.6f}"


@dataclass
class Circuit:
    failures: int = 0
    open_until: float = 0.0  # epoch seconds; 0: closed
    last_error: str = ""
    last_error_at: float = 0.0
    checked_at: float = field(default=-1.0, repr=False)  # monotonic, shared copies only

    def state(self, now: float) -> str:
        if not self.open_until:
            return CLOSED
        return OPEN if now < self.open_until else HALF_OPEN


def _limits() -> tuple[int, float]:
    gateway = settings.GATEWAY
    return gateway["CIRCUIT_FAILURES"], gateway["CIRCUIT_COOLDOWN"]


# What `admission` answers: refused, admitted (closed), or else the probe's claim (a token that
# `give_back` takes to free the half-open slot).
REFUSED: None = None
ADMITTED = ""


class LocalCircuits:
    """This process's circuits (no REDIS_URL)."""

    def __init__(self):
        self.circuits: dict[str, Circuit] = {}
        self.probes: dict[str, tuple[float, str]] = {}  # key -> (when the claim lapses, token)
        # One check-and-set of a probe at a time, whatever event loop (thread) asks: the
        # process's circuits are shared by every loop in it.
        self._claiming = threading.Lock()

    def peek(self, key: str) -> Circuit | None:
        return self.circuits.get(key)

    async def admit(self, key: str) -> bool:
        return await self.admission(key) is not REFUSED

    async def admission(self, key: str) -> str | None:
        circuit = self.circuits.get(key)
        if circuit is None or not circuit.open_until:
            return ADMITTED
        now = clock.now()
        if now < circuit.open_until:
            return REFUSED
        with self._claiming:
            if not circuit.open_until:
                return ADMITTED  # closed meanwhile
            claim = self.probes.get(key)
            if claim is not None and claim[0] > now:
                return REFUSED  # another request is the probe
            token = uuid.uuid4().hex
            self.probes[key] = (now + PROBE_SECONDS, token)
            return token

    async def give_back(self, key: str, token: str) -> None:
        """The probe did not reach the provider: free the half-open slot for another request."""
        with self._claiming:
            claim = self.probes.get(key)
            if claim is not None and claim[1] == token:
                del self.probes[key]

    async def failed(self, key: str, reason: str, retry_after: float | None) -> Circuit:
        threshold, cooldown = _limits()
        now = clock.now()
        circuit = self.circuits.setdefault(key, Circuit())
        circuit.failures += 1
        circuit.last_error, circuit.last_error_at = reason, now
        if retry_after:
            circuit.open_until = max(circuit.open_until, now + retry_after)
        elif circuit.failures >= threshold:
            circuit.open_until = now + cooldown
        self.probes.pop(key, None)
        return _noted(circuit)

    async def succeeded(self, key: str) -> bool:
        """Reset the circuit; whether there was anything to reset."""
        circuit = self.circuits.get(key)
        if circuit is None or not (circuit.failures or circuit.open_until):
            return False
        circuit.failures, circuit.open_until = 0, 0.0
        self.probes.pop(key, None)
        return True

    async def read(self, keys: list[str]) -> dict[str, Circuit]:
        return {key: self.circuits[key] for key in keys if key in self.circuits}


# One failure, atomically: count it, keep the reason, open the circuit when due. Returns the
# failures and the open-until time (as strings: Redis integers would truncate the float).
_FAIL = """
local failures = redis.call('HINCRBY', KEYS[1], 'f', 1)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'u') or '0')
local now, retry_after = tonumber(ARGV[1]), tonumber(ARGV[2])
if retry_after > 0 then
  open_until = math.max(open_until, now + retry_after)
elseif failures >= tonumber(ARGV[3]) then
  open_until = now + tonumber(ARGV[4])
end
redis.call('HSET', KEYS[1], 'u', tostring(open_until), 'e', ARGV[5], 't', ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
redis.call('HDEL', KEYS[1], 'p', 'o')
return {tostring(failures), tostring(open_until)}
"""

# Admission past a cool-down, atomically against the shared state (not a worker's copy, which
# may be a second old: a probe that failed meanwhile has opened a new cool-down): '1' closed,
# '0' refused (open, or another request holds the probe's lease), '2' this request is the probe
# (its lease, `p`, until ARGV[1] + ARGV[2] on the callers' clock, its token `o`). The lease
# lives in the circuit's hash, so every failure (a new cool-down) and a success clear it.
_ADMIT = """
local open_until = tonumber(redis.call('HGET', KEYS[1], 'u') or '0')
local now = tonumber(ARGV[1])
if open_until == 0 then
  return {'1', '0'}
end
if now < open_until then
  return {'0', tostring(open_until)}
end
local lease = tonumber(redis.call('HGET', KEYS[1], 'p') or '0')
if lease > now then
  return {'0', tostring(open_until)}
end
redis.call('HSET', KEYS[1], 'p', tostring(now + tonumber(ARGV[2])), 'o', ARGV[3])
return {'2', tostring(open_until)}
"""

# A probe that did not reach the provider frees its lease (only its own: a lease already taken
# over by another probe stays).
_GIVE_BACK = """
if redis.call('HGET', KEYS[1], 'o') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'p', 'o')
end
return 0
"""


def _decode(raw: dict) -> Circuit:
    def text(name: bytes) -> str:
        value = raw.get(name)
        return value.decode("utf-8", "replace") if value is not None else ""

    return Circuit(
        failures=int(text(b"f") or 0),
        open_until=float(text(b"u") or 0.0),
        last_error=text(b"e"),
        last_error_at=float(text(b"t") or 0.0),
    )


class RedisCircuits:
    """Circuits shared through Redis; each worker's copy is at most `REFRESH` seconds old."""

    def __init__(self, url: str):
        import redis.asyncio as redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        self.fail_script = self.client.register_script(_FAIL)
        self.admit_script = self.client.register_script(_ADMIT)
        self.give_back_script = self.client.register_script(_GIVE_BACK)
        self.copies: dict[str, Circuit] = {}

    @staticmethod
    def _name(key: str) -> str:
        return f"gw:circuit:{key}"

    def peek(self, key: str) -> Circuit | None:
        return self.copies.get(key)

    async def _current(self, key: str) -> Circuit:
        copy = self.copies.get(key)
        monotonic = time.monotonic()
        if copy is not None and monotonic - copy.checked_at < REFRESH:
            return copy
        try:
            copy = _decode(await self.client.hgetall(self._name(key)))
        except Exception as exc:  # Redis down: act closed, keep serving
            _warn(exc)
            copy = Circuit()
        copy.checked_at = monotonic
        return self._keep(key, copy)

    def _keep(self, key: str, circuit: Circuit) -> Circuit:
        """Make `circuit` the copy of `key`. Answers can come back out of order (a read or a
        count sent before the circuit opened, answered after a count that opened it): within
        REFRESH of the copy, an open circuit stays open (only `succeeded` closes it sooner), or
        this worker would call a dead connection again until its next count or read."""
        current = self.copies.get(key)
        if (
            current is not None
            and current.open_until > circuit.open_until
            and time.monotonic() - current.checked_at < REFRESH
        ):
            circuit.open_until = current.open_until
        self.copies[key] = circuit
        return _noted(circuit)

    async def admit(self, key: str) -> bool:
        return await self.admission(key) is not REFUSED

    async def admission(self, key: str) -> str | None:
        circuit = await self._current(key)
        if not circuit.open_until:
            return ADMITTED
        now = clock.now()
        if now < circuit.open_until:
            return REFUSED
        token = uuid.uuid4().hex
        try:  # half-open by this worker's copy: the shared state decides, in one script
            answer, open_until = await self.admit_script(
                keys=[self._name(key)], args=[repr(now), repr(PROBE_SECONDS), token]
            )
        except Exception as exc:
            _warn(exc)
            return ADMITTED
        if answer == b"1":  # closed meanwhile (another worker's probe succeeded)
            self.copies[key] = Circuit(checked_at=time.monotonic())
            return ADMITTED
        circuit.open_until = float(open_until)  # a new cool-down, if the probe failed
        return token if answer == b"2" else REFUSED

    async def give_back(self, key: str, token: str) -> None:
        try:
            await self.give_back_script(keys=[self._name(key)], args=[token])
        except Exception as exc:
            _warn(exc)

    async def failed(self, key: str, reason: str, retry_after: float | None) -> Circuit:
        threshold, cooldown = _limits()
        now = clock.now()
        name = self._name(key)
        try:
            failures, open_until = await self.fail_script(
                keys=[name],
                args=[repr(now), repr(retry_after or 0), threshold, cooldown, reason[:200], TTL],
            )
        except Exception as exc:
            _warn(exc)
            return Circuit()
        circuit = Circuit(
            failures=int(failures),
            open_until=float(open_until),
            last_error=reason,
            last_error_at=now,
            checked_at=time.monotonic(),
        )
        return self._keep(key, circuit)

    async def succeeded(self, key: str) -> bool:
        copy = self.copies.get(key)
        if copy is None or not (copy.failures or copy.open_until):
            return False  # the healthy path: nothing to reset, no Redis call
        try:
            await self.client.delete(self._name(key))
        except Exception as exc:
            _warn(exc)
        self.copies[key] = Circuit(checked_at=time.monotonic())
        return True

    async def read(self, keys: list[str]) -> dict[str, Circuit]:
        if not keys:
            return {}
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hgetall(self._name(key))
                raws = await pipe.execute()
        except Exception as exc:
            _warn(exc)
            return {}
        return {key: _decode(raw) for key, raw in zip(keys, raws, strict=True) if raw}


_circuits: dict[int, tuple] = {}  # per event loop: (loop, circuits)
_local = LocalCircuits()  # without Redis: one per process, whatever loop asks


def circuits() -> LocalCircuits | RedisCircuits:
    """This event loop's circuits (a Redis client belongs to one loop)."""
    if not settings.REDIS_URL:
        return _local
    loop = asyncio.get_running_loop()
    found = _circuits.get(id(loop))
    if found is None or found[0] is not loop:
        found = _circuits[id(loop)] = (loop, RedisCircuits(settings.REDIS_URL))
    return found[1]


def known_open(key: str) -> bool:
    """Whether this process last saw the circuit open (routing's weighted choice skips it; no
    I/O: the request's own admission asks the shared state)."""
    if not _seen_open:
        return False  # the hot path while no circuit has opened in this process
    backend = _local if not settings.REDIS_URL else _loop_circuits()
    circuit = backend.peek(key) if backend is not None else None
    return circuit is not None and circuit.open_until > clock.now()


def _loop_circuits() -> RedisCircuits | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    found = _circuits.get(id(loop))
    return found[1] if found is not None and found[0] is loop else None


def circuits_reset() -> None:
    """Forget every circuit (tests; a changed REDIS_URL)."""
    global _local, _seen_open
    _circuits.clear()
    _seen_open = False
    _local = LocalCircuits()


def read_circuits(keys: list[str]) -> dict[str, Circuit]:
    """The circuits of `keys` as they are now, for the admin and the management API (sync
    callers): Redis's shared state, or this process's own."""
    if not settings.REDIS_URL:
        return {key: _local.circuits[key] for key in keys if key in _local.circuits}
    if not keys:
        return {}
    import redis

    try:
        with redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
        ) as client:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(RedisCircuits._name(key))
            raws = pipe.execute()
    except Exception as exc:
        _warn(exc)
        return {}
    return {key: _decode(raw) for key, raw in zip(keys, raws, strict=True) if raw}


_last_warning = 0.0


def _warn(exc: Exception) -> None:
    global _last_warning
    if time.monotonic() - _last_warning > 60:
        _last_warning = time.monotonic()
        logger.warning("circuit breaker state unreachable in Redis, circuits act closed: %s", exc)
