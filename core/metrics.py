"""The gateway's Prometheus metrics and the cheap calls that record them (docs/metrics.md).

Served at /metrics by gateway_site.metrics. Under a server (gateway_site.asgi) prometheus-client
runs in multiprocess mode: every worker writes its values to files in PROMETHEUS_MULTIPROC_DIR
and a scrape sums them (gateway_site.metrics_setup prepares the directory).

Labels have bounded cardinality: service, provider (catalog slugs), model (catalog ids only;
anything else is `other`), status code, and the license's numeric id (never its name, which is
free text, nor a key, a user or a prompt). Label children are bound once per label set and kept
in plain dicts: `.labels()` validates and locks on every call, a dict lookup does not.
GATEWAY_METRICS=off turns every recording call into a return (and /metrics into a 404).

Batched writes: a request's recorders (its count, timings, charge, in-flight and attempt) add
to a dict in memory; `flush()` writes the sums to prometheus-client's values every
GATEWAY_METRICS_FLUSH_SECONDS (a daemon thread), before this process renders a scrape, and when
the worker stops (the ASGI lifespan, and at exit). Written at once, each of a request's 15
values was a locked, pid-checked write to the mmapped file: 25 µs of CPU a request against 5
(bench/metrics_cost.py, docs/metrics.md). A scrape of another worker sees these values within
the interval; a SIGKILLed worker loses at most that much of its metrics (never a ledger row:
money is not here).
The rare recorders (errors, failovers, circuits, lost rows) still write at once.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, values

from core.config import get_config

ENABLED = get_config().GATEWAY_METRICS
FLUSH_SECONDS = get_config().GATEWAY_METRICS_FLUSH_SECONDS
# Whether this process writes multiprocess files (decided when prometheus_client was imported).
MULTIPROCESS = values.ValueClass is not values.MutexValue

NONE = "none"  # no provider yet (refused before selection), or no model in the request
OTHER = "other"  # a model the catalog does not list: never the client's free text

REQUESTS = Counter(
    "gateway_requests",
    "Ledgered requests (admitted, or refused after the caller was identified).",
    ["service", "model", "provider", "status"],
)
HTTP_RESPONSES = Counter(
    "gateway_http_responses",
    "Every /v1 answer by status code (unauthenticated ones too).",
    ["status"],
)
OVERHEAD = Histogram(
    "gateway_overhead_seconds",
    "The gateway's own time per request: the request's time minus the provider call's.",
    ["service", "provider"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
PROVIDER_CALL = Histogram(
    "gateway_provider_call_seconds",
    "The provider call's time (streams: until the stream ends).",
    ["service", "provider"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
FIRST_TOKEN = Histogram(
    "gateway_stream_first_token_seconds",
    "Streams: from the request's arrival to the provider's first event.",
    ["service", "provider"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
CREDITS = Counter("gateway_charged_microcredits", "Micro-credits charged.", ["license", "service"])
TOKENS = Counter("gateway_tokens", "Tokens billed.", ["license", "service", "kind"])
# Every worker sets it after a charge; the value written last is the wallet's latest state.
BUDGET_REMAINING = Gauge(
    "gateway_budget_remaining_microcredits",
    "Micro-credits left in a license's pooled budget, as of its latest charge.",
    ["license"],
    multiprocess_mode="mostrecent",
)
IN_FLIGHT = Gauge(
    "gateway_requests_in_flight", "/v1 requests being answered.", multiprocess_mode="livesum"
)
UPSTREAM_ERRORS = Counter(
    "gateway_upstream_errors", "Failed provider calls by kind.", ["provider", "kind"]
)
UPSTREAM_ATTEMPTS = Counter(
    "gateway_upstream_attempts",
    "Provider calls by connection and result (ok, or why the attempt failed).",
    ["provider", "connection", "result"],
)
FAILOVERS = Counter(
    "gateway_failovers",
    "Failed attempts after which the request went on to another connection.",
    ["provider", "connection", "reason"],
)
# 0 closed, 1 half-open, 2 open: as this worker last saw it (a shared circuit's state is in
# Redis; every worker reports its view, the most recent wins).
CIRCUIT_STATE = Gauge(
    "gateway_circuit_state",
    "A connection's circuit: 0 closed, 1 half-open, 2 open.",
    ["provider", "connection"],
    multiprocess_mode="mostrecent",
)
LIVE_FEED_LOST = Counter(
    "gateway_live_feed_events_lost", "Live feed events not delivered.", ["reason"]
)
LEDGER_ROWS_LOST = Counter(
    "gateway_ledger_rows_lost",
    "Ledger rows neither the database nor the spool could take (each logged at CRITICAL).",
    ["kind"],
)

# Gauges read when /metrics is scraped, once per host (not per worker), by name: (help, read).
# The app that owns a value registers how to read it at start-up (the ledger its spool's depths,
# licensing.ledger.spool.register_gauges), so the site's endpoint imports no app.
_scrape_gauges: dict[str, tuple[str, Callable[[], float]]] = {}

# --- the batch -------------------------------------------------------------------------------
# prometheus-client's value objects (a counter child's `_value`, a histogram child's bucket and
# sum values: tests/ops/test_metrics_batch.py checks the layout against the pinned version) to
# the amount still to add; gauge children to the value still to set.
_lock = threading.Lock()
_adds: dict[Any, float] = {}
_sets: dict[Any, float] = {}
_flusher: threading.Thread | None = None


def flush() -> None:
    """Write what the recorders added since the last flush (any thread; cheap when empty)."""
    global _adds, _sets
    with _lock:
        adds, _adds = _adds, {}
        sets, _sets = _sets, {}
    for value, amount in adds.items():
        value.inc(amount)
    for child, latest in sets.items():
        child.set(latest)


def _flush_every(interval: float) -> None:
    while True:
        time.sleep(interval)
        flush()


def _written() -> None:
    """After a recorder's additions: start the flusher on first use (in the process that
    records: a worker, not a server's parent), or write at once when the interval is 0."""
    global _flusher
    if _flusher is None:
        if not FLUSH_SECONDS:
            flush()
            return
        with _lock:
            if _flusher is None:
                _flusher = threading.Thread(
                    target=_flush_every, args=(FLUSH_SECONDS,), name="metrics-flush", daemon=True
                )
                _flusher.start()


def _forked() -> None:
    # The parent writes what it holds; the child starts empty, with a lock and a flusher of its
    # own (a thread does not survive a fork).
    global _lock, _adds, _sets, _flusher
    _lock, _adds, _sets, _flusher = threading.Lock(), {}, {}, None


os.register_at_fork(after_in_child=_forked)
atexit.register(flush)


class _Observed:
    """A histogram child's values: one observation is a bucket's +1 and the sum's +amount."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, child: Histogram) -> None:
        self.bounds = child._upper_bounds  # ends with +Inf
        self.buckets = child._buckets
        self.sum = child._sum

    def add(self, adds: dict, amount: float) -> None:
        """Under `_lock`. As `Histogram.observe`: the first bucket whose bound is >= amount
        (none for NaN), and the sum."""
        i = bisect_left(self.bounds, amount)
        if i < len(self.bounds) and amount <= self.bounds[i]:
            bucket = self.buckets[i]
            adds[bucket] = adds.get(bucket, 0.0) + 1.0
        adds[self.sum] = adds.get(self.sum, 0.0) + amount


def _counted(child: Counter | Gauge) -> Any:
    return child._value


_requests: dict[tuple[str, str, str, int], Any] = {}
_timings: dict[tuple[str, str], tuple[_Observed, _Observed]] = {}
_charges: dict[tuple[int, str], tuple[Any, Any, Any]] = {}
_budgets: dict[int, Gauge] = {}
_statuses: dict[int, Any] = {}
_first_tokens: dict[tuple[str, str], _Observed] = {}
_in_flight = _counted(IN_FLIGHT)
# The recorders look a bound child up first and bind it only on a miss (no closure per call).


def in_flight(change: int) -> None:
    """+1 when a /v1 request arrives, -1 after the last byte of its answer."""
    with _lock:
        _adds[_in_flight] = _adds.get(_in_flight, 0.0) + change
    _written()


def http_response(status: int) -> None:
    if not ENABLED:
        return
    value = _statuses.get(status)
    if value is None:
        value = _statuses[status] = _counted(HTTP_RESPONSES.labels(str(status)))
    with _lock:
        _adds[value] = _adds.get(value, 0.0) + 1.0
    _written()


def request_recorded(
    service: str,
    model: str,
    provider: str,
    status: int,
    *,
    total: float,
    provider_seconds: float | None,
) -> None:
    """One ledgered request: its count and its timings (seconds)."""
    if not ENABLED:
        return
    provider = provider or NONE
    key = (service, model, provider, status)
    count = _requests.get(key)
    if count is None:
        count = _requests[key] = _counted(REQUESTS.labels(service, model, provider, str(status)))
    timings = _timings.get((service, provider))
    if timings is None:
        timings = _timings[(service, provider)] = (
            _Observed(OVERHEAD.labels(service, provider)),
            _Observed(PROVIDER_CALL.labels(service, provider)),
        )
    with _lock:
        adds = _adds
        adds[count] = adds.get(count, 0.0) + 1.0
        if provider_seconds is None:
            timings[0].add(adds, total)
        else:
            timings[1].add(adds, provider_seconds)
            timings[0].add(adds, max(0.0, total - provider_seconds))
    _written()


def first_token(service: str, provider: str, seconds: float) -> None:
    if not ENABLED:
        return
    key = (service, provider or NONE)
    observed = _first_tokens.get(key)
    if observed is None:
        observed = _first_tokens[key] = _Observed(FIRST_TOKEN.labels(*key))
    with _lock:
        observed.add(_adds, seconds)
    _written()


def charged(
    license_id: int,
    service: str,
    credits: int,
    prompt_tokens: int | None,
    completion_tokens: int | None,
) -> None:
    if not ENABLED or not (credits or prompt_tokens or completion_tokens):
        return
    key = (license_id, service)
    counters = _charges.get(key)
    if counters is None:
        license = str(license_id)
        counters = _charges[key] = (
            _counted(CREDITS.labels(license, service)),
            _counted(TOKENS.labels(license, service, "prompt")),
            _counted(TOKENS.labels(license, service, "completion")),
        )
    with _lock:
        adds = _adds
        for value, amount in zip(
            counters, (credits, prompt_tokens, completion_tokens), strict=True
        ):
            if amount:
                adds[value] = adds.get(value, 0.0) + amount
    _written()


def budget_remaining(license_id: int, remaining: int) -> None:
    if not ENABLED:
        return
    child = _budgets.get(license_id)
    if child is None:
        child = _budgets[license_id] = BUDGET_REMAINING.labels(str(license_id))
    with _lock:
        _sets[child] = remaining
    _written()


def upstream_error(provider: str, kind: str) -> None:
    if ENABLED:
        UPSTREAM_ERRORS.labels(provider or NONE, kind).inc()


_attempts: dict[tuple[str, str, str], Any] = {}


def upstream_attempt(provider: str, connection: str, result: str) -> None:
    if not ENABLED:
        return
    key = (provider, connection, result)
    value = _attempts.get(key)
    if value is None:
        value = _attempts[key] = _counted(UPSTREAM_ATTEMPTS.labels(provider, connection, result))
    with _lock:
        _adds[value] = _adds.get(value, 0.0) + 1.0
    _written()


def failover(provider: str, connection: str, reason: str) -> None:
    if ENABLED:
        FAILOVERS.labels(provider, connection, reason).inc()


def circuit_state(provider: str, connection: str, value: int) -> None:
    if ENABLED:
        CIRCUIT_STATE.labels(provider, connection).set(value)


def live_feed_lost(reason: str, count: int) -> None:
    if ENABLED and count > 0:
        LIVE_FEED_LOST.labels(reason).inc(count)


def ledger_rows_lost(kind: str, count: int) -> None:
    """kind: `call` (a provider call, logged with its spool line) or `refusal`."""
    if ENABLED and count > 0:
        LEDGER_ROWS_LOST.labels(kind).inc(count)


def register_gauge_source(name: str, documentation: str, read: Callable[[], float]) -> None:
    """A gauge /metrics reads when scraped: `read()` gives its value (an OSError shows as NaN).
    Registering a name again replaces it, so a second start-up in one process adds nothing."""
    _scrape_gauges[name] = (documentation, read)


def gauge_sources() -> list[tuple[str, str, Callable[[], float]]]:
    """The registered scrape-time gauges, (name, help, read), in the order they were first
    registered."""
    return [(name, doc, read) for name, (doc, read) in _scrape_gauges.items()]
