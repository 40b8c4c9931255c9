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
from core.errors import GUARDRAIL_BLOCKED, BadRequest, GatewayError, ServiceUnavailable

from .providers import adapter_for
from .providers.base import Moderator

logger = logging.getLogger("gateway")

MODERATION_PROVIDER = "direct"
MODERATION_MODEL = "omni-moderation-latest"


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
    """400 `Request blocked by guardrail` when any text is flagged; 503 when the call fails."""
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
        flagged = await moderator.moderate(route, texts)
    except GatewayError as exc:
        logger.warning("moderation call failed (%s %s); refusing", exc.status, exc.message)
        raise ServiceUnavailable() from exc
    logger.info(
        "moderation call: provider=%s model=%s texts=%d characters=%d flagged=%s latency_ms=%d",
        MODERATION_PROVIDER,
        MODERATION_MODEL,
        len(texts),
        sum(len(text) for text in texts),
        flagged,
        (time.perf_counter() - started) * 1000,
    )
    if flagged:
        raise BadRequest(GUARDRAIL_BLOCKED)
