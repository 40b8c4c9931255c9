"""`direct`: the OpenAI REST API (Bearer key; base URL like https://api.openai.com/v1)."""

from __future__ import annotations

from catalog.routing import Route

from .base import Transport


class OpenAITransport(Transport):
    kind = "openai"

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"Authorization": f"Bearer {route.connection.api_key}"}

    async def embeddings(self, route: Route, payload: dict) -> dict:
        return await self.post_json(route, "/embeddings", payload)
