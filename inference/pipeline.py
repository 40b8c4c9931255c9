"""The order of checks of every provider-backed endpoint, in one place (spec: Errors).

 1. credentials (malformed header / unknown key: 401)   -- inference.api.BearerAuth
 2. body validation (422)                               -- django-ninja, before the view
 3. missing Authorization header (401); a front-end key's person: its header names no one it
    may act for (401)                                   -- licensing.access.frontend
 4. X-Service-Provider / X-Service-Metadata (400)
    fair use (429 with Retry-After; only when the policy sets limits)
    a front-end key's course: its own, or the model's alias, or the person's only one (403)
 5. budget (400 out of budget, 500 misconfigured)
 6. policy: a course member's course rules, then the license type's document (403; 503)
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
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from django.http import HttpResponse, StreamingHttpResponse

from catalog.registry import SERVICE_BY_ENDPOINT
from catalog.routing import (
    Catalog,
    ConnectionMisconfigured,
    ProviderPin,
    Route,
    Routes,
    cached_catalog,
    load_catalog_snapshot,
    select_routes,
)
from core import clock, crashpoints, metrics, tracing
from core.db import run_db
from core.errors import (
    AUTH_REQUIRED,
    AuthenticationFailed,
    GatewayError,
    PolicyDenied,
    ServiceUnavailable,
)
from licensing.access import frontend
from licensing.access.credentials import FrontEndPrincipal, Principal
from licensing.courses import rules as course_rules
from licensing.courses.selectors import course_rules_async
from licensing.ledger import record
from licensing.ledger.actions import transaction_record
from licensing.ledger.budget import BudgetState, budget_check_async
from licensing.ledger.leases import release_held
from licensing.ledger.record import LedgerEntry
from licensing.ledger.reservations import Hold, hold_for
from licensing.ledger.spool import spool_refuses
from licensing.rules import fairuse
from licensing.rules.guardrails import Guardrails
from licensing.rules.policy import Policy

from . import moderation
from . import tracing as provider_span
from .billing import Usage, credits_for
from .failover import call_with_failover
from .headers import parse_service_headers
from .providers.base import ProviderFailure, scrub
from .streaming import ProviderStream, StreamOutcome, prime, relay

logger = logging.getLogger("gateway")


@dataclass
class ProviderResult:
    """What an endpoint's provider call produced, before credits are added."""

    body: dict
    billed_model: str
    usage: Usage = field(default_factory=Usage)
    credits: int = 0
    output_texts: Iterable[str] = ()
    upstream_id: str = ""  # the provider's id of its answer, for the ledger


Answer = ProviderResult | ProviderStream  # what one provider call gives


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
    route: Route | None = None  # the attempt under way, then the one that answered
    routes: Routes | None = None  # the attempts' order (catalog.routing)
    attempts: int = 0  # provider calls made
    failovers: list[str] = field(default_factory=list)  # "provider/connection: reason" each
    stage: dict[int, str] | None = None  # the step under way before the call (error codes)
    fair_use: fairuse.Window | None = None  # the fair-use counters, when the policy sets limits
    provider_started: float = 0.0  # perf_counter at the provider call (metrics)
    provider_seconds: float | None = None  # its duration (streams: until the end)
    span: Any = None  # a stream's provider-call span, ended with the stream (tracing)


class Operation:
    """An endpoint's part: its names, its texts for guardrails, its provider call, its answer.

    A concrete operation names its service's declaration in catalog.registry (which names the
    class back): `class Fetch(pipeline.Operation, endpoint="web_fetch")` takes the policy
    service name and the required output modality from there."""

    endpoint: ClassVar[str]  # internal endpoint name (messages, routing)
    service: ClassVar[str]  # policy service name (the ledger's and the metrics' too)
    output_modality: ClassVar[str | None] = None
    body: ClassVar[Any]  # the request model: the view's, and the policy's parameter names

    def __init_subclass__(cls, *, endpoint: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if endpoint is not None:
            declared = SERVICE_BY_ENDPOINT[endpoint]
            cls.endpoint = declared.endpoint
            cls.service = declared.service
            cls.output_modality = declared.output_modality

    def model_of(self, body) -> str:
        return body.model

    def input_texts(self, body) -> Iterable[str]:
        return ()

    def reserve_usage(self, body, fields: dict) -> Usage | None:
        """Step 5: what the request is sure to be billed on, known before the call (its input
        tokens, its images, its one search, its pages): its budget reservation, priced by the
        catalog. None: nothing is known (the budget is then only read)."""
        return None

    def select(self, catalog, pin, allowed, body, tags=frozenset()) -> Routes:
        """Step 7: the routes (provider, connection, upstream model) this request may take, in
        the order they are tried."""
        return select_routes(
            catalog,
            endpoint=self.endpoint,
            model=self.model_of(body),
            pin=pin,
            allowed=allowed,
            output_modality=self.output_modality,
            tags=tags,
        )

    def with_instructions(self, body, text: str):
        """`body` with a course's instructions put in (licensing.courses.instructions); as it is
        for an operation that takes none."""
        return body

    def check_policy(self, policy: Policy, body) -> None:
        """Start of step 7, after the service's own rules (step 6): what else of the policy the
        request needs, a 400 (a Responses request's hosted `web_search` tool needs the
        `web_search` service)."""

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


async def current_catalog() -> Catalog:
    """The cached catalog snapshot; the database is read (on a worker thread) only on a miss."""
    cached = cached_catalog()
    return cached if cached is not None else await run_db(load_catalog_snapshot)


async def run(request, operation: Operation, body) -> HttpResponse:
    principal = require_principal(request)  # 3
    # `type(...) is`: the cheapest test for every other key's request (half an isinstance).
    if type(principal) is FrontEndPrincipal:  # 3: whom it acts for (no other reads headers)
        principal = await frontend.acting_for(principal, request.headers)
    pin, metadata = parse_service_headers(request)  # 4
    call = Call(
        request=request,
        request_id=request.request_id,
        principal=principal,
        body=body,
        body_fields=body.model_dump(exclude_unset=True),
        metadata=metadata,
    )
    try:
        catalog, guardrails = await _admit(call, operation, pin)  # 5-8
    except GatewayError as exc:
        # The caller is known: the refusal is a ledger row (0 credits, no wallet), so that a
        # reviewer can answer "why was I refused" (docs/decisions/README.md, "Refusals are
        # ledger rows too").
        await _conclude(call, operation, status=exc.status, error=(call.stage, exc))
        await moderation.safeguarding_alert(call.principal, call.request_id, exc, "input")
        raise
    except BaseException:  # no ledger row will release the hold: the client left, or a bug
        await _release_hold(call)
        raise
    # 9
    try:
        result = await _timed_call(call, operation)
    except GatewayError as exc:
        _upstream_failed(call, exc)
        await _conclude(call, operation, status=exc.status, error=(_call_code(exc), exc))
        raise
    except asyncio.CancelledError:
        # The client went away mid-call.
        await _conclude(call, operation, status=499, error=(record.CLIENT_DISCONNECTED, None))
        raise
    except Exception as exc:
        await _conclude(call, operation, status=500, error=(record.INTERNAL_ERROR, exc))
        raise
    if isinstance(result, ProviderStream):
        return _stream_response(call, operation, result)  # output guardrails never block a stream
    return await _answer(call, operation, catalog, guardrails, result)  # 10


async def _admit(call: Call, operation: Operation, pin) -> tuple[Catalog, Guardrails]:
    """Steps 5 to 8; `call.stage` names the step that refused (its ledger error code)."""
    principal, body = call.principal, call.body
    license = principal.license
    await _fair_use(call)
    if type(principal) is FrontEndPrincipal:
        call.stage = _POLICY
        principal, body = _act_in_course(call, principal)
    # 5: an unlimited budget needs no read before the call; a course member's reads the
    # student's allowance and the course pool too, which must have some left.
    call.stage = _BUDGET
    call.budget = await budget_check_async(
        license_id=license.id,
        config=license.budget,
        holder=principal.holder,
        course_id=principal.course_id,
        end_user_id=principal.end_user_id,
        hold=await _hold(call, operation, principal, body),
    )
    crashpoints.reached("budget.held")
    # 6: a course member's course rules at this instant, then the policy in force.
    call.stage = _POLICY
    course_policy, instructions = await _course_gate(principal)
    policy = _policy_in_force(principal, course_policy)
    service_policy = policy.check_request(operation.service, call.body_fields)
    # 7
    call.stage = _SELECTION
    operation.check_policy(policy, body)  # 400: what else of the policy the request needs
    if instructions:  # sent and paid for; the policy and the guardrails judge the client's text
        call.body = operation.with_instructions(body, instructions)
    catalog = await current_catalog()
    call.routes = _routes(call, operation, catalog, pin, service_policy.providers, policy)
    call.route = call.routes.first
    # 8
    call.stage = _GUARDRAIL
    guardrails, input_texts = _guarded_input(principal, operation, body)
    if guardrails.moderates("input"):
        await moderation.check(catalog, input_texts, _residency(call))  # 400 flagged, 503 failed
    # Before 9: no provider call that could not be recorded (the database is down and the
    # spool cannot take the row). One global read while the database is up.
    call.stage = _LEDGER
    if spool_refuses():
        raise ServiceUnavailable(reason="the database is down and the ledger spool is unwritable")
    call.stage = None
    return catalog, guardrails


async def _hold(call: Call, operation: Operation, principal: Principal, body) -> Hold | None:
    """Step 5's reservation (licensing.ledger.reservations): the catalog's price of what the
    request is sure to be billed on; None when no level has a limit or nothing is known."""
    if principal.license.budget.limit is None and principal.course_id is None:
        return None
    entry = (await current_catalog()).models.get(operation.model_of(body))
    if entry is None:
        return None
    try:
        usage = operation.reserve_usage(body, call.body_fields)
        amount = credits_for(entry.cost, usage) if usage is not None else 0
    except (ArithmeticError, TypeError, ValueError):  # a cost the call's billing refuses too
        return None
    return hold_for(call.request_id, amount) if amount > 0 else None


async def _release_hold(call: Call) -> None:
    """Release a hold no ledger row will: shielded, so a client that left does not keep it."""
    if call.budget is None or call.budget.hold is None:
        return
    await asyncio.shield(release_held(call.budget.lease, call.request_id))


async def _fair_use(call: Call) -> None:
    """Fair use, before the budget (decisions.md): 429 over a limit; nothing to do without."""
    principal = call.principal
    license = principal.license
    limits = license.policy.limits if license.policy is not None else None
    if limits is not None:
        call.stage = _FAIR_USE
        call.fair_use = fairuse.window_of(limits, license.id, principal.holder)
        await fairuse.admit(call.fair_use)


def _act_in_course(call: Call, principal: FrontEndPrincipal) -> tuple[Principal, Any]:
    """A front-end key's request: the course that pays for its person (the key's, or the one its
    model's alias or the person's only course names; 403 when they may not work there) and the
    model the alias stands for, in the body every later step reads."""
    body = call.body
    model = getattr(body, "model", None)
    principal, real = frontend.act_in_course(principal, model if isinstance(model, str) else None)
    if real != model:
        body = body.model_copy(update={"model": real})
        call.body_fields = {**call.body_fields, "model": real}
    call.principal, call.body = principal, body
    return principal, body


def _policy_in_force(principal: Principal, course_policy: Policy | None) -> Policy:
    """Step 6's judge: a course member's course policy (its overlay, or its exam policy in exam
    mode) instead of the license type's; 503 when the document cannot be evaluated."""
    policy = course_policy if course_policy is not None else principal.license.policy
    if policy is None:
        raise ServiceUnavailable(reason="the license type's policy document cannot be evaluated")
    return policy


def _routes(
    call: Call,
    operation: Operation,
    catalog: Catalog,
    pin: ProviderPin | None,
    providers: frozenset[str] | None,
    policy: Policy,
) -> Routes:
    """Step 7: the routes the policy allows, the first refined by the operation for its
    provider; a misconfigured connection's 400 is logged for the operator too."""
    try:
        routes = operation.select(catalog, pin, providers, call.body, policy.connection_tags)
    except ConnectionMisconfigured as exc:
        _log_misconfigured(call, exc)
        raise
    routes.first = operation.prepare(routes.first, call.body) or routes.first
    return routes


def _guarded_input(
    principal: Principal, operation: Operation, body
) -> tuple[Guardrails, list[str]]:
    """Step 8's own checks (the license type's regexes, 400) and the texts moderation sees;
    503 when the guardrail settings cannot be evaluated."""
    guardrails = principal.license.guardrails
    if guardrails is None:
        raise ServiceUnavailable(reason="the license type's guardrails cannot be evaluated")
    input_texts = list(operation.input_texts(body))
    guardrails.check("input", input_texts)
    return guardrails, input_texts


async def _answer(
    call: Call,
    operation: Operation,
    catalog: Catalog,
    guardrails: Guardrails,
    result: ProviderResult,
) -> HttpResponse:
    """Step 10 and the answer: a blocked answer is still charged (400); a failed moderation
    call is closed (503) and the answer not charged; else the row, then the answer."""
    try:
        output_texts = list(result.output_texts)
        guardrails.check("output", output_texts)
        if guardrails.moderates("output"):
            await moderation.check(catalog, output_texts, _residency(call))
    except ServiceUnavailable as exc:
        # The moderation call failed: closed, and the answer is not charged.
        error: tuple[str, Exception] = (record.OUTPUT_MODERATION_UNAVAILABLE, exc)
        await _conclude(call, operation, status=503, result=replace(result, credits=0), error=error)
        raise
    except GatewayError as exc:
        error = (record.OUTPUT_BLOCKED, exc)
        await _conclude(call, operation, status=exc.status, result=result, error=error)
        await moderation.safeguarding_alert(call.principal, call.request_id, exc, "output")
        raise
    remaining = await _conclude(call, operation, status=200, result=result)
    return operation.render(result, remaining)


async def _course_gate(principal: Principal) -> tuple[Policy | None, str]:
    """A course member's course rules at this instant (licensing.courses.rules): 403 when the
    course is closed, has paused them or is in exam mode without an exam policy; else the policy
    in force for them (the course's overlay or exam policy applied, or None: the license type's
    as is) and the course's instructions ("" for none, and for a request outside a course)."""
    if principal.course_id is None:
        return None, ""
    rules = await course_rules_async(principal.course_id)
    if rules is None:  # deleted under a cached credential: its keys go with it
        raise PolicyDenied("the course of this credential no longer exists", param=None)
    now, end_user_id = clock.utcnow(), principal.end_user_id
    return course_rules.course_gate(rules, now=now, end_user_id=end_user_id), rules.instructions


def _residency(call: Call) -> frozenset[str]:
    """The connection tags the license's policy requires: its moderation calls keep to them too."""
    policy = call.principal.license.policy
    return policy.connection_tags if policy is not None else frozenset()


def _log_misconfigured(call: Call, exc: ConnectionMisconfigured) -> None:
    """The client's 400 is the spec's and names the connection only; the operator's line says
    which provider's connection to fix, and for which model."""
    logger.warning(
        "connection %s/%s is misconfigured: missing %s; request %s for model %r refused "
        "(license %s)",
        exc.provider,
        exc.connection,
        exc.missing,
        call.request_id,
        exc.model,
        call.principal.license.name,
    )


# The steps before the provider call, and the error code of each refusal by its status.
_FAIR_USE = {429: record.RATE_LIMITED}
_BUDGET = {400: record.OUT_OF_BUDGET, 500: record.BUDGET_MISCONFIGURED}
_POLICY = {403: record.POLICY_DENIED, 503: record.POLICY_UNAVAILABLE}
_SELECTION = {400: record.PROVIDER_SELECTION}
_GUARDRAIL = {400: record.GUARDRAIL_BLOCKED, 503: record.MODERATION_UNAVAILABLE}
_LEDGER = {503: record.LEDGER_UNAVAILABLE}
# A failed provider call, by the status the client gets.
_CALL = {
    400: record.PROVIDER_REJECTED,
    404: record.PROVIDER_NOT_FOUND,
    500: record.PROVIDER_ERROR,
    503: record.PROVIDER_UNAVAILABLE,
}


def _call_code(exc: GatewayError) -> str:
    return _CALL.get(exc.status, record.PROVIDER_ERROR)


async def _timed_call(call: Call, operation: Operation) -> Answer:
    started = call.provider_started = time.perf_counter()
    assert call.route is not None  # selected in step 7, before every call
    try:
        return await call_with_failover(call, _refined(call, operation), _attempt(call, operation))
    finally:
        call.provider_seconds = time.perf_counter() - started


def _attempt(call: Call, operation: Operation) -> Callable[[Route], Awaitable[Answer]]:
    """One attempt on `route` (in its span when tracing); a stream is handed on only once its
    first bytes are in, so that one failing before them can still fail over."""

    async def invoke(route: Route) -> Answer:
        if tracing.ENABLED:
            result = await _traced_call(call, operation)
        else:
            result = await operation.call(route, call.body, call)
        if isinstance(result, ProviderStream):
            try:
                result = await prime(result)
            except BaseException as exc:
                if call.span is not None:
                    status = getattr(exc, "status", 499)
                    provider_span.finish(call.span, route, status=status, error="stream")
                    call.span = None
                raise
        return result

    return invoke


def _refined(call: Call, operation: Operation) -> Iterator[Route]:
    """The routes, each failover refined by the operation as the first was in step 7; one that
    it refuses (a provider-side constraint) is left out."""
    assert call.routes is not None
    yield call.routes.first
    for route in call.routes.failovers():
        try:
            yield operation.prepare(route, call.body) or route
        except GatewayError:
            continue


async def _traced_call(call: Call, operation: Operation) -> Answer:
    """The call inside its span (docs/tracing.md); a stream's span ends with the stream."""
    assert call.route is not None
    try:
        span, token = provider_span.start(call, operation)
    except Exception:  # a trace is never worth a failed request
        logger.exception("provider span of request %s not started", call.request_id)
        return await operation.call(call.route, call.body, call)
    try:
        result = await operation.call(call.route, call.body, call)
    except BaseException as exc:
        status = 499 if isinstance(exc, asyncio.CancelledError) else getattr(exc, "status", 500)
        provider_span.finish(span, call.route, status=status, error=provider_span.error_type(exc))
        raise
    finally:
        provider_span.leave(token)
    if isinstance(result, ProviderStream):
        call.span = span
    else:
        model = provider_span.answer_model(result.body)
        provider_span.finish(span, call.route, usage=result.usage, response_model=model)
    return result


def _upstream_failed(call: Call, exc: GatewayError) -> None:
    if isinstance(exc, ProviderFailure):
        assert call.route is not None  # a provider failed: there was a route
        metrics.upstream_error(call.route.provider.slug, exc.upstream_kind)


_background: set[asyncio.Task] = set()


def _stream_response(call: Call, operation: Operation, stream: ProviderStream):
    route = call.route
    assert route is not None  # a stream comes from a provider call

    def finished(outcome: StreamOutcome) -> None:
        _stream_timings(call, operation, outcome)
        if call.span is not None:
            _end_stream_span(call, outcome)
        result = None
        # 499: a client that left pays for what the provider produced (docs/decisions/README.md).
        if outcome.status in (200, 499) and outcome.usage is not None:
            result = operation.stream_result(route, call.body, outcome.usage)
        elif outcome.status == 200:
            logger.warning("stream %s ended without usage; recorded at zero cost", call.request_id)
        if result is not None:
            result.upstream_id = outcome.upstream_id or result.upstream_id
        error: tuple[str, Exception | None] | None = None
        if outcome.status == 499:
            error = (record.CLIENT_DISCONNECTED, None)
        elif outcome.status != 200:
            error = (record.STREAM_FAILED, GatewayError(outcome.failure or "stream failed"))
        # Runs from the generator's cleanup, possibly while its task is being cancelled: the
        # ledger write gets a task of its own.
        task = asyncio.get_running_loop().create_task(
            _conclude(
                call,
                operation,
                status=outcome.status,
                result=result,
                error=error,
                upstream_id=outcome.upstream_id,
            )
        )
        _background.add(task)
        task.add_done_callback(_background.discard)

    response = StreamingHttpResponse(relay(stream, finished), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _end_stream_span(call: Call, outcome: StreamOutcome) -> None:
    failed = outcome.status not in (200, 499)
    provider_span.finish(
        call.span,
        call.route,
        usage=outcome.usage,
        response_model=outcome.response_model,
        status=outcome.status,
        error="stream" if failed else None,
    )


def _stream_timings(call: Call, operation: Operation, outcome: StreamOutcome) -> None:
    call.provider_seconds = time.perf_counter() - call.provider_started
    assert call.route is not None
    provider = call.route.provider.slug
    try:
        if outcome.first_event_at:
            started = call.request.started_at
            metrics.first_token(operation.service, provider, outcome.first_event_at - started)
        if outcome.status not in (200, 499):
            metrics.upstream_error(provider, "stream")
    except Exception:  # never in the way of the stream's ledger row
        logger.exception("stream metrics of request %s not recorded", call.request_id)


async def _conclude(
    call: Call,
    operation: Operation,
    *,
    status: int,
    result: ProviderResult | None = None,
    error: tuple[dict[int, str] | str | None, Exception | None] | None = None,
    upstream_id: str = "",
) -> int | None:
    """The request's last step, whatever its outcome: its one ledger row (`_record`), then what
    follows from it: the access log's error code, the metrics, fair use's token count. `error`
    is (the error code, or the refusing step's table of codes by status; the exception); a
    refusal (no route yet, or a step's table) charges no wallet and counts no tokens."""
    code, message = _error_of(status, error)
    refusal = isinstance(error and error[0], dict)
    call.request.error_code = code or None  # for the access log
    entry, remaining = await _record(
        call, operation, status, result, (code, message), upstream_id, charge=not refusal
    )
    if metrics.ENABLED:
        try:
            _observe(call, entry, remaining)
        except Exception:  # a metric is never worth a failed, already charged request
            logger.exception("metrics of request %s not recorded", call.request_id)
    if call.fair_use is not None and not refusal:
        await fairuse.add_tokens(call.fair_use, entry.total_tokens)
    return remaining


async def _record(
    call: Call,
    operation: Operation,
    status: int,
    result: ProviderResult | None,
    error: tuple[str, str],
    upstream_id: str,
    *,
    charge: bool,
) -> tuple[LedgerEntry, int | None]:
    """Writes the request's one ledger row through the ledger's door, its wallets charged
    unless `charge` is False (a refusal); the row, and the credits remaining after it."""
    entry = _ledger_entry(call, operation, status, result, error, upstream_id)
    budget = call.budget
    lease = budget.lease if budget is not None else None
    charged = budget if charge else None
    remaining = await transaction_record(entry=entry, budget=charged, lease=lease)
    return entry, remaining


def _ledger_entry(
    call: Call,
    operation: Operation,
    status: int,
    result: ProviderResult | None,
    error: tuple[str, str],
    upstream_id: str,
) -> LedgerEntry:
    """The row: who called, what for, where it went, what it cost, how it ended."""
    route = call.route
    usage = result.usage if result else Usage()
    license = call.principal.license
    code, message = error
    return LedgerEntry(
        request_id=call.request_id,
        license_id=license.id,
        api_key_id=call.principal.api_key_id,
        end_user_id=call.principal.end_user_id,
        course_id=call.principal.course_id,
        service=operation.service,
        requested_model=operation.model_of(call.body),
        billed_model=result.billed_model if result else "",
        provider=route.provider.slug if route else "",
        connection=route.connection.name if route else "",
        attempts=call.attempts,
        failovers=record.storable("; ".join(call.failovers), record.FAILOVERS_MAX),
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
        upstream_id=record.storable((result.upstream_id if result else "") or upstream_id, 200),
        outcome=record.outcome_for(status, code),
        error_code=code,
        error_message=message,
        institution_id=license.institution_id,
        license_name=license.name,
    )


def _observe(call: Call, entry: LedgerEntry, remaining: int | None) -> None:
    """The request's metrics, once its ledger row is written (docs/metrics.md)."""
    metrics.request_recorded(
        entry.service,
        _model_label(call.route, entry.requested_model),
        entry.provider,
        entry.status_code,
        total=time.perf_counter() - call.request.started_at,
        provider_seconds=call.provider_seconds,
    )
    metrics.charged(
        entry.license_id,
        entry.service,
        entry.credits,
        entry.prompt_tokens,
        entry.completion_tokens,
    )
    # A pooled budget only: per-user wallets are too many series, and not the license's state.
    if remaining is not None and call.budget is not None and call.budget.key.holder == "license":
        metrics.budget_remaining(entry.license_id, remaining)


def _model_label(route: Route | None, requested: str) -> str:
    """A catalog id, or `other`: never the client's own text."""
    if route is not None:
        return route.model.model_id if route.model is not None else metrics.OTHER
    if not requested:
        return metrics.NONE
    catalog = cached_catalog()
    return requested if catalog is not None and requested in catalog.models else metrics.OTHER


def _error_of(status: int, error) -> tuple[str, str]:
    """(error code, the reason staff see): the client's message, and for a failure of the
    provider or the gateway what really happened, without URLs or e-mail addresses."""
    if error is None:
        return "", ""
    code, exc = error
    if isinstance(code, dict):
        code = code.get(status, record.PROVIDER_SELECTION)
    if exc is None:
        return code, "client disconnected" if code == record.CLIENT_DISCONNECTED else ""
    if isinstance(exc, GatewayError):
        message = exc.message
        if exc.reason and exc.reason != message:
            message = f"{message} ({scrub(exc.reason)})"
    else:
        message = f"{type(exc).__name__}: {scrub(str(exc))}"
    return code, record.storable(message, record.ERROR_MESSAGE_MAX)
