"""catalog.circuit's state machine on its own, on both backends (`LocalCircuits`, and
`RedisCircuits` against a redis-server this module starts on a free port, keys of the test's
own), on the frozen `core.clock`; and `retry_after_seconds`, which turns a 429's Retry-After
into the time a circuit stays open. End to end through the gateway:
tests/providers/test_failover.py.

A "worker" below is one backend object: one process's view of the circuits. With Redis each
has its own client (its own connection pool), as separate workers and hosts do, and they share
the state; `LocalCircuits` is one process's own.
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
from tests.processes import redis_server_or_skip

FAILURES, COOLDOWN = 3, 30.0
REDIS = pytest.param("redis", marks=pytest.mark.slow)  # a redis-server of the module's own


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = redis_server_or_skip(tmp_path_factory.mktemp("redis"))
    yield server.url
    server.stop()


@pytest.fixture(autouse=True)
def limits(settings):
    settings.GATEWAY = {
        **settings.GATEWAY,
        "CIRCUIT_FAILURES": FAILURES,
        "CIRCUIT_COOLDOWN": COOLDOWN,
    }


@pytest.fixture
def key():
    """A circuit key no other test uses."""
    return circuit_key(f"test-{uuid.uuid4().hex}", "default", 1.5)


@pytest.fixture(params=["local", REDIS])
def workers(request):
    """`workers()` is a new worker's circuits (inside the test's event loop): with Redis each
    is a process of its own sharing the state; locally they are the one process's."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return lambda: RedisCircuits(url)
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


def test_a_probe_that_never_reports_frees_its_slot(workers, key, frozen):
    """A probe whose worker died holds the half-open slot for its lease only, on the same clock
    as the cool-down (not Redis's own: the lease is in the circuit's state)."""

    async def scenario():
        worker = workers()
        for _ in range(FAILURES):
            await worker.failed(key, "timeout", None)
        frozen.advance(COOLDOWN + 1)
        assert await worker.admit(key)  # a probe that will never report
        frozen.advance(PROBE_SECONDS - 1)
        assert not await worker.admit(key)
        frozen.advance(2)
        assert await worker.admit(key)  # the next probe
        assert not await workers().admit(key)

    run(scenario)


# --- exactly one probe, across workers and hosts ---------------------------------------------


def opened_and_cooled(worker_count, workers, key, frozen):
    """`worker_count` workers, each having read the circuit open (its copy), and the clock
    past the cool-down; the coroutine answers the workers."""

    async def setup():
        crowd = [workers() for _ in range(worker_count)]
        for _ in range(FAILURES):
            await crowd[0].failed(key, "status_5xx", None)
        for worker in crowd:
            assert not await worker.admit(key)  # each now holds a copy: open
        frozen.advance(COOLDOWN + 1)
        return crowd

    return setup()


async def close_all(crowd) -> None:
    for worker in crowd:
        if isinstance(worker, RedisCircuits):
            await worker.client.aclose()


def test_exactly_one_probe_among_concurrent_admissions(workers, key, frozen):
    """Forty requests on eight workers (Redis: eight clients, as eight processes on several
    hosts would be) ask at the same moment, past the cool-down: one is the probe."""

    async def scenario():
        crowd = await opened_and_cooled(8, workers, key, frozen)
        answers = await asyncio.gather(*(crowd[n % 8].admit(key) for n in range(40)))
        assert answers.count(True) == 1
        await close_all(crowd)

    run(scenario)


def test_a_failed_probe_reopens_the_circuit_for_every_worker_at_once(workers, key, frozen):
    """The other workers' copies still show the old cool-down, over: they must not take the
    failed probe's end for a free slot (with Redis they ask the shared state, not their copy)."""

    async def scenario():
        crowd = await opened_and_cooled(5, workers, key, frozen)
        probes = await asyncio.gather(*(worker.admit(key) for worker in crowd))
        assert probes.count(True) == 1
        prober = crowd[probes.index(True)]
        circuit = await prober.failed(key, "status_5xx", None)
        assert circuit.state(frozen.at) == OPEN
        assert not any(await asyncio.gather(*(w.admit(key) for w in crowd for _ in range(4))))
        frozen.advance(COOLDOWN + 1)  # the new cool-down's end: again exactly one
        again = await asyncio.gather(*(w.admit(key) for w in crowd for _ in range(4)))
        assert again.count(True) == 1
        await close_all(crowd)

    run(scenario)


def test_a_successful_probe_closes_the_circuit_for_every_worker(workers, key, frozen):
    async def scenario():
        crowd = await opened_and_cooled(3, workers, key, frozen)
        probes = [await worker.admit(key) for worker in crowd]
        assert probes == [True, False, False]
        assert await crowd[0].succeeded(key)
        # The others learn it from the shared state at their next admission, not a second later.
        assert all(await asyncio.gather(*(w.admit(key) for w in crowd for _ in range(3))))
        stored = await crowd[0].read([key])  # Redis deletes a closed circuit's state
        assert [(c.failures, c.state(frozen.at)) for c in stored.values()] in ([], [(0, CLOSED)])
        await close_all(crowd)

    run(scenario)


def test_a_probe_that_never_reached_the_provider_gives_its_slot_back(workers, key, frozen):
    """A probe that waited past the budget for our own pool, or whose client left, made no
    call: another request probes at once. Only the probe's own token frees the slot."""

    async def scenario():
        first, second = workers(), workers()
        for _ in range(FAILURES):
            await first.failed(key, "status_5xx", None)
        frozen.advance(COOLDOWN + 1)
        token = await first.admission(key)
        assert token  # the probe's claim
        assert await second.admission(key) is None
        await second.give_back(key, "not-the-probe")
        assert await second.admission(key) is None
        await first.give_back(key, token)
        assert await second.admission(key)  # the next probe, without waiting for the lease
        assert not await first.admit(key)
        await close_all({first, second})

    run(scenario)


@pytest.mark.slow
def test_redis_shares_the_state_and_the_probe_between_workers(redis_url, key, frozen):
    async def scenario():
        first, second = RedisCircuits(redis_url), RedisCircuits(redis_url)
        assert await second.admit(key)  # its copy: closed
        for _ in range(FAILURES):
            await first.failed(key, "status_5xx", None)
        third = RedisCircuits(redis_url)  # another worker, reading fresh
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


@pytest.mark.slow
def test_read_circuits_and_known_open_per_backend(settings, redis_url, key, frozen):
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

        settings.REDIS_URL = redis_url
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
