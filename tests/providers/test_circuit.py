"""catalog.circuit's state machine on its own, on both backends (`LocalCircuits`, and
`RedisCircuits` against the Redis at 127.0.0.1:6379, keys of the test's own), on the frozen
`core.clock`; and `retry_after_seconds`, which turns a 429's Retry-After into the time a
circuit stays open. End to end through the gateway: tests/providers/test_failover.py.

A "worker" below is one backend object: one process's view of the circuits. With Redis two
of them share the state; `LocalCircuits` is one process's own.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from catalog.circuit import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    PROBE_SECONDS,
    Circuit,
    LocalCircuits,
    RedisCircuits,
    circuit_key,
    circuits,
    circuits_reset,
    known_open,
    read_circuits,
)
from core import clock
from inference.providers.base import RETRY_AFTER_MAX, retry_after_seconds
from tests.ports import free_block

REDIS_URL = "redis://127.0.0.1:6379/0"
FAILURES, COOLDOWN = 3, 30.0


def redis_or_skip() -> None:
    import redis

    try:
        with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1) as client:
            client.ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {REDIS_URL}")


@pytest.fixture(autouse=True)
def limits(settings):
    settings.GATEWAY = {
        **settings.GATEWAY,
        "CIRCUIT_FAILURES": FAILURES,
        "CIRCUIT_COOLDOWN": COOLDOWN,
    }


@pytest.fixture
def key():
    """A circuit key no other test (nor a gateway on the same Redis) uses; its Redis keys are
    deleted afterwards."""
    key = circuit_key(f"test-{uuid.uuid4().hex}", "default", 1.5)
    yield key
    import redis

    try:
        with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1) as client:
            client.delete(RedisCircuits._name(key), RedisCircuits._name(key) + ":probe")
    except redis.RedisError:
        pass


@pytest.fixture(params=["local", "redis"])
def workers(request):
    """`workers()` is a new worker's circuits (inside the test's event loop): with Redis each
    is a process of its own sharing the state; locally they are the one process's."""
    if request.param == "redis":
        redis_or_skip()
        return lambda: RedisCircuits(REDIS_URL)
    shared = LocalCircuits()
    return lambda: shared


@pytest.fixture
def frozen():
    with clock.frozen(at=1_800_000_000.0) as frozen:
        yield frozen


def run(scenario):
    return asyncio.run(scenario())


async def read(worker, key) -> Circuit:
    return (await worker.read([key]))[key]


def test_consecutive_failures_open_the_circuit(workers, key, frozen):
    async def scenario():
        worker = workers()
        for _ in range(FAILURES - 1):
            circuit = await worker.failed(key, "status_5xx", None)
            assert circuit.state(frozen.at) == CLOSED
            assert await worker.admit(key)
        circuit = await worker.failed(key, "timeout", None)
        assert (circuit.failures, circuit.open_until) == (FAILURES, frozen.at + COOLDOWN)
        assert circuit.state(frozen.at) == OPEN
        assert not await worker.admit(key)
        stored = await read(worker, key)
        assert (stored.failures, stored.open_until, stored.last_error, stored.last_error_at) == (
            FAILURES,
            frozen.at + COOLDOWN,
            "timeout",
            frozen.at,
        )

    run(scenario)


def test_a_success_restarts_the_count(workers, key, frozen):
    async def scenario():
        worker = workers()
        assert not await worker.succeeded(key)  # nothing to reset: the healthy path
        for _ in range(FAILURES - 1):
            await worker.failed(key, "status_5xx", None)
        assert await worker.succeeded(key)
        for _ in range(FAILURES - 1):  # not consecutive with the two before the success
            await worker.failed(key, "status_5xx", None)
        assert await worker.admit(key)
        assert (await read(worker, key)).state(frozen.at) == CLOSED

    run(scenario)


def test_after_the_cooldown_one_probe_decides(workers, key, frozen):
    async def scenario():
        worker = workers()
        for _ in range(FAILURES):
            await worker.failed(key, "status_5xx", None)
        frozen.advance(COOLDOWN - 0.1)
        assert not await worker.admit(key)
        frozen.advance(0.2)
        assert (await read(worker, key)).state(frozen.at) == HALF_OPEN
        assert await worker.admit(key)  # the probe
        assert not await worker.admit(key)  # one at a time
        # The probe fails: open again for a whole cool-down.
        circuit = await worker.failed(key, "status_5xx", None)
        # (Redis's Lua keeps 14 significant digits: 0.1 ms at today's epoch.)
        assert circuit.open_until == pytest.approx(frozen.at + COOLDOWN, abs=1e-3)
        assert circuit.state(frozen.at) == OPEN
        assert not await worker.admit(key)
        frozen.advance(COOLDOWN + 1)
        assert await worker.admit(key)
        # The probe succeeds: closed, every request admitted.
        assert await worker.succeeded(key)
        assert [await worker.admit(key) for _ in range(3)] == [True] * 3
        stored = await worker.read([key])  # Redis deletes a closed circuit's state
        assert [(c.failures, c.state(frozen.at)) for c in stored.values()] in ([], [(0, CLOSED)])

    run(scenario)


def test_a_retry_after_opens_at_once_for_that_long(workers, key, frozen):
    async def scenario():
        worker = workers()
        circuit = await worker.failed(key, "status_4xx", 120.0)
        assert (circuit.failures, circuit.open_until) == (1, frozen.at + 120)
        # A shorter one later does not shorten it.
        circuit = await worker.failed(key, "status_4xx", 5.0)
        assert circuit.open_until == frozen.at + 120
        frozen.advance(119)
        assert not await worker.admit(key)
        frozen.advance(2)
        assert await worker.admit(key)

    run(scenario)


def test_a_probe_that_never_reports_frees_its_slot():
    """Locally the claim lapses on the frozen clock (with Redis it is a key's expiry)."""

    async def scenario():
        worker = LocalCircuits()
        key = circuit_key("direct", "default", 1.0)
        with clock.frozen() as frozen:
            for _ in range(FAILURES):
                await worker.failed(key, "timeout", None)
            frozen.advance(COOLDOWN + 1)
            assert await worker.admit(key)
            frozen.advance(PROBE_SECONDS - 1)
            assert not await worker.admit(key)
            frozen.advance(2)
            assert await worker.admit(key)

    run(scenario)


def test_redis_shares_the_state_and_the_probe_between_workers(key, frozen):
    redis_or_skip()

    async def scenario():
        first, second = RedisCircuits(REDIS_URL), RedisCircuits(REDIS_URL)
        assert await second.admit(key)  # its copy: closed
        for _ in range(FAILURES):
            await first.failed(key, "status_5xx", None)
        third = RedisCircuits(REDIS_URL)  # another worker, reading fresh
        assert not await third.admit(key)
        assert (await read(third, key)).failures == FAILURES
        frozen.advance(COOLDOWN + 1)
        # Whichever worker asks first is the probe; no other one gets through meanwhile.
        assert [await w.admit(key) for w in (third, first, third)] == [True, False, False]
        assert await third.succeeded(key)
        assert await first.read([key]) == {}  # closed: nothing stored
        for worker in (first, second, third):
            await worker.client.aclose()

    run(scenario)


def test_redis_out_of_reach_acts_closed(key, frozen):
    """A breaker outage must not take the service down: every call answers, closed."""

    async def scenario():
        worker = RedisCircuits(f"redis://127.0.0.1:{free_block(1)}/0")
        for _ in range(FAILURES + 1):
            circuit = await worker.failed(key, "status_5xx", None)
            assert circuit.state(frozen.at) == CLOSED
        assert await worker.admit(key)
        assert await worker.read([key]) == {}
        await worker.client.aclose()

    run(scenario)


def test_read_circuits_and_known_open_per_backend(settings, key, frozen):
    """The sync view for the admin and the management API, and routing's no-I/O look, on the
    process's circuits and then (REDIS_URL set) on Redis."""

    async def fail(times):
        backend = circuits()
        for _ in range(times):
            await backend.failed(key, "status_5xx", None)
        seen = known_open(key)
        if isinstance(backend, RedisCircuits):
            await backend.client.aclose()
        return seen

    circuits_reset()
    try:
        assert asyncio.run(fail(FAILURES - 1)) is False
        assert asyncio.run(fail(1)) is True
        assert read_circuits([key])[key].failures == FAILURES
        frozen.advance(COOLDOWN)
        assert known_open(key) is False  # half-open: routing may pick it, for its probe

        redis_or_skip()
        settings.REDIS_URL = REDIS_URL
        circuits_reset()
        assert read_circuits([key]) == {}
        assert asyncio.run(fail(FAILURES)) is True
        stored = read_circuits([key])[key]
        assert (stored.failures, stored.open_until) == (FAILURES, frozen.at + COOLDOWN)
        assert read_circuits([]) == {}
    finally:
        circuits_reset()


# --- Retry-After -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("30", 30.0),
        (" 12 ", 12.0),
        ("0.5", 0.5),
        ("0", None),  # nothing to wait for
        ("-5", None),
        ("nan", None),
        ("-inf", None),
        ("inf", RETRY_AFTER_MAX),
        ("1e400", RETRY_AFTER_MAX),  # a float overflow is "very long": bounded
        ("9" * 5000, RETRY_AFTER_MAX),
        ("86400", RETRY_AFTER_MAX),
        ("garbage", None),
        ("0x10", None),
        ("\x00", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),  # already past
        ("Wed, 21 Oct 2015 07:28:00 -0000", None),  # no time zone: unreadable
        ("Wed, 21 Oct 2015 99999999999:28:00 GMT", None),  # fields that overflow
        ("Wed, 99999999999999 Oct 2015 07:28:00 GMT", None),
        ("Wed, 21 Oct 2015 07:28:00 +99999999999999999999", None),
        ("Wed, 21 Oct 99999 07:28:00 GMT", None),
        ("Fri, 31 Dec 9999 23:59:59 GMT", RETRY_AFTER_MAX),
    ],
)
def test_retry_after_seconds(value, seconds):
    with clock.frozen(at=1_800_000_000.0):
        assert retry_after_seconds(value) == seconds


def test_retry_after_as_an_http_date():
    from email.utils import formatdate

    with clock.frozen(at=1_800_000_000.0):
        assert retry_after_seconds(formatdate(1_800_000_090, usegmt=True)) == 90.0
