"""`aggregator`: OpenRouter, OpenAI-compatible; model ids carry the vendor prefix
(`openai/text-embedding-3-small`) and answers carry no cost data."""

from __future__ import annotations

import httpx

from catalog.routing import Route

from .base import malformed
from .openai import OpenAITransport


class OpenRouterTransport(OpenAITransport):
    kind = "openrouter"

    stateful_responses = False  # its Responses API is stateless
    # The `include` values its Responses API documents (ResponseIncludesEnum); the others
    # (web search sources, output logprobs) are refused before the call.
    responses_include = frozenset(
        {
            "file_search_call.results",
            "message.input_image.image_url",
            "computer_call_output.output.image_url",
            "reasoning.encrypted_content",
            "code_interpreter_call.outputs",
        }
    )

    async def post_json(self, route: Route, path: str, body, **kwargs):
        answer = await super().post_json(route, path, body, **kwargs)
        if isinstance(answer, dict):
            # OpenRouter can answer 200 with an error object in place of the result.
            if "error" in answer and not ({"data", "choices", "output"} & set(answer)):
                error = answer["error"] if isinstance(answer["error"], dict) else {}
                code = error.get("code")
                status = code if isinstance(code, int) else 502
                self.raise_for_response(httpx.Response(status, json=answer))
                raise malformed("openrouter error object with a non-error code")
            answer.pop("provider", None)  # the serving vendor's name stays ours to know
        return answer

    def chat_payload(self, payload: dict) -> dict:
        """OpenRouter takes `reasoning: {effort, exclude}` natively."""
        effort = payload.pop("reasoning_effort", None)
        if effort is not None:
            payload["reasoning"] = {"effort": effort}
        return payload

    def responses_payload(self, payload: dict) -> dict:
        return self.chat_payload(payload)
