"""GET /metrics: what known requests leave in the Prometheus exposition (counts, credits equal to
the ledger's, histograms, in-flight, refusals, upstream errors), who may scrape it, the sum over
two worker processes, and that no label value holds a key or a prompt."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from django.db.models import Sum
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from gateway_site.metrics import address_allowed, allowed, parse_networks
from licensing.models import Transaction
from tests.conftest import UPSTREAM_KEY
from tests.kit import wait_for_ledger
from tests.processes import running_workers

SMALL = "text-embedding-3-small"
MINI = "gpt-4o-mini"
HELLO = [{"role": "user", "content": "hello"}]


def scrape(base_url: str, headers: dict | None = None) -> dict:
    response = httpx.get(base_url + "/metrics", headers=headers or {}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: dict, name: str, **labels) -> float:
    """The sum of `name` over every series whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and wanted <= lbl)


def delta(before: dict, after: dict, name: str, **labels) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def wait_for_rows(count: int, timeout: float = 5.0) -> None:
    wait_for_ledger(count, timeout)
    assert Transaction.objects.count() == count


def in_flight_settles(base_url: str, timeout: float = 5.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = total(scrape(base_url), "gateway_requests_in_flight")
        if value == 0 or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_known_requests_are_counted(gateway, sdk, catalog, license, auth):
    before = scrape(gateway.url)
    sdk.embeddings.create(model=SMALL, input="one two three", encoding_format="float")
    sdk.embeddings.create(model=SMALL, input="four five", encoding_format="float")
    chunks = list(sdk.chat.completions.create(model=MINI, messages=HELLO, stream=True))
    assert chunks
    pinned = httpx.post(  # refused after the caller is known: a ledger row, 0 credits
        gateway.url + "/v1/embeddings",
        headers={**auth, "X-Service-Provider": "cloud"},
        json={"model": SMALL, "input": "x"},
    )
    unknown = httpx.post(
        gateway.url + "/v1/embeddings",
        headers={"Authorization": "Bearer sk-svc-unknown"},
        json={"model": SMALL, "input": "x"},
    )
    assert (pinned.status_code, unknown.status_code) == (400, 401)
    wait_for_rows(4)
    assert in_flight_settles(gateway.url) == 0
    after = scrape(gateway.url)

    def requests(**labels):
        return delta(before, after, "gateway_requests_total", **labels)

    ok = {"service": "embeddings", "model": SMALL, "provider": "direct", "status": "200"}
    assert requests(**ok) == 2
    assert requests(service="chat_completions", model=MINI, provider="direct", status="200") == 1
    assert requests(service="embeddings", model=SMALL, provider="none", status="400") == 1
    assert requests() == 4
    responses = "gateway_http_responses_total"
    assert delta(before, after, responses, status="401") == 1
    assert delta(before, after, responses, status="200") == 3

    # Histograms: every ledgered request's overhead, every provider call, the stream's TTFB.
    embeddings = {"service": "embeddings", "provider": "direct"}
    assert delta(before, after, "gateway_overhead_seconds_count", **embeddings) == 2
    assert delta(before, after, "gateway_provider_call_seconds_count", **embeddings) == 2
    assert delta(before, after, "gateway_provider_call_seconds_sum", **embeddings) > 0
    refused = {"service": "embeddings", "provider": "none"}
    assert delta(before, after, "gateway_overhead_seconds_count", **refused) == 1
    assert delta(before, after, "gateway_provider_call_seconds_count", **refused) == 0
    chat = {"service": "chat_completions", "provider": "direct"}
    assert delta(before, after, "gateway_stream_first_token_seconds_count", **chat) == 1
    assert delta(before, after, "gateway_provider_call_seconds_count", **chat) == 1
    le_inf = {**embeddings, "le": "+Inf"}
    assert delta(before, after, "gateway_overhead_seconds_bucket", **le_inf) == 2

    # Credits and tokens equal the ledger's.
    rows = Transaction.objects.filter(license=license)
    ledger = rows.aggregate(credits=Sum("credits"), prompt=Sum("prompt_tokens"))
    lic = str(license.id)
    assert ledger["credits"] > 0
    assert (
        delta(before, after, "gateway_charged_microcredits_total", license=lic)
        == (ledger["credits"])
    )
    assert (
        delta(before, after, "gateway_tokens_total", license=lic, kind="prompt")
        == (ledger["prompt"])
    )
    embedding_credits = rows.filter(service="embeddings").aggregate(c=Sum("credits"))["c"]
    assert (
        delta(
            before, after, "gateway_charged_microcredits_total", license=lic, service="embeddings"
        )
        == embedding_credits
    )


def test_refusals_and_upstream_errors_are_counted(gateway, sdk, catalog, license, auth):
    before = scrape(gateway.url)
    catalog["direct"].fail_next(503)
    with pytest.raises(openai.InternalServerError):
        sdk.embeddings.create(model=SMALL, input="x", encoding_format="float")
    # A model the catalog does not list is forwarded; the provider does not know it either.
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="no-such-model", input="x", encoding_format="float")
    pinned = httpx.post(
        gateway.url + "/v1/embeddings",
        headers={**auth, "X-Service-Provider": "cloud"},
        json={"model": "no-such-model", "input": "x"},
    )
    assert pinned.status_code == 400
    wait_for_rows(3)
    after = scrape(gateway.url)
    errors = "gateway_upstream_errors_total"
    assert delta(before, after, errors, provider="direct", kind="status_5xx") == 1
    assert delta(before, after, errors, provider="direct", kind="status_4xx") == 1
    assert delta(before, after, errors) == 2  # the refusal never reached a provider
    failed = {"service": "embeddings", "model": SMALL, "provider": "direct", "status": "503"}
    assert delta(before, after, "gateway_requests_total", **failed) == 1
    unknown = {"service": "embeddings", "model": "other", "provider": "direct", "status": "404"}
    assert delta(before, after, "gateway_requests_total", **unknown) == 1
    refused = {"service": "embeddings", "model": "other", "provider": "none", "status": "400"}
    assert delta(before, after, "gateway_requests_total", **refused) == 1


def test_a_failover_is_counted(gateway, sdk, catalog, license):
    """`direct/default` answers 429 with Retry-After: the attempt is counted with its reason,
    the failover to the standby `direct/b` too, and the circuit gauge shows `default` open; the
    next request skips `default` without calling it (no new failover)."""
    from catalog.services import connection_configure
    from core.localcache import clear_all

    connection_configure(
        provider_slug="direct",
        name="b",
        base_url=catalog["direct"].base_url,
        api_key=UPSTREAM_KEY,
        weight=0,  # standby: only failover reaches it
    )
    clear_all()
    before = scrape(gateway.url)
    catalog["direct"].fail_next(429, headers={"Retry-After": "30"})
    sdk.chat.completions.create(model=MINI, messages=HELLO)
    sdk.chat.completions.create(model=MINI, messages=HELLO)
    wait_for_rows(2)
    after = scrape(gateway.url)

    attempts = "gateway_upstream_attempts_total"
    default, b = (
        {"provider": "direct", "connection": "default"},
        {"provider": "direct", "connection": "b"},
    )
    assert delta(before, after, attempts, **default, result="status_4xx") == 1
    assert delta(before, after, attempts, **default) == 1  # the open circuit spared it a call
    assert delta(before, after, attempts, **b, result="ok") == 2
    failovers = "gateway_failovers_total"
    assert delta(before, after, failovers, **default, reason="status_4xx") == 1
    assert delta(before, after, failovers) == 1
    assert total(after, "gateway_circuit_state", **default) == 2  # open
    first, second = Transaction.objects.order_by("created_at", "id")
    assert (first.connection, first.attempts, first.failovers) == (
        "b",
        2,
        "direct/default: status_4xx",
    )
    assert (second.connection, second.attempts, second.failovers) == ("b", 1, "")


def test_pooled_budget_remaining_is_the_wallets(gateway, catalog, make_license, make_key):
    license = make_license(name="limited", limit=10**6, period="daily")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key(license), max_retries=0)
    client.embeddings.create(model=SMALL, input="one two three", encoding_format="float")
    wait_for_rows(1)
    spent = Transaction.objects.get().credits
    samples = scrape(gateway.url)
    remaining = total(samples, "gateway_budget_remaining_microcredits", license=str(license.id))
    assert spent > 0 and remaining == 10**6 - spent


def test_no_label_holds_a_key_or_a_prompt(gateway, sdk, catalog, api_key):
    prompt = "my secret essay about photosynthesis"
    sdk.embeddings.create(model=SMALL, input=prompt, encoding_format="float")
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model=f"{prompt} {api_key}", input=prompt, encoding_format="float")
    wait_for_rows(2)
    text = httpx.get(gateway.url + "/metrics").text
    assert prompt not in text and api_key not in text and "photosynthesis" not in text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for value in sample.labels.values():
                assert "sk-" not in value and len(value) < 64, (sample.name, value)


# --- access -----------------------------------------------------------------------------------


def test_address_check():
    default = parse_networks("127.0.0.0/8,::1/128")
    assert address_allowed("127.0.0.1", default) and address_allowed("127.8.9.10", default)
    assert address_allowed("::1", default) and address_allowed("::ffff:127.0.0.1", default)
    for outside in ("192.0.2.7", "10.0.0.1", "::2", "", None, "not-an-address", "localhost"):
        assert not address_allowed(outside, default), outside
    office = parse_networks("10.20.0.0/16, 2001:db8::/32")
    assert address_allowed("10.20.3.4", office) and address_allowed("2001:db8::5", office)
    assert not address_allowed("10.21.0.1", office) and not address_allowed("127.0.0.1", office)


def test_scope_check_reads_the_scope_client_and_the_token():
    scope = {
        "client": ("203.0.113.9", 50000),
        "headers": [(b"x-forwarded-for", b"127.0.0.1"), (b"authorization", b"Bearer nope")],
    }
    loopback = {"client": ("127.0.0.1", 50000), "headers": []}
    with override_settings(GATEWAY_METRICS_ALLOW="127.0.0.0/8", GATEWAY_METRICS_TOKEN=""):
        assert not allowed(scope) and allowed(loopback)
    with override_settings(GATEWAY_METRICS_ALLOW="127.0.0.0/8", GATEWAY_METRICS_TOKEN="s3cret"):
        assert not allowed(scope)
        good = {**scope, "headers": [(b"authorization", b"Bearer s3cret")]}
        assert allowed(good)
        assert not allowed({**scope, "client": None})


def test_token_from_a_disallowed_address(gateway, catalog):
    unknown_path = httpx.get(gateway.url + "/metricz")
    with override_settings(GATEWAY_METRICS_ALLOW="192.0.2.0/24", GATEWAY_METRICS_TOKEN="s3cret"):
        bare = httpx.get(gateway.url + "/metrics")
        wrong = httpx.get(gateway.url + "/metrics", headers={"Authorization": "Bearer s3cre"})
        other = httpx.get(gateway.url + "/metrics", headers={"Authorization": "Basic s3cret"})
        forwarded = httpx.get(gateway.url + "/metrics", headers={"X-Forwarded-For": "10.1.1.1"})
        # uvicorn trusts X-Forwarded-For from its --forwarded-allow-ips (default 127.0.0.1):
        # the proxy's client is the one checked.
        proxied = httpx.get(gateway.url + "/metrics", headers={"X-Forwarded-For": "192.0.2.1"})
        right = httpx.get(gateway.url + "/metrics", headers={"Authorization": "Bearer s3cret"})
    for refused in (bare, wrong, other, forwarded):
        # Exactly what any unknown path gets: nothing tells that /metrics exists.
        assert refused.status_code == 404
        assert refused.content == unknown_path.content
        assert refused.headers["content-type"] == unknown_path.headers["content-type"]
    assert right.status_code == 200 and "gateway_requests_in_flight" in right.text
    assert proxied.status_code == 200
    # A local proxy's outside client is not loopback, although the proxy itself is.
    outside = httpx.get(gateway.url + "/metrics", headers={"X-Forwarded-For": "203.0.113.5"})
    assert outside.status_code == 404
    assert httpx.post(gateway.url + "/metrics").status_code == 404


# --- several worker processes -----------------------------------------------------------------


@pytest.fixture
def two_workers(transactional_db, catalog, tmp_path):
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
        "GATEWAY_INVALIDATION_FILE": str(tmp_path / "cache-generation"),
        "GATEWAY_LEDGER_SPOOL_DIR": str(tmp_path / "spool"),
    }
    # The first worker keeps its metrics in memory until it stops (or renders a scrape); the
    # second writes them every 0.2 s.
    flush = ("3600", "0.2")
    with running_workers(
        2, tmp_path, lambda n: {**env, "GATEWAY_METRICS_FLUSH_SECONDS": flush[n]}
    ) as workers:
        yield workers


def scraped_until(worker, name: str, value: float, timeout: float = 10.0) -> dict:
    """The worker's scrape once `name` sums to `value` (other workers write within their
    flush interval), or the last one after the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(worker.url)
        if total(samples, name) == value or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)


@pytest.mark.slow
def test_workers_are_summed_and_a_stopping_worker_writes_what_it_holds(
    two_workers, license, make_key, tmp_path
):
    key = make_key(license)
    holding, writing = two_workers

    def embed(worker, count: int) -> None:
        client = openai.OpenAI(base_url=worker.url + "/v1", api_key=key, max_retries=0)
        for _ in range(count):
            client.embeddings.create(model=SMALL, input="hello", encoding_format="float")

    def summed(samples: dict, requests: int) -> None:
        ok = {"service": "embeddings", "model": SMALL, "provider": "direct", "status": "200"}
        assert total(samples, "gateway_requests_total", **ok) == requests
        assert total(samples, "gateway_overhead_seconds_count") == requests
        assert total(samples, "gateway_requests_in_flight") == 0
        assert total(samples, "gateway_ledger_spool_entries") == 0
        credits = Transaction.objects.aggregate(c=Sum("credits"))["c"]
        assert total(samples, "gateway_charged_microcredits_total") == credits

    embed(holding, 1)
    embed(writing, 2)
    wait_for_rows(3)
    # A scrape writes its own worker's values first, and reads what the others wrote: not yet
    # what the first worker holds in memory.
    assert total(scrape(writing.url), "gateway_requests_total") == 2
    # Either worker answers with the sum of both, once written.
    summed(scraped_until(holding, "gateway_requests_total", 3), 3)
    summed(scraped_until(writing, "gateway_requests_total", 3), 3)
    # A worker that stops writes what it holds (its lifespan's shutdown, and at exit).
    embed(holding, 1)
    wait_for_rows(4)
    assert total(scrape(writing.url), "gateway_requests_total") == 3
    holding.stop()
    summed(scrape(writing.url), 4)
    files = sorted(p.name for p in (tmp_path / "prometheus").iterdir())
    pids = {str(w.proc.pid) for w in two_workers}
    assert {name.rsplit("_", 1)[1].removesuffix(".db") for name in files} >= pids


def test_every_metric_is_documented():
    """docs/metrics.md's table names every metric core.metrics defines (counters with their
    `_total`), with its labels."""
    from pathlib import Path

    from prometheus_client import Counter, Gauge, Histogram

    from core import metrics

    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    rows = {}
    for line in docs.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`gateway_"):
            rows[cells[0].strip("`")] = {
                label.strip() for label in cells[2].split(",") if label.strip()
            }
    defined = {}
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            name = value._name + ("_total" if isinstance(value, Counter) else "")
            defined[name] = set(value._labelnames)
    assert defined, "no metric found in core.metrics"
    missing = {name for name in defined if name not in rows}
    assert not missing, f"metrics not in docs/metrics.md: {sorted(missing)}"
    for name, labels in defined.items():
        assert rows[name] == labels, name


def test_scrape_time_gauges_are_registered_by_their_app():
    """gateway_site.metrics imports no app: the ledger registers its spool gauges in
    core.metrics at start-up (licensing's ready()), each one documented, and a gauge whose read
    fails with OSError shows NaN rather than failing the scrape."""
    import ast
    import math
    from pathlib import Path

    from core import metrics
    from gateway_site import metrics as endpoint

    tree = ast.parse(Path(endpoint.__file__).read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    apps = {"catalog", "licensing", "inference"}
    assert not {name for name in imported if name.split(".")[0] in apps}, imported

    names = [name for name, _, _ in metrics.gauge_sources()]
    assert names[:2] == ["gateway_ledger_spool_entries", "gateway_ledger_spool_rejected_entries"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert all(f"| `{name}` |" in docs for name in names), names

    def unreadable() -> float:
        raise OSError("no spool directory")

    metrics.register_gauge_source("gateway_test_unreadable", "A read that fails.", unreadable)
    try:
        values = {f.name: f.samples[0].value for f in endpoint.ScrapeTimeCollector().collect()}
    finally:
        metrics._scrape_gauges.pop("gateway_test_unreadable")
    assert math.isnan(values["gateway_test_unreadable"])
    assert values["gateway_ledger_spool_entries"] >= 0
