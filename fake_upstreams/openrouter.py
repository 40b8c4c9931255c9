"""A fake of OpenRouter's OpenAI-compatible API: embeddings, chat completions and the
stateless Responses API (beta).

Served under ``<origin>/api/v1`` with bearer auth. Model ids are
vendor-prefixed (``openai/gpt-4o-mini``). Errors use OpenRouter's shape
``{"error": {"code": <http status>, "message": ..., "metadata"?: {...}}}``.
Answers carry ``provider`` and ``native_finish_reason`` as OpenRouter's do,
and no cost fields. Streams open with OpenRouter's ``: OPENROUTER PROCESSING``
keep-alive comment and always end with a usage chunk.
"""

from __future__ import annotations

import random
import string
import time
from typing import Any

from . import agentic, synth
from .openai import (
    EMBEDDING_MODELS,
    _response_object,
    _response_stream,
    chat_chunks,
    chat_completion,
    chat_turn,
    embedding_vector,
    parse_embedding_input,
    response_output,
    response_turn,
    unknown_tool_message,
)
from .server import FakeUpstream, RecordedRequest, Response, json_response, sse_data, sse_response

CHAT_MODELS = frozenset(
    {
        "openai/gpt-4o-mini",
        "openai/gpt-4o",
        "openai/gpt-4.1-mini",
        "openai/gpt-5-mini",
        "anthropic/claude-3.5-haiku",
        "anthropic/claude-sonnet-4",
        "google/gemini-2.5-flash",
        "meta-llama/llama-3.1-8b-instruct",
        "mistralai/mistral-small-3.2-24b-instruct",
    }
)
EMBEDDING_DIMS = {f"openai/{name}": dims for name, dims in EMBEDDING_MODELS.items()} | {
    "mistralai/mistral-embed-2312": 1024,
}
PROVIDERS = {
    "openai": "OpenAI",
    "anthropic": "Anthropic",
    "google": "Google",
    "meta-llama": "DeepInfra",
    "mistralai": "Mistral",
}
DEFAULT_MESSAGES = {
    400: "Bad Request",
    401: "User not found.",
    402: "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
    403: "Forbidden",
    404: "Not Found",
    408: "Request timed out",
    429: "Rate limit exceeded: too many requests. Please try again later.",
    500: "Internal Server Error",
    502: "Provider returned error",
    503: "No allowed providers are available for the selected model.",
}


def generation_id() -> str:
    suffix = "".join(random.choices(string.ascii_letters + string.digits, k=20))
    return f"gen-{int(time.time())}-{suffix}"


class OpenRouterFake(FakeUpstream):
    """OpenRouter simulator.

    Args:
        api_key: the only accepted bearer token; None accepts any (or none).
        chat_models / embedding_models: accepted ids (defaults above).

    Tool calls, tool-result answers and JSON documents as the OpenAI fake's (the shared
    helpers); no reasoning items.

    Knobs: ``reply_text`` (fixed assistant text), ``reverse_embeddings``, and
    the stream/latency knobs of :class:`FakeUpstream`. With
    ``stream_fail_mode = "error_event"`` a broken stream ends the way
    OpenRouter documents: a chunk carrying ``error`` and ``finish_reason:
    "error"``, on a stream that had already answered 200.
    """

    name = "openrouter"
    base_path = "/api/v1"
    ROUTES = [
        ("POST", r"/api/v1/embeddings", "embeddings"),
        ("POST", r"/api/v1/chat/completions", "chat_completions"),
        ("POST", r"/api/v1/responses", "responses"),
    ]
    KNOBS = {"reply_text": None, "reverse_embeddings": False}

    def __init__(
        self,
        api_key: str | None = None,
        chat_models: set[str] | None = None,
        embedding_models: dict[str, int] | None = None,
    ):
        super().__init__()
        self.api_key = api_key
        self.chat_models = set(chat_models) if chat_models is not None else set(CHAT_MODELS)
        self.embedding_models = dict(embedding_models or EMBEDDING_DIMS)

    # -- protocol hooks ----------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        error: dict[str, Any] = {
            "message": message or DEFAULT_MESSAGES.get(status, "Error"),
            "code": status,
        }
        if extra.get("metadata"):
            error["metadata"] = extra["metadata"]
        return json_response({"error": error}, status)

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return self.error(401, "No auth credentials found")
        if token.strip() != self.api_key:
            return self.error(401, "User not found.")
        return None

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400, "Invalid JSON in request body")

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return [("x-generation-id", generation_id())]

    def _invalid_model(self, model: Any):
        return self.fail(400, f"{model} is not a valid model ID")

    @staticmethod
    def _provider(model: str) -> str:
        return PROVIDERS.get(model.split("/", 1)[0], "OpenRouter")

    # -- /api/v1/embeddings ------------------------------------------------------------

    def embeddings(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if model not in self.embedding_models:
            raise self._invalid_model(model)
        inputs = parse_embedding_input(body.get("input"))
        if inputs is None:
            raise self.fail(400, "Input must be a non-empty string or array")
        native = self.embedding_models[model]
        dims = body.get("dimensions")
        if dims is not None and (not isinstance(dims, int) or not 1 <= dims <= native):
            raise self.fail(400, f"dimensions must be between 1 and {native}")
        encoding = body.get("encoding_format") or "float"
        data = []
        for index, (seed, _tokens) in enumerate(inputs):
            # Salted with the upstream name so both fakes give one model one vector.
            values = embedding_vector(seed, model.split("/", 1)[-1], native, dims)
            encoded = synth.float32_base64(values) if encoding == "base64" else values
            data.append({"object": "embedding", "embedding": encoded, "index": index})
        if self.reverse_embeddings:
            data.reverse()
        tokens = sum(n for _seed, n in inputs)
        return json_response(
            {
                "id": generation_id().replace("gen-", "gen-emb-", 1),
                "object": "list",
                "data": data,
                "model": model,
                "provider": self._provider(model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    # -- /api/v1/chat/completions ------------------------------------------------------

    def chat_completions(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if model not in self.chat_models:
            raise self._invalid_model(model)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise self.fail(400, 'Input required: specify "prompt" or "messages"')
        try:
            turn = chat_turn(body, self.reply_text)
        except agentic.UnknownTool as exc:
            raise self.fail(400, unknown_tool_message(exc.name)) from None
        completion_id = generation_id()
        extra = {"provider": self._provider(model)}
        usage = {
            "prompt_tokens": turn.prompt_tokens,
            "completion_tokens": turn.completion_tokens,
            "total_tokens": turn.prompt_tokens + turn.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
        finish = {"native_finish_reason": turn.finish_reason}
        if not body.get("stream"):
            answer = chat_completion(
                turn, model, completion_id, extra=extra, choice_extra=finish, usage=usage
            )
            answer.pop("service_tier")
            return json_response(answer)
        chunks = chat_chunks(
            turn, model, completion_id, True, extra=extra, finish_extra=finish, usage=usage
        )
        for chunk in chunks:
            chunk.pop("service_tier")
        events = [sse_data(c) for c in chunks] + [sse_data("[DONE]")]

        def error_event(_index: int) -> bytes:
            return sse_data(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": synth.now(),
                    "model": model,
                    **extra,
                    "error": {
                        "code": "server_error",
                        "message": "Provider disconnected unexpectedly",
                    },
                    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
                }
            )

        return sse_response(
            events, preamble=b": OPENROUTER PROCESSING\n\n", error_event=error_event
        )

    # -- /api/v1/responses (beta: stateless, nothing is stored) --------------------------

    def responses(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if model not in self.chat_models:
            raise self._invalid_model(model)
        if body.get("previous_response_id"):
            raise self.fail(400, "previous_response_id is not supported: the API is stateless")
        limit = body.get("max_output_tokens")
        try:
            turn = response_turn(body, self.reply_text, limit if isinstance(limit, int) else None)
        except agentic.UnknownTool as exc:
            raise self.fail(400, unknown_tool_message(exc.name)) from None
        # No reasoning item: this fake does not simulate reasoning (its usage has none either).
        output = response_output(turn)
        final = _response_object(body, model, synth.hex_id("resp_", 24), output, turn)
        if not body.get("stream"):
            return json_response(final)
        return _response_stream(final, turn)
