"""A fake of the OpenAI API: embeddings, chat completions, responses, images.

Served under ``<origin>/v1`` with ``Authorization: Bearer <api_key>``. Errors
use OpenAI's ``{"error": {"message", "type", "param", "code"}}`` shape.
The Chat Completions and Responses helpers at module level are shared with the
OpenRouter fake, whose chat and responses endpoints are OpenAI-compatible.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

from . import agentic, png, synth
from .server import (
    FakeUpstream,
    RecordedRequest,
    Response,
    json_response,
    sse_data,
    sse_event,
    sse_response,
)

# Embedding model -> native dimensions.
EMBEDDING_MODELS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# The real API answers ada requests with the name of the model actually serving them.
EMBEDDING_ANSWER_MODEL = {"text-embedding-ada-002": "text-embedding-ada-002-v2"}

# Alias -> the dated snapshot the real API names in its answers.
CHAT_SNAPSHOTS = {
    "gpt-4o": "gpt-4o-2024-08-06",
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "gpt-4.1": "gpt-4.1-2025-04-14",
    "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
    "gpt-4.1-nano": "gpt-4.1-nano-2025-04-14",
    "gpt-5": "gpt-5-2025-08-07",
    "gpt-5-mini": "gpt-5-mini-2025-08-07",
    "gpt-5-nano": "gpt-5-nano-2025-08-07",
    "o3": "o3-2025-04-16",
    "o4-mini": "o4-mini-2025-04-16",
    "gpt-3.5-turbo": "gpt-3.5-turbo-0125",
}
DEFAULT_CHAT_MODELS = frozenset(CHAT_SNAPSHOTS) | frozenset(CHAT_SNAPSHOTS.values())
REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")

IMAGE_SIZES = {
    "gpt-image-1": ("1024x1024", "1536x1024", "1024x1536", "auto"),
    "gpt-image-1-mini": ("1024x1024", "1536x1024", "1024x1536", "auto"),
    "dall-e-3": ("1024x1024", "1792x1024", "1024x1792"),
    "dall-e-2": ("256x256", "512x512", "1024x1024"),
}
IMAGE_QUALITIES = {
    "gpt-image-1": ("low", "medium", "high", "auto"),
    "gpt-image-1-mini": ("low", "medium", "high", "auto"),
    "dall-e-3": ("standard", "hd"),
    "dall-e-2": ("standard",),
}
# gpt-image output tokens per image, from OpenAI's pricing table: (quality, square?) -> tokens.
GPT_IMAGE_TOKENS = {
    ("low", True): 272,
    ("medium", True): 1056,
    ("high", True): 4160,
    ("low", False): 408,
    ("medium", False): 1584,
    ("high", False): 6240,
}

SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
DEFAULT_MESSAGES = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this resource.", "invalid_request_error", None),
    404: ("The requested resource was not found.", "invalid_request_error", None),
    409: ("The request conflicted with another request.", "invalid_request_error", None),
    429: (
        "Rate limit reached for requests. Please try again in 1s.",
        "requests",
        "rate_limit_exceeded",
    ),
    500: (SERVER_ERROR, "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The server is overloaded or not ready yet.", "server_error", None),
    504: ("Gateway timeout.", "server_error", None),
}
INVALID_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON. If you have trouble figuring out how to fix this, please "
    "contact us through our help center at help.openai.com.)"
)
MISSING_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field "
    "(with blank username) if you're accessing the API from your browser and are prompted for "
    "a username and password. You can obtain an API key from "
    "https://platform.openai.com/account/api-keys."
)
MODERATION_MODELS = frozenset(
    {
        "omni-moderation-latest",
        "omni-moderation-2024-09-26",
        "text-moderation-latest",
        "text-moderation-stable",
    }
)
MODERATION_CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
SAFETY_REJECTION = "Your request was rejected as a result of our safety system."


# --------------------------------------------------------------------------- shared helpers


def openai_error(
    status: int,
    message: str | None = None,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
) -> Response:
    fallback_type = "server_error" if status >= 500 else "invalid_request_error"
    default_message, default_type, default_code = DEFAULT_MESSAGES.get(
        status, ("Request failed.", fallback_type, None)
    )
    if message is None:  # a bare status (fail_next) gets the usual code for it too
        message, code = default_message, code or default_code
    error = {"message": message, "type": type or default_type, "param": param, "code": code}
    return json_response({"error": error}, status)


def mask_key(key: str) -> str:
    if len(key) <= 8:
        return "*" * len(key)
    return key[:3] + "*" * (len(key) - 7) + key[-4:]


def bearer_token(request: RecordedRequest) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def parse_embedding_input(value: Any) -> list[tuple[str, int]] | None:
    """``input`` as (seed text, token count) pairs; None when the API refuses it.

    An empty string is answered with an embedding and 0 prompt tokens, as the gateway's
    specification states of the provider."""

    def is_token(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if isinstance(value, str):
        return [(value, synth.count_tokens(value))]
    if not isinstance(value, list) or not value:
        return None
    if all(is_token(x) for x in value):
        return [("tokens:" + ",".join(map(str, value)), len(value))]
    if all(isinstance(x, str) for x in value):
        return [(x, synth.count_tokens(x)) for x in value]
    if all(isinstance(x, list) and x and all(is_token(t) for t in x) for x in value):
        return [("tokens:" + ",".join(map(str, x)), len(x)) for x in value]
    return None


def embedding_vector(seed: str, model: str, native: int, dims: int | None) -> list[float]:
    values = synth.vector(seed, native, salt=model)
    if dims is not None and dims < native:
        # Shortened -3- embeddings come back re-normalised, like the real API.
        values = [round(v, 8) for v in synth.unit(values[:dims])]
    return values


def content_text(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of text-like parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return " ".join(texts)
    return ""


@dataclass
class Turn:
    """What the fake model "says" (text, or a call of a tool) and what it costs."""

    reply: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = "stop"
    tool_call: agentic.ToolCall | None = None
    structured: bool = False  # ``reply`` is a JSON document (streamed in pieces of characters)


def plan_turn(
    prompt_texts: list[str],
    last_user_text: str,
    reply_text: str | None,
    limit: int | None = None,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    history_tokens: int = 0,
    action: agentic.Action | None = None,
) -> Turn:
    if action is None:
        action = agentic.Action(reply_text if reply_text is not None else f"Echo: {last_user_text}")
    call = action.call
    # Completion tokens are those of what the model wrote: the text, or the call's arguments.
    produced = call.arguments if call is not None else action.text
    finish = "tool_calls" if call is not None else "stop"
    if limit is not None and synth.count_tokens(produced) > limit:
        produced, finish = synth.truncate_words(produced, limit), "length"
    prompt_tokens = history_tokens + sum(synth.count_tokens(t) for t in prompt_texts)
    return Turn(
        reply="" if call is not None else produced,
        prompt_tokens=prompt_tokens,
        completion_tokens=synth.count_tokens(produced) + reasoning_tokens,
        reasoning_tokens=reasoning_tokens,
        cached_tokens=min(cached_tokens, prompt_tokens),
        finish_reason=finish,
        tool_call=agentic.ToolCall(call.name, produced) if call is not None else None,
        structured=action.structured,
    )


def chat_turn(
    body: dict, reply_text: str | None, reasoning_tokens: int = 0, cached_tokens: int = 0
) -> Turn:
    """Raises :class:`agentic.UnknownTool` for a forced function ``tools`` lacks."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    texts = [content_text(m.get("content")) for m in messages]
    dialogue = agentic.chat_dialogue(messages, content_text)
    action = agentic.decide(
        agentic.chat_tools(body),
        agentic.tool_choice(body),
        agentic.chat_format(body),
        dialogue,
        reply_text,
    )
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    return plan_turn(
        texts,
        dialogue.last_user,
        reply_text,
        limit if isinstance(limit, int) else None,
        reasoning_tokens,
        cached_tokens,
        action=action,
    )


def response_turn(
    body: dict,
    reply_text: str | None,
    limit: int | None,
    reasoning_tokens: int = 0,
    cached_tokens: int = 0,
    history_tokens: int = 0,
    earlier: list[dict] | tuple = (),
) -> Turn:
    """The turn of a Responses request; ``earlier``: the previous response's output items.
    Raises :class:`agentic.UnknownTool` for a forced function ``tools`` lacks."""
    texts, last_user = _response_input_texts(body)
    raw = body.get("input")
    items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []
    earlier = [i for i in earlier if isinstance(i, dict)]
    dialogue = agentic.responses_dialogue(items, last_user, content_text, earlier)
    action = agentic.decide(
        agentic.responses_tools(body),
        agentic.tool_choice(body),
        agentic.responses_format(body),
        dialogue,
        reply_text,
    )
    return plan_turn(
        texts,
        last_user,
        reply_text,
        limit,
        reasoning_tokens,
        cached_tokens,
        history_tokens=history_tokens,
        action=action,
    )


def unknown_tool_message(name: str) -> str:
    return f"Invalid value for 'tool_choice': function '{name}' is not in 'tools'."


def chat_message(turn: Turn) -> dict:
    if turn.tool_call is None:
        return {"role": "assistant", "content": turn.reply, "refusal": None, "annotations": []}
    call = {
        "id": synth.random_id("call_", 24),
        "type": "function",
        "function": {"name": turn.tool_call.name, "arguments": turn.tool_call.arguments},
    }
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [call],
        "refusal": None,
        "annotations": [],
    }


def stream_pieces(turn: Turn, pieces: int) -> list[str]:
    """What a stream sends of the answer, piece by piece: words of text; characters of a JSON
    document or of a call's arguments (compact JSON has few spaces)."""
    if turn.tool_call is not None:
        return synth.split_chars(turn.tool_call.arguments, pieces)
    if turn.structured:
        return synth.split_chars(turn.reply, pieces)
    return synth.split_pieces(turn.reply, pieces)


def chat_usage(turn: Turn, n: int = 1) -> dict:
    completion = turn.completion_tokens * n
    return {
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": turn.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": turn.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": turn.reasoning_tokens * n,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_completion(
    turn: Turn,
    model: str,
    completion_id: str,
    n: int = 1,
    extra: dict | None = None,
    choice_extra: dict | None = None,
    usage: dict | None = None,
) -> dict:
    choices = [
        {
            "index": i,
            "message": chat_message(turn),
            "logprobs": None,
            "finish_reason": turn.finish_reason,
            **(choice_extra or {}),
        }
        for i in range(n)
    ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": synth.now(),
        "model": model,
        "choices": choices,
        "usage": usage or chat_usage(turn, n),
        "service_tier": "default",
        "system_fingerprint": "fp_fake0000",
        **(extra or {}),
    }


def chat_chunks(
    turn: Turn,
    model: str,
    completion_id: str,
    include_usage: bool,
    extra: dict | None = None,
    finish_extra: dict | None = None,
    usage: dict | None = None,
    pieces: int = 4,
) -> list[dict]:
    """The chunk objects of a streamed completion, in order (without ``[DONE]``)."""
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": synth.now(),
        "model": model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake0000",
        **(extra or {}),
    }

    def chunk(delta: dict, finish: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice.update(finish_extra or {})
        body = {**base, "choices": [choice]}
        if include_usage:
            body["usage"] = None  # the real API sends an explicit null until the usage chunk
        return body

    call = turn.tool_call
    if call is None:
        chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
        chunks += [chunk({"content": piece}) for piece in stream_pieces(turn, pieces)]
    else:
        # As the API streams a call: id, type and name first with empty arguments, then the
        # arguments in pieces, each delta naming the call by its index.
        opening = {
            "index": 0,
            "id": synth.random_id("call_", 24),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        chunks = [
            chunk({"role": "assistant", "content": None, "tool_calls": [opening], "refusal": None})
        ]
        chunks += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in stream_pieces(turn, pieces)
        ]
    chunks.append(chunk({}, turn.finish_reason))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": usage or chat_usage(turn)})
    return chunks


# --------------------------------------------------------------------------- the fake


class OpenAIFake(FakeUpstream):
    """OpenAI API simulator.

    Args:
        api_key: the only accepted bearer token; None accepts any (or none).
        chat_models: model ids accepted by chat completions and responses
            (default: common aliases and their dated snapshots).

    Requests with ``tools`` or a JSON response format get tool calls, answers that use tool
    results and JSON documents (:mod:`fake_upstreams.agentic`); reasoning models on
    ``/v1/responses`` answer a ``reasoning`` item first.

    Knobs (attributes; :meth:`reset` restores them):
        reply_text: fixed assistant text instead of ``"Echo: <last user text>"`` (or of the
            tool-result sentence; in a JSON document, its first free-form string).
        reverse_embeddings: answer embedding ``data`` in reversed index order.
        resolve_snapshots: name the dated snapshot in answers (``gpt-4o-mini`` ->
            ``gpt-4o-mini-2024-07-18``) as the real API does.
        reasoning_tokens: reasoning tokens added to every completion's usage.
        cached_tokens: prompt tokens reported as cached (capped at the prompt).
        moderation_terms: words that make ``/v1/moderations`` flag a text (violence).
        self_harm_terms: words that make it flag a text for self-harm (and self-harm/intent).
        image_usage: False answers gpt-image requests without ``usage`` (no token counts).
        stream_pieces: how many content events a streamed reply is split into.
        usage_delay: seconds between a stream's last content event and its usage
            (chat's usage-only chunk, responses' final event).
        call_tools: False answers in text even when ``tools`` are offered, on chat completions
            and responses (a coding agent such as Codex offers its tools on every turn, and Open
            WebUI its built-in ones with every message; one plain answer ends the turn).
        web_searches: the hosted web searches made when the hosted ``web_search`` tool is
            offered on ``/v1/responses``: that many ``web_search_call`` output items before the
            answer (each one a search the real API bills).
        plus the stream/latency knobs of :class:`FakeUpstream`.
    """

    name = "openai"
    base_path = "/v1"
    ROUTES = [
        ("POST", r"/v1/embeddings", "embeddings"),
        ("POST", r"/v1/chat/completions", "chat_completions"),
        ("POST", r"/v1/responses", "create_response"),
        ("GET", r"/v1/responses/(?P<response_id>[^/]+)", "get_response"),
        ("POST", r"/v1/images/generations", "images_generations"),
        ("POST", r"/v1/moderations", "moderations"),
        ("GET", r"/files/(?P<file_id>[A-Za-z0-9_-]+)\.png", "file"),
    ]
    PUBLIC = frozenset({"file"})  # image URLs are pre-signed in the real API: no bearer token
    KNOBS = {
        "reply_text": None,
        "reverse_embeddings": False,
        "resolve_snapshots": True,
        "reasoning_tokens": 0,
        "cached_tokens": 0,
        "moderation_terms": ("kill", "bomb"),
        "self_harm_terms": ("hurt myself",),
        "image_usage": True,
        "stream_pieces": 4,
        "usage_delay": 0.0,
        "call_tools": True,
        "web_searches": 1,
    }

    def __init__(self, api_key: str | None = None, chat_models: set[str] | None = None):
        super().__init__()
        self.api_key = api_key
        self.chat_models = set(chat_models) if chat_models is not None else set(DEFAULT_CHAT_MODELS)
        self._responses: dict[str, dict] = {}
        self._files: dict[str, bytes] = {}

    def _reset_state(self) -> None:
        self._responses.clear()
        self._files.clear()

    # -- protocol hooks ----------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return openai_error(status, message, **extra)

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400, INVALID_JSON, type="invalid_request_error")

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, f"Invalid URL ({request.method} {request.path})")

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is None:
            return None
        token = bearer_token(request)
        if token is None:
            return self.error(401, MISSING_KEY, type="invalid_request_error")
        if token != self.api_key:
            return self.error(
                401,
                f"Incorrect API key provided: {mask_key(token)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        return None

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return [("x-request-id", synth.hex_id("req_", 16)), ("openai-version", "2020-10-01")]

    # -- validation helpers ------------------------------------------------------------

    def _missing(self, name: str):
        return self.fail(
            400,
            f"Missing required parameter: '{name}'.",
            type="invalid_request_error",
            param=name,
            code="missing_required_parameter",
        )

    def _model_not_found(self, model: str):
        return self.fail(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            type="invalid_request_error",
            code="model_not_found",
        )

    def _invalid_value(self, param: str, value: Any, allowed: tuple[str, ...]):
        options = ", ".join(f"'{a}'" for a in allowed[:-1])
        options = f"{options}, and '{allowed[-1]}'" if len(allowed) > 1 else f"'{allowed[0]}'"
        return self.fail(
            400,
            f"Invalid value: '{value}'. Supported values are: {options}.",
            type="invalid_request_error",
            param=param,
            code="invalid_value",
        )

    def _answer_model(self, model: str) -> str:
        return CHAT_SNAPSHOTS.get(model, model) if self.resolve_snapshots else model

    def _check_reasoning_params(self, model: str, body: dict) -> None:
        if not model.startswith(REASONING_PREFIXES):
            return
        if body.get("max_tokens") is not None:
            raise self.fail(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                param="max_tokens",
                code="unsupported_parameter",
            )
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            raise self.fail(
                400,
                f"Unsupported value: 'temperature' does not support {temperature} with this "
                "model. Only the default (1) value is supported.",
                param="temperature",
                code="unsupported_value",
            )

    # -- /v1/embeddings ----------------------------------------------------------------

    def embeddings(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if not model:
            raise self.fail(400, "you must provide a model parameter")
        if model not in EMBEDDING_MODELS:
            raise self._model_not_found(model)
        if "input" not in body:
            raise self._missing("input")
        inputs = parse_embedding_input(body["input"])
        if inputs is None:
            raise self.fail(
                400,
                "'$.input' is invalid. Please check the API reference: "
                "https://platform.openai.com/docs/api-reference.",
            )
        native = EMBEDDING_MODELS[model]
        dims = body.get("dimensions")
        if dims is not None:
            self._check_dimensions(model, dims, native)
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise self._invalid_value("encoding_format", encoding, ("float", "base64"))
        data = []
        for index, (seed, _tokens) in enumerate(inputs):
            values = embedding_vector(seed, model, native, dims)
            encoded = synth.float32_base64(values) if encoding == "base64" else values
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        if self.reverse_embeddings:
            data.reverse()
        tokens = sum(n for _seed, n in inputs)
        return json_response(
            {
                "object": "list",
                "data": data,
                "model": EMBEDDING_ANSWER_MODEL.get(model, model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    def _check_dimensions(self, model: str, dims: Any, native: int) -> None:
        if not model.startswith("text-embedding-3"):
            raise self.fail(400, "This model does not support specifying dimensions.")
        if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= native:
            raise self.fail(
                400,
                f"Invalid value for 'dimensions' = {dims}. Must be between 1 and {native}.",
                param="dimensions",
            )

    # -- /v1/moderations ---------------------------------------------------------------

    def moderations(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model") or "omni-moderation-latest"
        if model not in MODERATION_MODELS:
            raise self._model_not_found(model)
        if "input" not in body:
            raise self._missing("input")
        value = body["input"]
        texts = [value] if isinstance(value, str) else value
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise self.fail(400, "'$.input' is invalid.", param="input")
        results = [self._moderation_result(text.lower()) for text in texts]
        answer_model = "omni-moderation-2024-09-26" if model.startswith("omni") else model
        return json_response(
            {"id": synth.hex_id("modr-", 24), "model": answer_model, "results": results}
        )

    def _moderation_result(self, lowered: str) -> dict:
        """One text's result in OpenAI's shape: a violent term flags `violence` (0.93, with
        `harassment/threatening` scored 0.41 but not flagged), a self-harm term flags
        `self-harm` (0.91) and `self-harm/intent` (0.88); every other score is 0.0001."""
        scores = dict.fromkeys(MODERATION_CATEGORIES, 0.0001)
        flagged: set[str] = set()
        if any(term in lowered for term in self.moderation_terms):
            scores.update({"violence": 0.93, "harassment/threatening": 0.41})
            flagged.add("violence")
        if any(term in lowered for term in self.self_harm_terms):
            scores.update({"self-harm": 0.91, "self-harm/intent": 0.88})
            flagged |= {"self-harm", "self-harm/intent"}
        return {
            "flagged": bool(flagged),
            "categories": {name: name in flagged for name in MODERATION_CATEGORIES},
            "category_scores": scores,
            "category_applied_input_types": {name: ["text"] for name in MODERATION_CATEGORIES},
        }

    # -- /v1/chat/completions ----------------------------------------------------------

    def chat_completions(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if not model:
            raise self.fail(400, "you must provide a model parameter")
        messages = body.get("messages")
        if messages is None:
            raise self._missing("messages")
        if not isinstance(messages, list) or not messages:
            raise self.fail(
                400,
                "Invalid 'messages': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.",
                param="messages",
                code="empty_array",
            )
        if model not in self.chat_models:
            raise self._model_not_found(model)
        self._check_reasoning_params(model, body)
        stream = bool(body.get("stream"))
        if body.get("stream_options") is not None and not stream:
            raise self.fail(
                400,
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        try:
            offered = body if self.call_tools else {**body, "tools": []}
            turn = chat_turn(offered, self.reply_text, self.reasoning_tokens, self.cached_tokens)
        except agentic.UnknownTool as exc:
            raise self.fail(400, unknown_tool_message(exc.name), param="tool_choice") from None
        completion_id = synth.random_id("chatcmpl-", 29)
        answer_model = self._answer_model(model)
        if not stream:
            n = body.get("n") or 1
            return json_response(chat_completion(turn, answer_model, completion_id, n=n))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = chat_chunks(
            turn, answer_model, completion_id, include_usage, pieces=self.stream_pieces
        )
        events = [sse_data(c) for c in chunks] + [sse_data("[DONE]")]
        error = {
            "error": {"message": SERVER_ERROR, "type": "server_error", "param": None, "code": None}
        }
        pauses = {len(chunks) - 1: self.usage_delay} if include_usage else {}
        return sse_response(events, error_event=lambda _i: sse_data(error), pauses=pauses)

    # -- /v1/responses -----------------------------------------------------------------

    def create_response(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        model = body.get("model")
        if not model:
            raise self._missing("model")
        if model not in self.chat_models:
            raise self.fail(
                400,
                f"The requested model '{model}' does not exist.",
                param="model",
                code="model_not_found",
            )
        self._check_reasoning_params(model, {"temperature": body.get("temperature")})
        limit = body.get("max_output_tokens")
        if limit is not None and (not isinstance(limit, int) or limit < 16):
            raise self.fail(
                400,
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value "
                f">= 16, but got {limit} instead.",
                param="max_output_tokens",
                code="integer_below_min_value",
            )
        history, earlier = self._previous_conversation(body)
        try:
            turn = response_turn(
                body if self.call_tools else {**body, "tools": []},
                self.reply_text,
                limit,
                self.reasoning_tokens,
                self.cached_tokens,
                history_tokens=history,
                earlier=earlier,
            )
        except agentic.UnknownTool as exc:
            raise self.fail(400, unknown_tool_message(exc.name), param="tool_choice") from None
        reasoning = None
        if model.startswith(REASONING_PREFIXES):
            reasoning = reasoning_item(body, turn)
        response_id = synth.hex_id("resp_", 24)
        output = self._response_output(body, turn, reasoning)
        final = _response_object(body, self._answer_model(model), response_id, output, turn)
        if body.get("store", True) is not False:
            self._responses[response_id] = final
        if not body.get("stream"):
            return json_response(final)
        return _response_stream(
            final, turn, pieces=self.stream_pieces, usage_delay=self.usage_delay
        )

    def _previous_conversation(self, body: dict) -> tuple[int, list]:
        """The tokens and the output of the response ``previous_response_id`` names."""
        previous_id = body.get("previous_response_id")
        if not previous_id:
            return 0, []
        previous = self._responses.get(previous_id)
        if previous is None:
            raise self.fail(
                404,
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        # The whole earlier conversation is input again, and billed as such.
        history = previous["usage"]["input_tokens"] + previous["usage"]["output_tokens"]
        return history, previous["output"]

    def _response_output(self, body: dict, turn: Any, reasoning: Any) -> list:
        output = response_output(turn, reasoning)
        if offers_web_search(body):
            searches = [web_search_item(_query(body)) for _ in range(self.web_searches)]
            output[len(output) - 1 : len(output) - 1] = searches  # before the answer
        return output

    def get_response(self, request: RecordedRequest, response_id: str) -> Response:
        stored = self._responses.get(response_id)
        if stored is None:
            raise self.fail(
                404, f"Response with id '{response_id}' not found.", param="response_id"
            )
        return json_response(stored)

    # -- /v1/images/generations --------------------------------------------------------

    def images_generations(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        prompt = body.get("prompt")
        if not prompt:
            raise self._missing("prompt")
        model = body.get("model") or "dall-e-2"  # the real API's default
        if model not in IMAGE_SIZES:
            raise self._model_not_found(model)
        gpt_image = model.startswith("gpt-image")
        n = self._image_count(body, model)
        size, quality = self._image_options(body, model, gpt_image)
        if synth.has_word(prompt, "forbidden"):
            raise self._image_refusal(gpt_image)
        resolved_size = "1024x1024" if size == "auto" else size
        width, height = (int(x) for x in resolved_size.split("x"))
        thumb = png.thumbnail_size(width, height)
        images = [png.make_png(*thumb, seed=f"{model}|{prompt}|{i}") for i in range(n)]
        created = synth.now()
        if gpt_image:
            return json_response(
                self._gpt_image_answer(body, prompt, images, quality, resolved_size, created)
            )
        data = self._dall_e_data(body, model, prompt, images)
        return json_response({"created": created, "data": data})

    def _image_count(self, body: dict, model: str) -> int:
        n = body.get("n", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise self.fail(400, f"Invalid 'n': expected an integer >= 1, but got {n}.", param="n")
        max_n = 1 if model == "dall-e-3" else 10
        if n > max_n:
            raise self.fail(
                400,
                f"Invalid 'n': integer above maximum value. Expected a value <= {max_n}, "
                f"but got {n} instead.",
                param="n",
                code="integer_above_max_value",
            )
        return n

    def _image_options(self, body: dict, model: str, gpt_image: bool) -> tuple[str, str]:
        """The size and quality asked for (or the model's defaults), refused as OpenAI does."""
        size = body.get("size") or ("auto" if gpt_image else "1024x1024")
        if size not in IMAGE_SIZES[model]:
            raise self._invalid_value("size", size, IMAGE_SIZES[model])
        quality = body.get("quality") or ("auto" if gpt_image else "standard")
        if quality not in IMAGE_QUALITIES[model]:
            raise self._invalid_value("quality", quality, IMAGE_QUALITIES[model])
        if gpt_image and body.get("response_format") is not None:
            raise self.fail(
                400,
                "Unknown parameter: 'response_format'.",
                param="response_format",
                code="unknown_parameter",
            )
        return size, quality

    def _dall_e_data(self, body: dict, model: str, prompt: str, images: list[bytes]) -> list:
        """DALL-E's images, as base64 or as URLs of files this fake then serves."""
        response_format = body.get("response_format") or "url"
        if response_format not in ("url", "b64_json"):
            raise self._invalid_value("response_format", response_format, ("url", "b64_json"))
        data = []
        for image in images:
            if response_format == "b64_json":
                item = {"b64_json": _b64(image)}
            else:
                file_id = synth.random_id("img-", 24)
                self._files[file_id] = image
                item = {"url": f"{self.origin}/files/{file_id}.png"}
            if model == "dall-e-3":
                item["revised_prompt"] = f"A detailed, high-quality image of {prompt}"
            data.append(item)
        return data

    def _image_refusal(self, gpt_image: bool):
        if gpt_image:
            return self.fail(
                400,
                f"{SAFETY_REJECTION} Your request may contain content that is not allowed by "
                "our safety system.",
                type="image_generation_user_error",
                code="moderation_blocked",
            )
        return self.fail(
            400,
            f"{SAFETY_REJECTION} Your prompt may contain text that is not allowed by our "
            "safety system.",
            type="invalid_request_error",
            code="content_policy_violation",
        )

    def _gpt_image_answer(
        self, body: dict, prompt: str, images: list[bytes], quality: str, size: str, created: int
    ) -> dict:
        quality = "high" if quality == "auto" else quality
        per_image = GPT_IMAGE_TOKENS[(quality, size == "1024x1024")]
        text_tokens = synth.count_tokens(prompt)
        background = body.get("background") or "auto"
        answer = {
            "created": created,
            "background": "opaque" if background == "auto" else background,
            "data": [{"b64_json": _b64(image)} for image in images],
            "output_format": body.get("output_format") or "png",
            "quality": quality,
            "size": size,
            "usage": {
                "input_tokens": text_tokens,
                "input_tokens_details": {"text_tokens": text_tokens, "image_tokens": 0},
                "output_tokens": per_image * len(images),
                "total_tokens": text_tokens + per_image * len(images),
            },
        }
        if not self.image_usage:
            del answer["usage"]
        return answer

    def file(self, request: RecordedRequest, file_id: str) -> Response:
        image = self._files.get(file_id)
        if image is None:
            return Response(404, b"Not Found", [("content-type", "text/plain")])
        return Response(200, image, [("content-type", "image/png")])


# --------------------------------------------------------------------------- responses helpers


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _response_input_texts(body: dict) -> tuple[list[str], str]:
    """All text the model reads (instructions + input items) and the last user text."""
    texts = []
    last_user = ""
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") in (None, "message"):
            text = content_text(item.get("content"))
        else:
            text = content_text(item.get("output"))  # tool outputs are input too
        texts.append(text)
        if item.get("role") == "user":
            last_user = text
    return texts, last_user


def response_output(turn: Turn, reasoning: dict | None = None) -> list[dict]:
    """The output items of a finished response: the reasoning item (reasoning models), then
    the message or the function call."""
    status = "incomplete" if turn.finish_reason == "length" else "completed"
    items = [reasoning] if reasoning is not None else []
    if turn.tool_call is not None:
        items.append(
            _function_call_item(
                synth.hex_id("fc_", 24),
                synth.random_id("call_", 24),
                turn.tool_call.name,
                turn.tool_call.arguments,
                status,
            )
        )
    else:
        items.append(_message_item(synth.hex_id("msg_", 24), turn.reply, status))
    return items


HOSTED_SEARCH_TOOLS = ("web_search", "web_search_2025_08_26")


def offers_web_search(body: dict) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("type") in HOSTED_SEARCH_TOOLS for tool in tools
    )


def _query(body: dict) -> str:
    return _response_input_texts(body)[1][:100] or "search"


def web_search_item(query: str, status: str = "completed") -> dict:
    """One hosted web search as the API answers it (`action.sources` only when `include` asks
    for them: left out)."""
    return {
        "id": synth.hex_id("ws_", 24),
        "type": "web_search_call",
        "status": status,
        "action": {"type": "search", "query": query},
    }


def reasoning_item(body: dict, turn: Turn) -> dict:
    """A reasoning model's ``reasoning`` item: a summary only when ``reasoning.summary`` asks
    for one, ``encrypted_content`` only when ``include`` asks for it, as the API answers."""
    requested = body.get("reasoning")
    wants_summary = isinstance(requested, dict) and requested.get("summary") in (
        "auto",
        "concise",
        "detailed",
    )
    if turn.tool_call is not None:
        name = turn.tool_call.name
        thought = f"**Choosing a tool**\n\nThe request is best served by the {name} tool."
    elif turn.structured:
        thought = "**Writing the JSON document**\n\nThe answer follows the requested format."
    else:
        thought = "**Answering**\n\nThe simulator repeats the request back."
    item: dict[str, Any] = {
        "id": synth.hex_id("rs_", 24),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": thought}] if wants_summary else [],
    }
    include = body.get("include")
    if isinstance(include, list) and "reasoning.encrypted_content" in include:
        # Opaque to the client, as the real one is; the same for the same answer.
        digest = hashlib.sha256(f"{thought}\x00{turn.reply}".encode()).digest()
        item["encrypted_content"] = "gAAAAAB" + base64.urlsafe_b64encode(digest * 3).decode()
    return item


def _response_object(
    body: dict,
    model: str,
    response_id: str,
    output: list[dict],
    turn: Turn,
    *,
    finished: bool = True,
) -> dict:
    incomplete = turn.finish_reason == "length"
    status = ("incomplete" if incomplete else "completed") if finished else "in_progress"
    created = synth.now()
    requested = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
    reasoning = (
        {"effort": requested.get("effort") or "medium", "summary": requested.get("summary")}
        if model.startswith(REASONING_PREFIXES)
        else {
            "effort": None,
            "summary": None,
        }
    )
    text = body.get("text") if isinstance(body.get("text"), dict) else {}
    text_format = text.get("format") if isinstance(text.get("format"), dict) else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "completed_at": created if finished else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if finished and incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": model,
        "output": output if finished else [],
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": None,
        "reasoning": reasoning,
        "safety_identifier": None,
        "service_tier": "default",
        "store": body.get("store", True) is not False,
        "temperature": body.get("temperature", 1.0),
        "text": {"format": text_format or {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": _echo_tools(body),
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": _response_usage(turn) if finished else None,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def _echo_tools(body: dict) -> list:
    """The request's tools as the API echoes them: function tools with every field, strict by
    default."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    echoed = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function":
            strict = tool.get("strict")
            tool = {
                "type": "function",
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": tool.get("parameters"),
                "strict": True if strict is None else strict,
            }
        echoed.append(tool)
    return echoed


def _response_usage(turn: Turn) -> dict:
    return {
        "input_tokens": turn.prompt_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": turn.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }


def _message_item(message_id: str, text: str | None, status: str) -> dict:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": message_id,
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }


def _function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
    }


def _text_part(text: str) -> dict:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _response_stream(
    final: dict,
    turn: Turn,
    *,
    pieces: int = 4,
    usage_delay: float = 0.0,
) -> Response:
    """The events of a streamed response, in the API's order, item by item."""
    sequence = itertools.count()
    started = {
        **final,
        "status": "in_progress",
        "completed_at": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, {"type": kind, "sequence_number": next(sequence), **fields})

    events = [
        event("response.created", response=started),
        event("response.in_progress", response=started),
    ]
    for index, item in enumerate(final["output"]):
        if item["type"] == "reasoning":
            events += _reasoning_events(event, index, item, pieces)
        elif item["type"] == "web_search_call":
            events += _web_search_events(event, index, item)
        elif item["type"] == "function_call":
            events += _function_call_events(event, index, item, stream_pieces(turn, pieces))
        else:
            events += _message_events(event, index, item, stream_pieces(turn, pieces))
    events.append(
        event(
            "response.incomplete" if final["status"] == "incomplete" else "response.completed",
            response=final,
        )
    )

    def error_event(index: int) -> bytes:
        return sse_event(
            "error",
            {
                "type": "error",
                "code": "server_error",
                "message": SERVER_ERROR,
                "param": None,
                "sequence_number": index,
            },
        )

    return sse_response(events, error_event=error_event, pauses={len(events) - 1: usage_delay})


def _message_events(event, index: int, item: dict, pieces: list[str]) -> list[bytes]:
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    events = [
        event(
            "response.output_item.added",
            output_index=index,
            item=_message_item(item["id"], None, "in_progress"),
        ),
        event("response.content_part.added", **where, part=_text_part("")),
    ]
    for piece in pieces:
        events.append(event("response.output_text.delta", **where, delta=piece, logprobs=[]))
    return events + [
        event("response.output_text.done", **where, text=text, logprobs=[]),
        event("response.content_part.done", **where, part=_text_part(text)),
        event("response.output_item.done", output_index=index, item=item),
    ]


def _function_call_events(event, index: int, item: dict, pieces: list[str]) -> list[bytes]:
    opened = {**item, "status": "in_progress", "arguments": ""}
    where = {"item_id": item["id"], "output_index": index}
    events = [event("response.output_item.added", output_index=index, item=opened)]
    for piece in pieces:
        events.append(event("response.function_call_arguments.delta", **where, delta=piece))
    return events + [
        event("response.function_call_arguments.done", **where, arguments=item["arguments"]),
        event("response.output_item.done", output_index=index, item=item),
    ]


def _web_search_events(event, index: int, item: dict) -> list[bytes]:
    where = {"item_id": item["id"], "output_index": index}
    return [
        event(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress"}
        ),
        event("response.web_search_call.in_progress", **where),
        event("response.web_search_call.searching", **where),
        event("response.web_search_call.completed", **where),
        event("response.output_item.done", output_index=index, item=item),
    ]


def _reasoning_events(event, index: int, item: dict, pieces: int) -> list[bytes]:
    opened = {**item, "summary": []}
    events = [event("response.output_item.added", output_index=index, item=opened)]
    for number, part in enumerate(item["summary"]):
        where = {"item_id": item["id"], "output_index": index, "summary_index": number}
        events.append(
            event(
                "response.reasoning_summary_part.added",
                **where,
                part={"type": "summary_text", "text": ""},
            )
        )
        for piece in synth.split_pieces(part["text"], pieces):
            events.append(event("response.reasoning_summary_text.delta", **where, delta=piece))
        events += [
            event("response.reasoning_summary_text.done", **where, text=part["text"]),
            event("response.reasoning_summary_part.done", **where, part=part),
        ]
    return events + [event("response.output_item.done", output_index=index, item=item)]
