"""Whether this process traces, and the HTTP client instrumentation (docs/tracing.md).

gateway_site.tracing_setup turns tracing on once per process when OTEL_EXPORTER_OTLP_ENDPOINT is
set. Until then `ENABLED` is False and nothing here imports opentelemetry: the hot path checks
one module attribute and pays nothing else.

Provider calls go out on aiohttp's pool, directly or through httpx-aiohttp's transport, so the
aiohttp client instrumentation covers them (one client span per call); httpx's covers the
clients that run on httpcore (SigV4-signed Bedrock calls), which aiohttp never sees.
Instrumenting both on an aiohttp-backed httpx client would give each stream two client spans.
Client spans never carry a query string: search queries and OpenAlex's api_key travel in it.
"""

from __future__ import annotations

from typing import Any

ENABLED = False
_tracer_provider: Any = None
_tracer: Any = None


def enable(tracer_provider) -> None:
    global ENABLED, _tracer_provider, _tracer
    _tracer_provider = tracer_provider
    _tracer = tracer_provider.get_tracer("inference-gateway")
    ENABLED = True


def disable() -> None:
    global ENABLED, _tracer_provider, _tracer
    ENABLED, _tracer_provider, _tracer = False, None, None


def tracer():
    return _tracer


def aiohttp_trace_configs() -> list:
    """For a new aiohttp session: the client instrumentation's trace config, when tracing."""
    if not ENABLED:
        return []
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    def without_query(url) -> str:
        return str(url.with_query(None))

    return [create_trace_config(url_filter=without_query, tracer_provider=_tracer_provider)]


def instrument_httpx(client) -> None:
    """A new httpx client on httpcore gets client spans, when tracing."""
    if not ENABLED:
        return
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    async def request_hook(span, request) -> None:
        _strip_query(span)

    HTTPXClientInstrumentor.instrument_client(
        client, tracer_provider=_tracer_provider, request_hook=request_hook
    )


_URL_ATTRIBUTES = ("http.url", "url.full")


def _strip_query(span) -> None:
    attributes = getattr(span, "attributes", None)
    if not span.is_recording() or not attributes:
        return
    for key in _URL_ATTRIBUTES:
        url = attributes.get(key)
        if isinstance(url, str) and "?" in url:
            span.set_attribute(key, url.split("?", 1)[0])
    if "url.query" in attributes:
        span.set_attribute("url.query", "")
