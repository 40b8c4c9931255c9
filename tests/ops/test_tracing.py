"""OpenTelemetry tracing (README, "Tracing"): the provider-call span with the GenAI attributes
for chat, streamed chat, embeddings and a failed call, in one trace with the Django server span,
the HTTP client span and (PostgreSQL) the psycopg spans; nothing set up or imported without
OTEL_EXPORTER_OTLP_ENDPOINT; a worker process exporting over OTLP/HTTP to a collector, and a
collector that is down costing no request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
from django.db import connection
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.conftest import LiveGateway
from tests.kit import drain_background_writes, wait_until
from tests.processes import ROOT, database_url, free_port, running_workers

MINI = "gpt-4o-mini"
SMALL = "text-embedding-3-small"
TITAN = "amazon.titan-embed-text-v2:0"
HELLO = [{"role": "user", "content": "a secret prompt"}]


@pytest.fixture(scope="module")
def traced(live_gateway):
    """A gateway of its own, built after tracing was installed with an in-memory exporter.
    (The session's gateway closes the ORM threads' connections at the end of the run.)"""
    from django.conf import settings

    from gateway_site import tracing_setup
    from gateway_site.bodylimit import BodyLimit
    from gateway_site.handler import GatewayASGIHandler

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing_setup.install(provider)
    try:
        app = BodyLimit(GatewayASGIHandler(), max_bytes=settings.GATEWAY_MAX_BODY_BYTES)
        live = LiveGateway(app)
        live.start()
        try:
            yield live, exporter
        finally:
            close_pool(live)
            live.stop()
    finally:
        tracing_setup.uninstall()


def close_pool(live: LiveGateway) -> None:
    """This server's own PostgreSQL pool (its loop's), so the test database can be dropped;
    the session's gateway keeps its connections."""
    import asyncio

    from core import pgpool

    if live.loop is not None and live.loop.is_running():
        asyncio.run_coroutine_threadsafe(pgpool.close_all(), live.loop).result(timeout=10)


@pytest.fixture
def spans(traced, catalog):
    live, exporter = traced
    exporter.clear()
    yield exporter
    drain_background_writes()  # a stream's row lands after its last byte


@pytest.fixture
def sdk(traced, api_key):
    live, _ = traced
    return openai.OpenAI(base_url=live.url + "/v1", api_key=api_key, max_retries=0)


def provider_span(exporter, timeout: float = 5.0):
    """The one provider-call span (a stream's ends just after its last event)."""

    def provider_spans():
        return [s for s in exporter.get_finished_spans() if "gen_ai.operation.name" in s.attributes]

    found = wait_until(
        provider_spans,
        timeout=timeout,
        what=lambda: [s.name for s in exporter.get_finished_spans()],
    )
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def same_trace(exporter, span):
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == span.context.trace_id]


def http_clients(spans: list, provider) -> list:
    """The HTTP client spans among `spans` (psycopg's are CLIENT spans too)."""
    return [
        s
        for s in spans
        if s.kind == SpanKind.CLIENT and s is not provider and "http.method" in s.attributes
    ]


def assert_no_secrets(exporter, *secrets: str) -> None:
    for span in exporter.get_finished_spans():
        text = json.dumps(dict(span.attributes), default=str) + span.name
        for secret in secrets:
            assert secret not in text, (span.name, secret)


def test_chat_completion_span(spans, sdk, api_key):
    answer = sdk.chat.completions.create(model=MINI, messages=HELLO)
    span = provider_span(spans)
    assert span.name == f"chat {MINI}"
    assert span.kind == SpanKind.CLIENT
    attributes = dict(span.attributes)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == MINI
    assert attributes["gen_ai.response.model"] == answer.model
    assert attributes["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
    assert len(attributes["gateway.request_id"]) == 32
    assert span.status.status_code == StatusCode.UNSET
    assert "error.type" not in attributes
    assert_no_secrets(spans, "a secret prompt", api_key, answer.choices[0].message.content)


def test_request_id_is_the_answer_header(spans, sdk):
    raw = sdk.chat.completions.with_raw_response.create(model=MINI, messages=HELLO)
    span = provider_span(spans)
    assert span.attributes["gateway.request_id"] == raw.headers["x-request-id"]


def test_one_trace_server_provider_and_client_spans(spans, sdk):
    sdk.chat.completions.create(model=MINI, messages=HELLO)
    span = provider_span(spans)
    trace = same_trace(spans, span)
    servers = [s for s in trace if s.kind == SpanKind.SERVER]
    assert len(servers) == 1
    assert servers[0].attributes.get("http.route") == "v1/chat/completions"
    assert span.parent.span_id == servers[0].context.span_id
    clients = http_clients(trace, span)
    assert len(clients) == 1  # aiohttp's: the call goes out on its pool
    assert clients[0].parent.span_id == span.context.span_id
    assert clients[0].attributes.get("http.status_code") == 200


def test_streamed_chat_span_takes_usage_from_the_stream(spans, sdk):
    chunks = list(
        sdk.chat.completions.create(
            model=MINI, messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    usage = chunks[-1].usage
    span = provider_span(spans)
    attributes = dict(span.attributes)
    assert span.name == f"chat {MINI}"
    assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert attributes["gen_ai.response.model"] == chunks[0].model
    assert span.status.status_code == StatusCode.UNSET
    # The span covers the stream: it ends after the upstream's client span (headers) did.
    trace = same_trace(spans, span)
    client = http_clients(trace, span)
    assert len(client) == 1 and client[0].parent.span_id == span.context.span_id
    assert span.end_time >= client[0].end_time
    assert "a secret prompt" not in json.dumps(dict(attributes))


def test_embeddings_span(spans, sdk):
    answer = sdk.embeddings.create(model=SMALL, input="one two three", encoding_format="float")
    span = provider_span(spans)
    assert span.name == f"embeddings {SMALL}"
    assert span.attributes["gen_ai.operation.name"] == "embeddings"
    assert span.attributes["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
    assert "gen_ai.usage.output_tokens" not in span.attributes
    assert span.attributes["gen_ai.response.model"] == answer.model


def test_failed_provider_call(spans, sdk, catalog):
    catalog["direct"].fail_next(status=500)
    with pytest.raises(openai.InternalServerError) as raised:
        sdk.chat.completions.create(  # pinned: no failover to the aggregator's row
            model=MINI, messages=HELLO, extra_headers={"X-Service-Provider": "direct"}
        )
    assert raised.value.status_code == 503
    span = provider_span(spans)
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "status_5xx"
    assert span.attributes["gateway.status_code"] == 503
    assert "gen_ai.usage.input_tokens" not in span.attributes


def test_httpx_client_span_on_httpcore(traced, all_upstreams, api_key):
    """Bedrock's SigV4 calls go out on httpx over httpcore: httpx's instrumentation."""
    live, exporter = traced
    exporter.clear()
    response = httpx.post(
        live.url + "/v1/bedrock/embeddings",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"model": TITAN, "inputText": "hello world"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    span = provider_span(exporter)
    assert span.attributes["gen_ai.provider.name"] == "aws.bedrock"
    assert span.attributes["gen_ai.operation.name"] == "embeddings"
    assert span.attributes["gen_ai.usage.input_tokens"] == 2
    children = http_clients(exporter.get_finished_spans(), span)
    assert [s.parent.span_id for s in children] == [span.context.span_id]
    assert [s.instrumentation_scope.name for s in children] == [
        "opentelemetry.instrumentation.httpx"
    ]


def test_client_spans_carry_no_query_string(traced, search_upstreams, api_key):
    """Search queries (and OpenAlex's key) travel in the query string: never in a span."""
    live, exporter = traced
    exporter.clear()
    response = httpx.post(
        live.url + "/v1/web-search",
        headers={"Authorization": f"Bearer {api_key}"},
        json={"query": "zebrafish quasicrystal"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    span = provider_span(exporter)
    assert span.name == "execute_tool web_search"
    assert span.attributes["gen_ai.tool.name"] == "web_search"
    assert_no_secrets(exporter, "zebrafish", "quasicrystal")


def test_psycopg_spans_in_the_trace(spans, sdk):
    if connection.vendor != "postgresql":
        pytest.skip("psycopg spans need PostgreSQL (this run is on SQLite)")
    sdk.chat.completions.create(model=MINI, messages=HELLO)
    span = provider_span(spans)
    trace = same_trace(spans, span)
    queries = [s for s in trace if s.attributes.get("db.system") == "postgresql"]
    assert queries, [s.name for s in trace]


OFF_SCRIPT = """
import asyncio, faulthandler, json, os, sys
faulthandler.dump_traceback_later(45, exit=True)  # a hang shows where, in the test's message
import httpx
from gateway_site.asgi import application
from core import tracing

async def main():
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        response = await client.post(
            "/v1/chat/completions",
            headers={"Authorization": "Bearer " + os.environ["TEST_KEY"]},
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
        )
    from core import pgpool
    from inference.providers import close_adapters
    await close_adapters()
    await pgpool.close_all()
    return response.status_code

status = asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(json.dumps({"status": status, "enabled": tracing.ENABLED, "loaded": loaded}))
"""


def test_without_the_endpoint_nothing_is_set_up_or_imported(catalog, api_key, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        DATABASE_URL=database_url(),
        TEST_KEY=api_key,
        GATEWAY_ACCESS_LOG_LEVEL="WARNING",
        # Its own spool: what other processes of the run left in var/ is not its to replay.
        GATEWAY_LEDGER_SPOOL_DIR=str(tmp_path / "spool"),
    )
    result = subprocess.run(
        [sys.executable, "-c", OFF_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"status": 200, "enabled": False, "loaded": []}


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def exported_span_names(received) -> set[str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    names = set()
    for path, content_type, body in received:
        assert path == "/v1/traces"
        assert content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            assert service["service.name"] == "inference-gateway"
            for scope in resource.scope_spans:
                names.update(span.name for span in scope.spans)
    return names


@pytest.mark.slow
def test_worker_exports_over_otlp_and_a_dead_collector_costs_nothing(
    collector, catalog, api_key, tmp_path
):
    dead = f"http://127.0.0.1:{free_port()}"
    endpoints = [f"http://127.0.0.1:{collector.server_port}", dead]

    def env(n):
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoints[n], "OTEL_BSP_SCHEDULE_DELAY": "200"}

    body = {"model": MINI, "messages": HELLO}
    headers = {"Authorization": f"Bearer {api_key}"}
    with running_workers(2, tmp_path, env=env) as workers:
        for worker in workers:
            for _ in range(2):
                response = worker.http.post("/v1/chat/completions", json=body, headers=headers)
                assert response.status_code == 200, response.text
        wait_until(
            lambda: f"chat {MINI}" in exported_span_names(Collector.received),
            every=0.1,
            what=lambda: exported_span_names(Collector.received),
        )
    names = exported_span_names(Collector.received)
    assert "POST v1/chat/completions" in names
