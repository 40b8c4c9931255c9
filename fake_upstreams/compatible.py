"""A fake of an OpenAI-compatible server (vLLM's OpenAI server, as Ollama, llama.cpp's server,
TGI or SGLang answer alike): chat completions and its own model list, no Responses API.

Served under ``<origin>/v1``; keyless unless ``api_key`` is given (vLLM's ``--api-key``: then
``Authorization: Bearer <key>``, else 401 ``{"error": "Unauthorized"}``). ``GET /v1/models``
lists what it serves as vLLM does (``owned_by: "vllm"``, ``root``, ``max_model_len``);
``POST /v1/chat/completions`` answers as the OpenAI fake (tool calls, JSON documents, echo)
for those ids only; errors are vLLM's ``{"object": "error", "message", "type", "param",
"code"}``; any other path (``/v1/responses``) is FastAPI's 404 ``{"detail": "Not Found"}``.
"""

from __future__ import annotations

from typing import Any

from . import synth
from .openai import OpenAIFake
from .server import RecordedRequest, Response, json_response

SERVED_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "mistral-small")
ERROR_TYPES = {
    400: "BadRequestError",
    401: "Unauthorized",
    404: "NotFoundError",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}
MAX_MODEL_LEN = 32768


class OpenAICompatibleFake(OpenAIFake):
    """A keyless OpenAI-compatible server.

    Args:
        api_key: the bearer token it requires; None (the default) requires none.
        models: the ids it serves (``GET /v1/models`` lists them, chat accepts them).

    Knobs: ``models_garbage`` (``GET /v1/models`` answers something that is not a model list),
    ``native_responses`` (serve ``POST /v1/responses`` too, as a recent vLLM does), and the
    OpenAI fake's (``reply_text``, ``stream_pieces``, the stream knobs).
    """

    name = "compatible"
    base_path = "/v1"
    ROUTES = [
        ("GET", r"/v1/models", "list_models"),
        ("POST", r"/v1/chat/completions", "chat_completions"),
        ("POST", r"/v1/responses", "maybe_responses"),
    ]
    PUBLIC = frozenset()
    KNOBS = {"models_garbage": False, "native_responses": False, "resolve_snapshots": False}

    def __init__(self, api_key: str | None = None, models: tuple[str, ...] = SERVED_MODELS):
        super().__init__(api_key=api_key, chat_models=set(models))
        self.models = tuple(models)
        self.created = synth.now()

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        body = {
            "object": "error",
            "message": message or ERROR_TYPES.get(status, "Error"),
            "type": ERROR_TYPES.get(status, "Error"),
            "param": extra.get("param"),
            "code": status,
        }
        return json_response(body, status)

    def not_found(self, request: RecordedRequest) -> Response:
        return json_response({"detail": "Not Found"}, 404)

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return json_response({"error": "Unauthorized"}, 401)
        return None

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return []

    def _model_not_found(self, model: str):
        return self.fail(404, f"The model `{model}` does not exist.", param="model")

    def list_models(self, request: RecordedRequest) -> Response:
        if self.models_garbage:
            return Response(200, b"<html>not a model list</html>", [("content-type", "text/html")])
        data = [
            {
                "id": model,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": MAX_MODEL_LEN,
                "permission": [],
            }
            for model in self.models
        ]
        return json_response({"object": "list", "data": data})

    def maybe_responses(self, request: RecordedRequest) -> Response:
        if not self.native_responses:
            return self.not_found(request)
        return self.create_response(request)
