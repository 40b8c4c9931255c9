"""OpenTelemetry tracing, once per serving process, when OTEL_EXPORTER_OTLP_ENDPOINT is set.

gateway_site.asgi calls `setup_from_environment()` in every process that loads the application
(each `--workers` process imports it on its own, after the spawn), after django.setup and before
the handler builds its middleware chain and before any database connection is opened. Without
the variable nothing is imported: opentelemetry stays out of the process.

What it installs: a TracerProvider (service name `OTEL_SERVICE_NAME`, default
`inference-gateway`; the sampler from `OTEL_TRACES_SAMPLER`/`_ARG`, read by the SDK) exporting
through a BatchSpanProcessor (a background thread: a request never waits for the collector,
and an unreachable one costs a logged warning) to the OTLP/HTTP exporter, which reads the
standard `OTEL_EXPORTER_OTLP_*` variables; the Django and psycopg instrumentations; and
core.tracing's switch, which the provider-call spans and the HTTP client spans check.
"""

from __future__ import annotations

import logging

from core import tracing
from core.config import get_config

logger = logging.getLogger("gateway")


def tracing_configured() -> bool:
    return get_config().tracing_configured


def setup_from_environment() -> bool:
    """Tracing on, exporting over OTLP/HTTP, if the endpoint is set; whether it is on."""
    if tracing.ENABLED:
        return True
    if not tracing_configured():
        return False
    try:
        install(_exporting_provider())
    except Exception:  # a broken tracing set-up must not stop the gateway
        logger.exception("tracing not set up")
        return False
    return True


def _exporting_provider():
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = get_config().OTEL_SERVICE_NAME.strip()
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def install(tracer_provider) -> None:
    """The instrumentations and the gateway's own spans, on `tracer_provider` (the tests pass
    one with an in-memory exporter)."""
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    from .tracing_django import AsyncDjangoInstrumentor

    AsyncDjangoInstrumentor().instrument(tracer_provider=tracer_provider)
    PsycopgInstrumentor().instrument(tracer_provider=tracer_provider)
    tracing.enable(tracer_provider)


def uninstall() -> None:
    """The reverse of `install` (tests): middleware chains, connections and clients made from
    now on are untraced."""
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    from .tracing_django import AsyncDjangoInstrumentor

    tracing.disable()
    PsycopgInstrumentor().uninstrument()
    AsyncDjangoInstrumentor().uninstrument()
