"""POST /v1/embeddings."""

from __future__ import annotations

import logging
from typing import Any

from ninja import Router

from catalog.routing import Route
from core.errors import BadRequest
from core.jsonio import json_response

from .. import pipeline, tokens
from ..billing import Usage, credits_for
from ..providers import adapter_for
from ..providers import usage as usage_formats
from ..providers.base import EmbeddingsProvider, malformed
from ..schemas.common import SERVICE_HEADERS, error_responses
from ..schemas.embeddings import EmbeddingsRequest, EmbeddingsResponse

router = Router(tags=["embeddings"])
logger = logging.getLogger("gateway")


class EmbeddingOperation(pipeline.Operation):
    """What the embeddings endpoints share: per-token billing and the `usage` block."""

    def result(self, route: Route, body, answer: dict, prompt_tokens: int | None):
        if route.model is None:
            logger.warning("model %r is not in the catalog; recorded at zero cost", body.model)
        usage = Usage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
        return pipeline.ProviderResult(
            body=answer,
            billed_model=route.model.model_id if route.model is not None else body.model,
            usage=usage,
            credits=credits_for(route.model.cost, usage) if route.model is not None else 0,
        )

    def render(self, result: pipeline.ProviderResult, remaining: int | None):
        body = result.body
        body["usage"] = {
            "prompt_tokens": result.usage.prompt_tokens,
            "total_tokens": result.usage.total_tokens,
            "credits_used": result.credits,
            "credits_remaining": remaining,
        }
        return json_response(body)


class Embeddings(EmbeddingOperation, endpoint="embeddings"):
    body = EmbeddingsRequest

    def input_texts(self, body: EmbeddingsRequest):
        return body.texts()

    def reserve_usage(self, body: EmbeddingsRequest, fields: dict) -> Usage:
        """The input's tokens: the whole cost, known before the call (counted exactly up to
        tokens.EXACT_HOLD_CHARS, roughly beyond: a bulk request's hold need not cost its
        milliseconds of CPU)."""
        texts = body.texts()
        exact = sum(map(len, texts)) <= tokens.EXACT_HOLD_CHARS
        model = body.model if exact else tokens.ROUGH
        return Usage(prompt_tokens=sum(tokens.count_text(t, model) for t in texts))

    def prepare(self, route: Route, body: EmbeddingsRequest) -> None:
        if (
            body.dimensions is not None
            and route.model is not None
            and not route.model.options.get("accepts_dimensions", False)
        ):
            raise BadRequest(
                f"Model '{route.requested_model}' does not support the 'dimensions' parameter"
            )

    async def call(self, route: Route, body: EmbeddingsRequest, call) -> pipeline.ProviderResult:
        adapter = adapter_for(route.provider.kind, EmbeddingsProvider)
        payload: dict[str, Any] = {
            "model": route.upstream_model,
            "input": body.input,
            "encoding_format": "float",
        }
        if body.dimensions is not None:
            payload["dimensions"] = body.dimensions
        if body.user is not None:
            payload["user"] = body.user
        answer = await adapter.embeddings(route, payload)
        try:
            data = sorted(answer["data"], key=lambda item: item["index"])
            items = [
                {"object": "embedding", "index": item["index"], "embedding": item["embedding"]}
                for item in data
            ]
            usage = usage_formats.openai_embeddings(answer.get("usage"))
            model = answer.get("model") or route.upstream_model
        except (KeyError, TypeError, ValueError) as exc:
            raise malformed("embeddings answer") from exc
        if len(items) != len(body.texts()) or any(
            not isinstance(item["embedding"], list) for item in items
        ):
            raise malformed("embeddings data")
        return self.result(
            route, body, {"object": "list", "model": model, "data": items}, usage.prompt_tokens
        )


_operation = Embeddings()


@router.post(
    "/embeddings",
    response={200: EmbeddingsResponse, **error_responses(400, 401, 403, 404, 422, 429, 500, 503)},
    openapi_extra=SERVICE_HEADERS,
    summary="Create embeddings",
)
async def create_embeddings(request, body: EmbeddingsRequest):
    return await pipeline.run(request, _operation, body)
