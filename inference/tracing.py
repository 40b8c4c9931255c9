"""One span per provider call, with the OpenTelemetry GenAI semantic conventions
(docs/tracing.md). Called by the pipeline only when core.tracing.ENABLED; opentelemetry is imported
here lazily, so that a process without tracing never loads it.

The span is current during the call, so the HTTP client span of the call is its child. A stream's
span ends with the stream (its usage comes from the usage event). Never recorded: prompts,
answers, keys, user names, the request's metadata.
"""

from __future__ import annotations

import logging

from catalog.registry import PROVIDER_KINDS, SERVICES
from core import tracing

logger = logging.getLogger("gateway")

# gen_ai.operation.name by the gateway's service and gen_ai.provider.name by the provider's
# wire protocol (catalog kind): declared in catalog.registry.
OPERATIONS = {s.service: s.telemetry_operation for s in SERVICES}
PROVIDER_NAMES = {k.kind: k.telemetry_name for k in PROVIDER_KINDS.values()}


def start(call, operation):
    """The call's span, started and made current; returns (span, context token)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    route = call.route
    name = OPERATIONS.get(operation.service, operation.service)
    attributes = {
        "gen_ai.operation.name": name,
        "gen_ai.provider.name": PROVIDER_NAMES.get(route.provider.kind, route.provider.kind),
        "gen_ai.request.model": route.upstream_model,
        "gateway.request_id": call.request_id,
        "gateway.service": operation.service,
        "gateway.provider": route.provider.slug,
        "gateway.connection": route.connection.name,
    }
    target = route.upstream_model
    if name == "execute_tool":
        attributes["gen_ai.tool.name"] = target = operation.endpoint
    span = tracing.tracer().start_span(
        f"{name} {target}".strip(), kind=SpanKind.CLIENT, attributes=attributes
    )
    token = context.attach(trace.set_span_in_context(span))
    return span, token


def leave(token) -> None:
    """The span is no longer current (it may go on: a stream)."""
    from opentelemetry import context

    context.detach(token)


def finish(span, route, *, usage=None, response_model: str = "", status: int = 200, error=None):
    """Ends the span with what the call produced, or how it failed (`error`: error.type)."""
    try:
        _annotate(span, route, usage, response_model, status, error)
    except Exception:  # a trace is never worth a failed request
        logger.exception("provider span not annotated")
    span.end()


def _annotate(span, route, usage, response_model, status, error) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("gen_ai.response.model", response_model or route.upstream_model)
    span.set_attribute("gateway.status_code", status)
    if usage is not None:
        if usage.prompt_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        if usage.completion_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
    if error:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR))


def error_type(exc: BaseException) -> str:
    """error.type of a failed call: the kind gateway_upstream_errors_total counts it under
    (timeout, connection, status_4xx, status_5xx, malformed, unavailable), else the class."""
    kind = getattr(exc, "upstream_kind", None)
    return kind if isinstance(kind, str) else type(exc).__qualname__


def answer_model(body) -> str:
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else ""
