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

Only the attempt that answered is charged: a failed one produced nothing billable.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from django.conf import settings

from catalog.circuit import CLOSED, HALF_OPEN, OPEN, STATE_VALUES, circuits
from catalog.routing import Route
from core import clock, metrics
from core.errors import GatewayError, ServiceUnavailable

from .providers.base import ProviderFailure

ALL_OPEN = "every eligible connection's circuit is open"
_shown_closed: set[str] = set()  # circuits this process's gauge shows closed


def _retryable(exc: GatewayError) -> bool:
    return isinstance(exc, ProviderFailure) and exc.retryable and exc.upstream_kind != "too_large"


def _reason(exc: ProviderFailure) -> str:
    """A failed attempt's reason as the ledger and the admin show it: what kind of failure, and
    the provider's status when there was one (never a URL: `exc.reason` is not used)."""
    return exc.upstream_kind


async def call_with_failover(
    call: Any, routes: Iterable[Route], invoke: Callable[[Route], Awaitable[Any]]
) -> Any:
    """The first answer among `routes` (`invoke(route)` makes one attempt); `call.route`,
    `call.attempts` and `call.failovers` say which route answered and what failed before."""
    gateway = settings.GATEWAY
    max_attempts = gateway["FAILOVER_ATTEMPTS"]
    deadline = time.perf_counter() + gateway["FAILOVER_BUDGET"]
    breakers = circuits()
    tried: set[str] = set()
    failure: GatewayError | None = None
    failed_last: tuple[str, str, str] | None = None
    for route in routes:
        connection = route.connection
        key = connection.circuit
        if key in tried:
            continue
        tried.add(key)
        if call.attempts and (call.attempts >= max_attempts or time.perf_counter() > deadline):
            break
        if key and not await breakers.admit(key):
            continue
        if failed_last is not None:
            metrics.failover(*failed_last)
        call.route = route
        call.attempts += 1
        slug, name = route.provider.slug, connection.name
        try:
            result = await invoke(route)
        except GatewayError as exc:
            if not _retryable(exc):
                # It answered: the connection is alive.
                if key and isinstance(exc, ProviderFailure) and await breakers.succeeded(key):
                    metrics.circuit_state(slug, name, STATE_VALUES[CLOSED])
                raise
            assert isinstance(exc, ProviderFailure)
            reason = _reason(exc)
            metrics.upstream_attempt(slug, name, reason)
            if key:
                circuit = await breakers.failed(key, reason, exc.retry_after)
                state = circuit.state(clock.now())
                if state in (OPEN, HALF_OPEN):
                    metrics.circuit_state(slug, name, STATE_VALUES[state])
                    _shown_closed.discard(key)
            call.failovers.append(f"{slug}/{name}: {reason}")
            failure, failed_last = exc, (slug, name, reason)
            continue
        metrics.upstream_attempt(slug, name, "ok")
        if key and (await breakers.succeeded(key) or key not in _shown_closed):
            # The gauge shows every connection in use, and a saved (new) circuit as closed.
            metrics.circuit_state(slug, name, STATE_VALUES[CLOSED])
            _shown_closed.add(key)
        return result
    if failure is not None:
        raise failure
    raise ServiceUnavailable(reason=ALL_OPEN)
