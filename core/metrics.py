"""The gateway's Prometheus metrics and the cheap calls that record them (docs/metrics.md).

Served at /metrics by gateway_site.metrics. Under a server (gateway_site.asgi) prometheus-client
runs in multiprocess mode: every worker writes its values to files in PROMETHEUS_MULTIPROC_DIR
and a scrape sums them (gateway_site.metrics_setup prepares the directory).

Labels have bounded cardinality: service, provider (catalog slugs), model (catalog ids only;
anything else is `other`), status code, and the license's numeric id (never its name, which is
free text, nor a key, a user or a prompt). Label children are bound once per label set and kept
in plain dicts: `.labels()` validates and locks on every call, a dict lookup does not.
GATEWAY_METRICS=off turns every recording call into a return (and /metrics into a 404).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram, values

from core.config import get_config

ENABLED = get_config().GATEWAY_METRICS
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

_requests: dict[tuple[str, str, str, int], Counter] = {}
_timings: dict[tuple[str, str], tuple[Histogram, Histogram]] = {}
_charges: dict[tuple[int, str], tuple[Counter, Counter, Counter]] = {}
_budgets: dict[int, Gauge] = {}
_statuses: dict[int, Counter] = {}
_first_tokens: dict[tuple[str, str], Histogram] = {}
# The recorders look a bound child up first and bind it only on a miss (no closure per call).


def http_response(status: int) -> None:
    if not ENABLED:
        return
    child = _statuses.get(status)
    if child is None:
        child = _statuses[status] = HTTP_RESPONSES.labels(str(status))
    child.inc()


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
        count = _requests[key] = REQUESTS.labels(service, model, provider, str(status))
    count.inc()
    timing_key = (service, provider)
    timings = _timings.get(timing_key)
    if timings is None:
        timings = _timings[timing_key] = (
            OVERHEAD.labels(service, provider),
            PROVIDER_CALL.labels(service, provider),
        )
    if provider_seconds is None:
        timings[0].observe(total)
    else:
        timings[1].observe(provider_seconds)
        timings[0].observe(max(0.0, total - provider_seconds))


def first_token(service: str, provider: str, seconds: float) -> None:
    if not ENABLED:
        return
    key = (service, provider or NONE)
    child = _first_tokens.get(key)
    if child is None:
        child = _first_tokens[key] = FIRST_TOKEN.labels(*key)
    child.observe(seconds)


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
            CREDITS.labels(license, service),
            TOKENS.labels(license, service, "prompt"),
            TOKENS.labels(license, service, "completion"),
        )
    if credits:
        counters[0].inc(credits)
    if prompt_tokens:
        counters[1].inc(prompt_tokens)
    if completion_tokens:
        counters[2].inc(completion_tokens)


def budget_remaining(license_id: int, remaining: int) -> None:
    if not ENABLED:
        return
    child = _budgets.get(license_id)
    if child is None:
        child = _budgets[license_id] = BUDGET_REMAINING.labels(str(license_id))
    child.set(remaining)


def upstream_error(provider: str, kind: str) -> None:
    if ENABLED:
        UPSTREAM_ERRORS.labels(provider or NONE, kind).inc()


_attempts: dict[tuple[str, str, str], Counter] = {}


def upstream_attempt(provider: str, connection: str, result: str) -> None:
    if not ENABLED:
        return
    key = (provider, connection, result)
    child = _attempts.get(key)
    if child is None:
        child = _attempts[key] = UPSTREAM_ATTEMPTS.labels(provider, connection, result)
    child.inc()


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
