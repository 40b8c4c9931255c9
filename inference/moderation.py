"""The moderation guardrail: texts of a request (step 8) or an answer (step 10) go to the
`direct` provider's moderation endpoint (OpenAI `POST /v1/moderations`).

It fails closed: when the call cannot be made or answered (no `direct` connection, time-out,
5xx, a malformed answer) the request is refused with 503 and nothing is charged. The call's own
cost is not billed to the license (OpenAI does not charge for it); each call writes a log line.
"""

from __future__ import annotations

import logging
import time

from catalog.routing import Catalog, Route
from core.db import run_db
from core.errors import GUARDRAIL_BLOCKED, BadRequest, GatewayError, ServiceUnavailable
from licensing.access.credentials import Principal
from licensing.safeguarding.rules import Verdict
from licensing.safeguarding.services import do_raise_alert

from .providers import adapter_for
from .providers.base import ModerationResult, Moderator

logger = logging.getLogger("gateway")

MODERATION_PROVIDER = "direct"
MODERATION_MODEL = "omni-moderation-latest"


class GuardrailFlagged(BadRequest):
    """400 `Request blocked by guardrail`, the client's answer exactly as any other; it carries
    the flagged texts and their results for the safeguarding alert (licensing.safeguarding),
    never shown to the client."""

    def __init__(self, flagged: list[tuple[str, ModerationResult]]):
        super().__init__(GUARDRAIL_BLOCKED)
        self.flagged = flagged


def _route(catalog: Catalog, tags: frozenset[str]) -> Route | None:
    """`direct`'s `default` connection; under a residency rule (the license's connection tags)
    the texts stay where the request's own call may go: `default` if it carries the tags, else
    the first of direct's connections (by weight) that does."""
    provider = catalog.providers.get(MODERATION_PROVIDER)
    if provider is None:
        return None
    default = provider.connections.get("default")
    candidates = [default, *provider.connections.values()] if tags else [default]
    connection = next(
        (c for c in candidates if c is not None and c.api_key and tags <= c.tags), None
    )
    if connection is None:
        return None
    return Route(
        endpoint="moderation",
        requested_model=MODERATION_MODEL,
        upstream_model=MODERATION_MODEL,
        provider=provider,
        connection=connection,
        model=None,
    )


async def check(catalog: Catalog, texts: list[str], tags: frozenset[str] = frozenset()) -> None:
    """400 `Request blocked by guardrail` (a `GuardrailFlagged`) when any text is flagged; 503
    when the call fails."""
    texts = [text for text in texts if text]
    if not texts:
        return
    route = _route(catalog, tags)
    if route is None:
        logger.warning("moderation: no usable '%s' connection; refusing", MODERATION_PROVIDER)
        raise ServiceUnavailable()
    started = time.perf_counter()
    try:
        moderator = adapter_for(route.provider.kind, Moderator)
        results = await moderator.moderate(route, texts)
    except GatewayError as exc:
        logger.warning("moderation call failed (%s %s); refusing", exc.status, exc.message)
        raise ServiceUnavailable() from exc
    flagged = [(text, r) for text, r in zip(texts, results, strict=True) if r.flagged]
    logger.info(
        "moderation call: provider=%s model=%s texts=%d characters=%d flagged=%s latency_ms=%d",
        MODERATION_PROVIDER,
        MODERATION_MODEL,
        len(texts),
        sum(len(text) for text in texts),
        bool(flagged),
        (time.perf_counter() - started) * 1000,
    )
    if flagged:
        raise GuardrailFlagged(flagged)


async def safeguarding_alert(
    principal: Principal, request_id: str, exc: Exception, direction: str
) -> None:
    """After a flag is recorded (refused, or charged for an answer): the safeguarding alert of a
    student's (an end user's) flagged texts, when their institution has alerts on (read only
    now: an unflagged request reads nothing more). Never changes the client's answer: a failure
    here is logged."""
    if type(exc) is not GuardrailFlagged or principal.end_user_id is None:
        return
    verdicts = [
        Verdict(text=text, categories=result.categories, scores=result.category_scores)
        for text, result in exc.flagged
    ]
    try:
        await run_db(
            do_raise_alert,
            institution_id=principal.license.institution_id,
            end_user_id=principal.end_user_id,
            course_id=principal.course_id,
            request_id=request_id,
            direction=direction,
            verdicts=verdicts,
        )
    except Exception:
        logger.exception("safeguarding alert of request %s could not be raised", request_id)
