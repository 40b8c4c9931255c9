"""Step 9 with failover: the request's routes are tried in order until one answers.

An attempt that fails retryably before anything reached the client (no connection, a time-out
before the answer starts, 401/403, 429, 5xx, a stream that breaks before its first byte) is
counted against its connection's circuit (catalog.circuit) and the next route is tried: the
provider's other connections, then the model's next provider rows (catalog.routing). Never
retried: the provider's answers about the request itself (400, 404, 422), an answer too large
to hold (the next would be as large, and a provider call is not free), anything after a
stream's first byte reached the client. At most `FAILOVER_ATTEMPTS` calls are made, and none is
started after `FAILOVER_BUDGET` seconds. A route whose circuit is open is skipped without a
call; when every route is skipped the request fails at once with the spec's 503.

Only the provider's own failures count against a circuit. A wait past the budget for a slot of
our own pool (the license's share, the worker's pool: `pool_wait`) is retried on the next route
(another pool) like a failure, but the provider was never called: it is not held against the
connection, or one license's burst would shut the connection for everyone (issue 35). A client
that leaves, an answer too large for us, the provider's answers about the request itself: not
failures of the connection either (docs/routing.md, "What counts as a failure").

Only the attempt that answered is charged: a failed one produced nothing billable.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeGuard, TypeVar

from django.conf import settings

from catalog.circuit import (
    ADMITTED,
    CLOSED,
    HALF_OPEN,
    OPEN,
    REFUSED,
    STATE_VALUES,
    Circuit,
    circuits,
)
from catalog.routing import Route
from core import clock, metrics
from core.errors import GatewayError, ServiceUnavailable

from .providers.base import ProviderFailure

ALL_OPEN = "every eligible connection's circuit is open"
_shown_closed: set[str] = set()  # circuits this process's gauge shows closed

T = TypeVar("T")


class AttemptLog(Protocol):
    """What the loop writes on the request it serves (inference.pipeline.Call): the route under
    way, then the one that answered; the provider calls made; each failed one and why."""

    route: Route | None
    attempts: int
    failovers: list[str]  # "provider/connection: reason"


class Breakers(Protocol):
    """The circuits the loop asks and tells (catalog.circuit: per process, or in Redis)."""

    async def admission(self, key: str) -> str | None: ...

    async def give_back(self, key: str, token: str) -> None: ...

    async def failed(self, key: str, reason: str, retry_after: float | None) -> Circuit: ...

    async def succeeded(self, key: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """An attempt that failed retryably: the error the client gets if no later route answers,
    and the connection that failed and why (the labels of the failover metric)."""

    error: ProviderFailure
    provider: str
    connection: str
    reason: str


def _retryable(exc: GatewayError) -> TypeGuard[ProviderFailure]:
    return isinstance(exc, ProviderFailure) and exc.retryable and exc.upstream_kind != "too_large"


def _reason(exc: ProviderFailure) -> str:
    """A failed attempt's reason as the ledger and the admin show it: what kind of failure, and
    the provider's status when there was one (never a URL: `exc.reason` is not used)."""
    return exc.upstream_kind


async def call_with_failover(
    call: AttemptLog, routes: Iterable[Route], invoke: Callable[[Route], Awaitable[T]]
) -> T:
    """The first answer among `routes` (`invoke(route)` makes one attempt); `call.route`,
    `call.attempts` and `call.failovers` say which route answered and what failed before."""
    max_attempts = settings.GATEWAY["FAILOVER_ATTEMPTS"]
    deadline = time.perf_counter() + settings.GATEWAY["FAILOVER_BUDGET"]
    breakers: Breakers = circuits()
    tried: set[str] = set()
    failed: FailedAttempt | None = None
    for route in routes:
        key = route.connection.circuit
        if key in tried:
            continue
        tried.add(key)
        if call.attempts and (call.attempts >= max_attempts or time.perf_counter() > deadline):
            break
        probe = await breakers.admission(key) if key else ADMITTED
        if probe is REFUSED:
            continue
        if failed is not None:
            metrics.failover(failed.provider, failed.connection, failed.reason)
        call.route = route
        call.attempts += 1
        try:
            result = await _attempt(breakers, key, probe, route, invoke)
        except GatewayError as exc:
            failed = await _attempt_failed(breakers, call, route, exc)
            if failed is None:
                raise
            continue
        _answered(route, await breakers.succeeded(key) if key else False)
        return result
    if failed is not None:
        raise failed.error
    raise ServiceUnavailable(reason=ALL_OPEN)


async def _attempt(
    breakers: Breakers,
    key: str,
    probe: str | None,
    route: Route,
    invoke: Callable[[Route], Awaitable[T]],
) -> T:
    """One attempt. A probe (`probe` its claim) that did not reach the provider (our own pool
    had no slot in time, or its client left) gives its claim back: another request may probe
    at once, rather than the connection waiting out the lease of a probe that never was."""
    if not probe:
        return await invoke(route)
    try:
        return await invoke(route)
    except BaseException as exc:
        if not _provider_answered(exc):
            await breakers.give_back(key, probe)
        raise


async def _attempt_failed(
    breakers: Breakers, call: AttemptLog, route: Route, exc: GatewayError
) -> FailedAttempt | None:
    """What a failed attempt leaves: a retryable failure is counted (its metric, its circuit
    when the provider is at fault, the ledger's failovers) and returned, the next route tried;
    None for a failure not retried (re-raised), after which a provider that answered is alive."""
    slug, name, key = route.provider.slug, route.connection.name, route.connection.circuit
    if not _retryable(exc):
        if key and _provider_answered(exc) and await breakers.succeeded(key):
            metrics.circuit_state(slug, name, STATE_VALUES[CLOSED])
        return None
    reason = _reason(exc)
    metrics.upstream_attempt(slug, name, reason)
    if key and exc.provider_fault:
        await _count_failure(breakers, key, slug, name, reason, exc.retry_after)
    call.failovers.append(f"{slug}/{name}: {reason}")
    return FailedAttempt(exc, slug, name, reason)


def _answered(route: Route, closed_now: bool) -> None:
    """The attempt that answered: its metric, and its circuit shown closed (the gauge shows
    every connection in use, and a saved, new circuit as closed) when it just closed or this
    process has not shown it yet."""
    slug, name, key = route.provider.slug, route.connection.name, route.connection.circuit
    metrics.upstream_attempt(slug, name, "ok")
    if key and (closed_now or key not in _shown_closed):
        metrics.circuit_state(slug, name, STATE_VALUES[CLOSED])
        _shown_closed.add(key)


def _provider_answered(exc: BaseException) -> bool:
    """Whether the failure came from the provider (not from our side of the call)."""
    return isinstance(exc, ProviderFailure) and exc.provider_fault


async def _count_failure(
    breakers: Breakers,
    key: str,
    slug: str,
    name: str,
    reason: str,
    retry_after: float | None,
) -> None:
    circuit = await breakers.failed(key, reason, retry_after)
    state = circuit.state(clock.now())
    if state in (OPEN, HALF_OPEN):
        metrics.circuit_state(slug, name, STATE_VALUES[state])
        _shown_closed.discard(key)
