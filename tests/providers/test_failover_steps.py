"""inference.failover's typed loop and its steps without a server: what a failed attempt
leaves (metric, circuit, the ledger's failovers), what the answering one does to the gauge,
and the loop over fake attempts. End to end through the live gateway: test_failover.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from catalog.circuit import STATE_VALUES, Circuit, circuits_reset
from catalog.routing import Route
from core import metrics
from core.errors import BadRequest, ServiceUnavailable
from inference import failover
from inference.failover import FailedAttempt, _answered, _attempt_failed, call_with_failover
from inference.providers.base import ProviderFailure

from .test_routing import CATALOG, conn


@dataclass
class Log:
    """An AttemptLog of our own (the pipeline's is its Call)."""

    route: Route | None = None
    attempts: int = 0
    failovers: list[str] = field(default_factory=list)


class Breakers:
    """A Breakers that records what the loop told it."""

    def __init__(self, closes: bool = False):
        self.told: list[tuple] = []
        self.closes = closes

    async def admission(self, key: str) -> str | None:
        return ""

    async def give_back(self, key: str, token: str) -> None:
        self.told.append(("give_back", key, token))

    async def failed(self, key: str, reason: str, retry_after: float | None) -> Circuit:
        self.told.append(("failed", key, reason, retry_after))
        return Circuit()

    async def succeeded(self, key: str) -> bool:
        self.told.append(("succeeded", key))
        return self.closes


def route(name: str, circuit: str | None = None) -> Route:
    provider = CATALOG.providers["direct"]
    connection = conn(name, circuit=name if circuit is None else circuit)
    return Route("chat_completions", "m", "m", provider, connection, None)


@pytest.fixture
def seen(monkeypatch):
    """The metrics the steps record, as calls."""
    calls: list[tuple] = []
    for name in ("upstream_attempt", "circuit_state", "failover"):
        monkeypatch.setattr(metrics, name, lambda *a, name=name: calls.append((name, *a)))
    monkeypatch.setattr(failover, "_shown_closed", set())
    return calls


def failure(kind="status_5xx", *, retryable=True, provider_fault=True, status=503):
    exc = ProviderFailure("down", status=status, retryable=retryable, kind=kind)
    exc.provider_fault = provider_fault
    return exc


def test_a_retryable_failure_is_counted_and_handed_on(seen):
    breakers, log, exc = Breakers(), Log(), failure()
    exc.retry_after = 7.0
    failed = asyncio.run(_attempt_failed(breakers, log, route("a"), exc))
    assert failed == FailedAttempt(exc, "direct", "a", "status_5xx")
    assert breakers.told == [("failed", "a", "status_5xx", 7.0)]
    assert seen == [("upstream_attempt", "direct", "a", "status_5xx")]
    assert log.failovers == ["direct/a: status_5xx"]


def test_a_wait_for_our_own_pool_is_no_failure_of_the_connection(seen):
    breakers, log = Breakers(), Log()
    exc = failure("pool_wait", provider_fault=False)
    failed = asyncio.run(_attempt_failed(breakers, log, route("a"), exc))
    assert failed is not None and failed.reason == "pool_wait"
    assert breakers.told == []  # its circuit is not told
    assert log.failovers == ["direct/a: pool_wait"]


@pytest.mark.parametrize("closes", [True, False])
def test_an_answer_about_the_request_is_not_retried_and_the_connection_is_alive(seen, closes):
    breakers, log = Breakers(closes=closes), Log()
    exc = failure("status_4xx", retryable=False, status=400)
    assert asyncio.run(_attempt_failed(breakers, log, route("a"), exc)) is None
    assert breakers.told == [("succeeded", "a")]
    closed = [("circuit_state", "direct", "a", STATE_VALUES["closed"])]
    assert seen == (closed if closes else [])
    assert log.failovers == []


@pytest.mark.parametrize(
    ("exc", "told"),
    [
        (failure("too_large"), [("succeeded", "a")]),  # the provider answered, too large to hold
        (failure("timeout", retryable=False, provider_fault=False), []),  # our side
        (BadRequest("no"), []),  # not the provider's
    ],
)
def test_a_failure_not_retried_tells_the_circuit_only_what_the_provider_did(seen, exc, told):
    breakers = Breakers()
    assert asyncio.run(_attempt_failed(breakers, Log(), route("a"), exc)) is None
    assert breakers.told == told


def test_the_answering_connection_shows_closed_once_or_when_it_closes(seen):
    closed = ("circuit_state", "direct", "a", STATE_VALUES["closed"])
    _answered(route("a"), closed_now=False)
    _answered(route("a"), closed_now=False)
    _answered(route("a"), closed_now=True)
    _answered(route("builtin", circuit=""), closed_now=False)
    ok = ("upstream_attempt", "direct", "a", "ok")
    assert seen == [ok, closed, ok, ok, closed, ("upstream_attempt", "direct", "builtin", "ok")]


@pytest.fixture
def fresh_circuits(settings):
    settings.GATEWAY = {**settings.GATEWAY, "FAILOVER_ATTEMPTS": 3, "FAILOVER_BUDGET": 60.0}
    circuits_reset()
    yield settings
    circuits_reset()


def run_loop(routes, outcomes):
    """call_with_failover over `routes`, each attempt answering from `outcomes` in turn."""
    log, called = Log(), []

    async def invoke(attempt: Route) -> str:
        called.append(attempt.connection.name)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def loop():
        return await call_with_failover(log, routes, invoke)

    try:
        return asyncio.run(loop()), log, called
    except Exception as exc:
        return exc, log, called


def test_the_first_answer_wins_after_the_failed_attempts(seen, fresh_circuits):
    answer, log, called = run_loop(
        [route("a"), route("a"), route("b"), route("c")], [failure(), "ok-b"]
    )
    assert (answer, called, log.attempts) == ("ok-b", ["a", "b"], 2)
    assert log.route is not None and log.route.connection.name == "b"
    assert log.failovers == ["direct/a: status_5xx"]
    assert ("failover", "direct", "a", "status_5xx") in seen


def test_the_attempts_and_the_time_budget_bound_the_loop(seen, fresh_circuits):
    routes = [route(name) for name in "abcd"]
    last, log, called = run_loop(routes, [failure(), failure(), failure("timeout"), "never"])
    assert isinstance(last, ProviderFailure) and last.upstream_kind == "timeout"
    assert (called, log.attempts) == (["a", "b", "c"], 3)
    fresh_circuits.GATEWAY = {**fresh_circuits.GATEWAY, "FAILOVER_BUDGET": -1.0}
    first, log, called = run_loop(routes, [failure("status_429"), "never"])
    assert isinstance(first, ProviderFailure) and (called, log.attempts) == (["a"], 1)


def test_a_failure_not_retried_ends_the_loop_as_it_is(seen, fresh_circuits):
    refused = failure("status_4xx", retryable=False, status=400)
    exc, log, called = run_loop([route("a"), route("b")], [refused, "never"])
    assert exc is refused and called == ["a"] and log.failovers == []


def test_every_route_refused_by_its_circuit_is_the_spec_503(seen, fresh_circuits, monkeypatch):
    async def refused(self, key):
        return None

    monkeypatch.setattr(type(failover.circuits()), "admission", refused)
    exc, log, called = run_loop([route("a"), route("b")], ["never"])
    assert isinstance(exc, ServiceUnavailable) and exc.reason == failover.ALL_OPEN
    assert (called, log.attempts, log.route) == ([], 0, None)
