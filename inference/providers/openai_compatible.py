"""`openai_compatible`: any server that speaks OpenAI's chat completions (vLLM, Ollama,
llama.cpp's server, TGI, SGLang, LM Studio, Mistral's API, EU hosts); the key is optional.

What is sent (docs/providers.md, docs/decisions/providers.md):
- no `Authorization` header without a key;
- the contract's chat request, less what these servers refuse or cannot use: `metadata` and
  `store` (OpenAI's stored completions), `user` (Mistral's API refuses it; the others ignore it);
  `max_completion_tokens` sent as `max_tokens` (the one every server knows);
- `stream_options.include_usage` on streams unless the connection says `stream_usage: always`
  (a server that reports usage unasked and refuses the field: Mistral's API);
- `/v1/responses`: translated to chat completions (`ResponsesOverChat`), unless the connection
  says `responses_api: native` (then the server's own Responses API, stateless either way).
"""

from __future__ import annotations

import httpx
import orjson

from catalog.routing import Route

from .base import UpstreamStream
from .bridge import ResponsesOverChat
from .openai import OpenAITransport

DROPPED = ("metadata", "store", "user")


def native_responses(route: Route) -> bool:
    return route.connection.options.get("responses_api") == "native"


class OpenAICompatibleTransport(ResponsesOverChat, OpenAITransport):
    kind = "openai_compatible"

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        key = route.connection.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def compatible_payload(self, route: Route, payload: dict) -> dict:
        payload = self.chat_payload(payload)
        for name in DROPPED:
            payload.pop(name, None)
        limit = payload.pop("max_completion_tokens", None)
        if limit is not None and payload.get("max_tokens") is None:
            payload["max_tokens"] = limit
        if route.connection.options.get("stream_usage") == "always":
            payload.pop("stream_options", None)
        return payload

    async def chat(self, route: Route, payload: dict) -> dict:
        return await self.post_json(
            route,
            "/chat/completions",
            self.compatible_payload(route, payload),
            max_bytes=self.answer_cap("chat"),
        )

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream:
        opened = await self.open_stream(
            route, "/chat/completions", self.compatible_payload(route, payload)
        )
        return UpstreamStream(opened)

    # --- /v1/responses: translated, or the server's own -------------------------------------

    def check_responses(self, route: Route, payload: dict) -> None:
        if not native_responses(route):
            super().check_responses(route, payload)

    async def responses(self, route: Route, payload: dict) -> dict:
        if native_responses(route):
            return await OpenAITransport.responses(self, route, self._native(payload))
        return await super().responses(route, payload)

    async def responses_stream(self, route: Route, payload: dict) -> UpstreamStream:
        if native_responses(route):
            return await OpenAITransport.responses_stream(self, route, self._native(payload))
        return await super().responses_stream(route, payload)

    @staticmethod
    def _native(payload: dict) -> dict:
        """Stateless: nothing is stored at the server (the gateway could not find it again)."""
        payload["store"] = False
        payload.pop("metadata", None)
        return payload

    # --- errors ------------------------------------------------------------------------------

    def error_message(self, response: httpx.Response) -> str:
        """vLLM's `{"object": "error", "message"}`, TGI's `{"error": "..."}`, FastAPI's
        `{"detail": ...}` (a 404 of a path the server lacks, a 422's field list), Mistral's
        `{"message": {"detail": [...]}}`."""
        message = super().error_message(response)
        if message:
            return message
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return ""
        if not isinstance(body, dict):
            return ""
        nested = body.get("message")
        detail = nested.get("detail") if isinstance(nested, dict) else body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            where = ".".join(str(p) for p in first.get("loc") or () if p != "body")
            text = str(first.get("msg") or "")
            return f"{where}: {text}" if where and text else text
        return ""
