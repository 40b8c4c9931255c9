"""`aggregator`: OpenRouter, OpenAI-compatible; model ids carry the vendor prefix
(`openai/text-embedding-3-small`) and answers carry no cost data."""

from __future__ import annotations

import httpx

from catalog.routing import Route

from .base import ProviderFailure
from .openai import OpenAITransport


class OpenRouterTransport(OpenAITransport):
    kind = "openrouter"

    async def embeddings(self, route: Route, payload: dict) -> dict:
        body = await self.post_json(route, "/embeddings", payload)
        # OpenRouter can answer 200 with an error object in place of the result.
        if isinstance(body, dict) and "error" in body and "data" not in body:
            error = body["error"] if isinstance(body["error"], dict) else {}
            status = error.get("code") if isinstance(error.get("code"), int) else 502
            self.raise_for_response(httpx.Response(status, json=body))
            raise ProviderFailure("An error occurred", status=500, retryable=False)
        return body
