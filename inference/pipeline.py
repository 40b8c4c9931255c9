"""The order of checks of every provider-backed endpoint, in one place (spec: Errors).

 1. credentials (malformed header / unknown key: 401)   -- inference.api.BearerAuth
 2. body validation (422)                               -- django-ninja, before the view
 3. missing Authorization header (401)
 4. X-Service-Provider / X-Service-Metadata (400)
 5. budget (400 out of budget, 500 misconfigured)
 6. policy (403; 503 when the document cannot be evaluated)
 7. provider selection (400)
 8. input guardrail (400, not charged; a failed moderation call is 503)
 9. provider call (400, 404, 500, 503)
10. output guardrail (400, charged; a failed moderation call is 503, not charged)
Every request that reaches step 9 writes one ledger row, charged or not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from django.http import HttpResponse, StreamingHttpResponse

from catalog.routing import Route, cached_catalog, load_catalog_snapshot, select_route
from core.errors import AUTH_REQUIRED, AuthenticationFailed, GatewayError, ServiceUnavailable
from gateway_site.db import run_db
from licensing.budget import BudgetState, budget_check_async
from licensing.credentials import Principal
from licensing.group_commit import ledger_write
from licensing.ledger import LedgerEntry

from . import moderation
from .billing import Usage
from .headers import parse_service_headers
from .streaming import ProviderStream, StreamOutcome, relay

logger = logging.getLogger("gateway")


@dataclass
class ProviderResult:
    """What an endpoint's provider call produced, before credits are added."""

    body: dict
    billed_model: str
    usage: Usage = field(default_factory=Usage)
    credits: int = 0
    output_texts: Iterable[str] = ()


@dataclass
class Call:
    """One request travelling through the pipeline."""

    request: Any
    request_id: str
    principal: Principal
    body: Any
    body_fields: dict
    metadata: dict
    budget: BudgetState | None = None
    route: Route | None = None


class Operation:
    """An endpoint's part: its names, its texts for guardrails, its provider call, its answer."""

    endpoint: ClassVar[str]  # internal endpoint name (messages, routing)
    service: ClassVar[str]  # policy service name
    output_modality: ClassVar[str | None] = None

    def model_of(self, body) -> str:
        return body.model

    def input_texts(self, body) -> Iterable[str]:
        return ()

    def select(self, catalog, pin, allowed, body) -> Route:
        """Step 7: the provider, connection and upstream model for this request."""
        return select_route(
            catalog,
            endpoint=self.endpoint,
            model=self.model_of(body),
            pin=pin,
            allowed=allowed,
            output_modality=self.output_modality,
        )

    def prepare(self, route: Route, body) -> Route | None:
        """Part of step 7: reject what the chosen provider cannot take, before any call; may
        return a refined route (e.g. another connection of the same provider)."""

    async def call(self, route: Route, body, call: Call) -> ProviderResult | ProviderStream:
        raise NotImplementedError

    def stream_result(self, route: Route, body, usage: Usage) -> ProviderResult:
        """What a finished stream is billed as."""
        raise NotImplementedError

    def render(self, result: ProviderResult, remaining: int | None) -> HttpResponse:
        raise NotImplementedError


def require_principal(request) -> Principal:
    """Check 3, for every authenticated endpoint."""
    principal = getattr(request, "principal", None)
    if principal is None:
        raise AuthenticationFailed(AUTH_REQUIRED)
    return principal


async def current_catalog():
    """The cached catalog snapshot; the database is read (on a worker thread) only on a miss."""
    cached = cached_catalog()
    return cached if cached is not None else await run_db(load_catalog_snapshot)


async def run(request, operation: Operation, body) -> HttpResponse:
    principal = require_principal(request)  # 3
    pin, metadata = parse_service_headers(request)  # 4
    license = principal.license
    call = Call(
        request=request,
        request_id=request.request_id,
        principal=principal,
        body=body,
        body_fields=body.model_dump(exclude_unset=True),
        metadata=metadata,
    )
    # 5: an unlimited budget needs no read before the call.
    call.budget = await budget_check_async(
        license_id=license.id, config=license.budget, holder=principal.holder
    )
    # 6
    if license.policy is None:
        raise ServiceUnavailable()
    service_policy = license.policy.check_request(operation.service, call.body_fields)
    # 7
    catalog = await current_catalog()
    call.route = route = operation.select(catalog, pin, service_policy.providers, body)
    call.route = route = operation.prepare(route, body) or route
    # 8
    guardrails = license.guardrails
    if guardrails is None:
        raise ServiceUnavailable()
    input_texts = list(operation.input_texts(body))
    guardrails.check("input", input_texts)
    if guardrails.moderates("input"):
        await moderation.check(catalog, input_texts)  # 400 flagged, 503 when it fails
    # 9
    try:
        result = await operation.call(route, body, call)
    except GatewayError as exc:
        await _record(call, operation, status=exc.status)
        raise
    except asyncio.CancelledError:
        await _record(call, operation, status=499)  # client went away mid-call
        raise
    except Exception:
        await _record(call, operation, status=500)
        raise
    if isinstance(result, ProviderStream):
        return _stream_response(call, operation, result)  # output guardrails never block a stream
    # 10: a blocked answer is still charged.
    try:
        output_texts = list(result.output_texts)
        guardrails.check("output", output_texts)
        if guardrails.moderates("output"):
            await moderation.check(catalog, output_texts)
    except ServiceUnavailable:
        # The moderation call failed: closed, and the answer is not charged.
        await _record(call, operation, status=503, result=replace(result, credits=0))
        raise
    except GatewayError as exc:
        await _record(call, operation, status=exc.status, result=result)
        raise
    remaining = await _record(call, operation, status=200, result=result)
    return operation.render(result, remaining)


_background: set[asyncio.Task] = set()


def _stream_response(call: Call, operation: Operation, stream: ProviderStream):
    def finished(outcome: StreamOutcome) -> None:
        result = None
        # 499: a client that left pays for what the provider produced (README, Decisions).
        if outcome.status in (200, 499) and outcome.usage is not None:
            result = operation.stream_result(call.route, call.body, outcome.usage)
        elif outcome.status == 200:
            logger.warning("stream %s ended without usage; recorded at zero cost", call.request_id)
        # Runs from the generator's cleanup, possibly while its task is being cancelled: the
        # ledger write gets a task of its own.
        task = asyncio.get_running_loop().create_task(
            _record(call, operation, status=outcome.status, result=result)
        )
        _background.add(task)
        task.add_done_callback(_background.discard)

    response = StreamingHttpResponse(relay(stream, finished), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _record(
    call: Call, operation: Operation, *, status: int, result: ProviderResult | None = None
) -> int | None:
    route = call.route
    usage = result.usage if result else Usage()
    entry = LedgerEntry(
        request_id=call.request_id,
        license_id=call.principal.license.id,
        api_key_id=call.principal.api_key_id,
        end_user_id=call.principal.end_user_id,
        service=operation.service,
        requested_model=operation.model_of(call.body),
        billed_model=result.billed_model if result else "",
        provider=route.provider.slug,
        connection=route.connection.name,
        status_code=status,
        credits=result.credits if result else 0,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        images=usage.images,
        megapixels=usage.megapixels,
        units=usage.units,
        metadata=call.metadata,
        latency_ms=int((time.perf_counter() - call.request.started_at) * 1000),
    )
    return await ledger_write(entry=entry, budget=call.budget)
