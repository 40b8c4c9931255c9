"""The shared test kit: helpers and fixtures that tests used to write each for themselves.

Loaded as a plugin by tests/conftest.py (`pytest_plugins`), so its fixtures are there in every
test file; import the plain helpers: `from tests.kit import error, wait_until`.

- `error(response, status)`: the spec's error body, `{"error": {"message": ...}}`, its message.
- `wait_until(condition, ...)`: poll for a condition with a deadline, and fail loudly (with what
  was last seen) when it does not come; never a sleep that hopes time has done the work.
- `wait_for_ledger(count)`, `wait_for_health(base, process, log)`: the two waits most written.
- `drain_background_writes()`: wait for the gateway's background ledger writes, or fail
  naming them (the `gateway` fixture calls it after each test).
- `sdk`: the openai client against the live gateway, with the test's API key.
- `oai`, `oai_http`, `oai_sdk`: the fake OpenAI upstream on its own (tests of the simulator),
  reset for each test, with a plain HTTP client and the openai SDK pointed straight at it.
- `rows_made_once(django_db_blocker, make)` and `fresh(rows)`: rows a module's tests share,
  made once (Django's `setUpTestData` for pytest), each test's own writes rolled back.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx
import openai
import pytest

T = TypeVar("T")

FAKE_OPENAI_KEY = "sk-upstream-test-key"


def error(response, status: int) -> str:
    """The message of a spec error answer, after checking its status."""
    assert response.status_code == status, response.text
    return response.json()["error"]["message"]


class WaitTimeout(AssertionError):
    """What a test waited for did not happen within its deadline."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 10.0,
    every: float = 0.02,
    what: str | Callable[[], object] = "the condition",
) -> T:
    """`condition()`'s first truthy value, polled every `every` seconds; WaitTimeout after
    `timeout` seconds, saying `what` (or what it returns then: the state that was left)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            left = what() if callable(what) else what
            raise WaitTimeout(f"not within {timeout:g} s: {left}")
        time.sleep(every)


def wait_for_ledger(count: int, timeout: float = 10.0) -> int:
    """Wait until the ledger holds at least `count` rows (a stream's row is written by a task of
    its own just after the stream ends, so the client may be done before it lands)."""
    from licensing.models import Transaction

    return wait_until(
        lambda: (n := Transaction.objects.count()) >= count and n,
        timeout=timeout,
        what=lambda: f"{Transaction.objects.count()} ledger rows, waiting for {count}",
    )


def wait_for_health(base: str, process=None, log=None, timeout: float = 60.0) -> None:
    """Wait until a gateway started as a process answers 200 on /v1/health; fail at once (with
    its log) if the process exits, and with its log after `timeout`."""

    def healthy() -> bool:
        assert process is None or process.poll() is None, log.read_text() if log else "exited"
        try:
            return httpx.get(f"{base}/v1/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(healthy, timeout=timeout, every=0.05, what=lambda: log.read_text() if log else base)


def drain_background_writes(timeout: float = 10.0) -> None:
    """Wait for the gateway's streams to end and for its background ledger writes (a stream's
    row is written by a task of its own just after the stream ends; a disconnected stream's
    grace read too; the release of a hold whose client left while it was being taken; a busy
    wallet's leases, closed now rather than at the end of their window) so that
    none lands after the test's database is flushed under it (the flush DELETEs: a row landing
    meanwhile breaks its foreign keys at commit). WaitTimeout names what is left."""
    from inference import pipeline, streaming
    from licensing.ledger import leases, reservations

    def left() -> set:
        # copy(): one step under the GIL, while the server's thread adds and discards.
        writes = streaming._open.copy() | streaming._background.copy()
        leases.close_everywhere()  # a busy wallet's leases: closed now, not at their window's end
        writes |= leases.live_anywhere()
        return writes | pipeline._background.copy() | reservations.releasing.copy()

    wait_until(
        lambda: not left(),
        timeout=timeout,
        what=lambda: f"background ledger writes still running: {sorted(map(repr, left()))}",
    )


# --- the gateway through the openai SDK ---------------------------------------------------------


@pytest.fixture
def sdk(gateway, api_key):
    return openai.OpenAI(api_key=api_key, base_url=gateway.url + "/v1", max_retries=0)


# --- the fake OpenAI upstream on its own --------------------------------------------------------


@pytest.fixture(scope="module")
def openai_server():
    from fake_upstreams import OpenAIFake, serve

    with serve(OpenAIFake(api_key=FAKE_OPENAI_KEY)) as fake:
        yield fake


@pytest.fixture
def oai(openai_server):
    """The module's fake with its knobs, state and recordings reset."""
    openai_server.reset()
    return openai_server


@pytest.fixture
def oai_http(oai):
    with httpx.Client(
        base_url=oai.base_url, headers={"Authorization": f"Bearer {FAKE_OPENAI_KEY}"}, timeout=5
    ) as client:
        yield client


@pytest.fixture
def oai_sdk(oai):
    return openai.OpenAI(api_key=FAKE_OPENAI_KEY, base_url=oai.base_url, max_retries=0, timeout=5)


# --- rows made once for a module's tests -------------------------------------------------------


@contextmanager
def rows_made_once(django_db_blocker, make: Callable[[], T]) -> Iterator[T]:
    """`make()`'s rows, made once for the tests of a module (a module-scoped fixture's body)
    instead of once per test: they are written in a transaction left open around the module's
    tests and rolled back after the last, and each test (`db`, not `transactional_db`: nothing
    outside this connection sees them) runs in a savepoint of it, so what a test writes is
    rolled back before the next as before. A test takes its copy with `fresh(rows)`. Every
    test of the module that runs after the first one that asks for them sees them too: use it
    where each database test of the module asks for them (or cannot tell), and where none uses
    `transactional_db` (it would run inside the open transaction)."""
    from django.db import transaction

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            rows = make()
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    try:
        yield rows
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


def fresh(rows: T) -> T:
    """A test's own copy of rows made once (`rows_made_once`): its model instances copied, so
    what a test changes in memory is not the next test's; this process's caches cleared, so no
    cached row of an earlier test's rolled-back writes answers for this one."""
    from django.db import connection

    from core.localcache import clear_local

    assert connection.in_atomic_block, "rows made once are for `db` tests, in their savepoint"
    clear_local()
    return copy.deepcopy(rows)
