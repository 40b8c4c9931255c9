"""A fake of the Anthropic Messages API (``POST /v1/messages``), streamed and not.

Served under ``<origin>/v1`` with ``x-api-key: <api_key>`` (or ``Authorization: Bearer``, as
the SDK sends it) and ``anthropic-version``. Errors use
Anthropic's ``{"type": "error", "error": {"type", "message"}, "request_id"}`` shape (529
``overloaded_error`` included); a stream is Anthropic's named SSE events (``message_start``,
``content_block_start/delta/stop`` for text, thinking and tool_use, ``ping``,
``message_delta``, ``message_stop``) and, with ``stream_fail_mode = "error_event"``, its
``error`` event.

The model's turn is the other fakes' (:mod:`fake_upstreams.agentic`): a tool call chosen by
word overlap, ``The <tool> tool returned: <output>`` after tool results, a JSON document for
``output_config.format``, ``Echo: <last user text>`` otherwise. ``thinking`` (a budget, or
adaptive with ``output_config.effort``) adds a thinking block (its tokens in
``output_tokens``). The request is checked as the API checks it: unknown top-level fields, a
missing ``max_tokens``, a thinking budget under 1,024 or not under ``max_tokens``, an unknown
effort, ``temperature`` other than 1 with thinking, a forced tool with thinking, and a final
assistant turn with tool calls but no thinking block while thinking is on are 400s.
"""

from __future__ import annotations

import json
from typing import Any

from . import agentic, synth
from .openai import Turn, bearer_token, plan_turn
from .server import FakeUpstream, RecordedRequest, Response, json_response, sse_event, sse_response

MODELS = {
    "claude-sonnet-4-5": "claude-sonnet-4-5-20250929",
    "claude-haiku-4-5": "claude-haiku-4-5-20251001",
    "claude-opus-4-1": "claude-opus-4-1-20250805",
    "claude-opus-4-5": "claude-opus-4-5-20251101",
}
DEFAULT_MODELS = frozenset(MODELS) | frozenset(MODELS.values())
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
DEFAULT_MESSAGES = {
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "Not found",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of request tokens has exceeded your per-minute rate limit.",
    500: "Internal server error",
    529: "Overloaded",
}
# The Messages API's top-level fields (anything else is "Extra inputs are not permitted").
FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "service_tier",
        "container",
        "cache_control",
        "inference_geo",
        "speed",
        "diagnostics",
        "mcp_servers",
        "context_management",
    }
)
EFFORTS = ("low", "medium", "high", "xhigh", "max")
REFUSAL_EXPLANATION = "This request was declined by the usage policy's classifiers."


def anthropic_error(status: int, message: str | None = None) -> Response:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {
        "type": "error",
        "error": {"type": kind, "message": message or DEFAULT_MESSAGES.get(status, "Error")},
        "request_id": synth.random_id("req_011C", 20),
    }
    return json_response(body, status)


def block_text(content: Any) -> str:
    """The text of a message's content (a string or blocks; tool results' content included)."""
    if isinstance(content, str):
        return content
    texts = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_result":
            texts.append(block_text(block.get("content")))
    return " ".join(texts)


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def dialogue(messages: list[dict]) -> agentic.Dialogue:
    """The conversation as the fakes' decisions read it: the last user text, the tool results
    ending it (named by their tool_use ids) and the tools called before."""
    names: dict[str, str] = {}
    last_user = ""
    for message in messages:
        blocks = _blocks(message)
        for block in blocks:
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
        if message.get("role") == "user":
            text = " ".join(b["text"] for b in blocks if b.get("type") == "text")
            last_user = text or last_user
    results: list[tuple[str, str]] = []
    if messages and messages[-1].get("role") == "user":
        results = [
            (names.get(str(b.get("tool_use_id")), ""), block_text(b.get("content")))
            for b in _blocks(messages[-1])
            if b.get("type") == "tool_result"
        ]
    return agentic.Dialogue(last_user, tuple(results), frozenset(names.values()))


def tools_of(body: dict) -> list[agentic.Tool]:
    return [
        agentic.Tool(t["name"], t.get("description") or "", t.get("input_schema"))
        for t in body.get("tools") or ()
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    ]


def choice_of(body: dict) -> str:
    """The tool_choice in agentic's words: auto, required, none or the forced tool's name."""
    choice = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
    kind = choice.get("type", "auto")
    if kind == "tool":
        return str(choice.get("name"))
    return {"any": "required", "none": "none"}.get(kind, "auto")


def output_format(body: dict) -> Any:
    config = body.get("output_config") if isinstance(body.get("output_config"), dict) else {}
    fmt = config.get("format") if isinstance(config.get("format"), dict) else None
    return fmt.get("schema") if fmt is not None else None


def _open_schema(schema: Any) -> bool:
    """A tool input schema with no properties (a JSON mode tool): any object goes."""
    return isinstance(schema, dict) and not schema.get("properties")


class AnthropicFake(FakeUpstream):
    """Anthropic Messages API simulator.

    Args:
        api_key: the only accepted ``x-api-key``; None accepts any (or none).
        models: model ids accepted (default: the Claude 4.5 aliases and their snapshots).

    Knobs (attributes; :meth:`reset` restores them):
        reply_text: fixed assistant text instead of ``"Echo: <last user text>"``.
        stream_pieces: how many deltas a streamed block is split into.
        cache_read_tokens / cache_write_tokens: prompt tokens reported as read from / written
            to the prompt cache (capped at the prompt).
        refusal_terms: words in the last user text that make the model refuse
            (``stop_reason: "refusal"``).
        parallel_tools: call every offered tool at once (unless ``disable_parallel_tool_use``).
        plus the stream/latency knobs of :class:`FakeUpstream`.
    """

    name = "anthropic"
    base_path = "/v1"
    ROUTES = [("POST", r"/v1/messages", "messages")]
    KNOBS = {
        "reply_text": None,
        "stream_pieces": 4,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "refusal_terms": ("forbidden-topic",),
        "parallel_tools": False,
    }

    def __init__(self, api_key: str | None = None, models: set[str] | None = None):
        super().__init__()
        self.api_key = api_key
        self.models = set(models) if models is not None else set(DEFAULT_MODELS)

    # -- protocol hooks ----------------------------------------------------------------

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return anthropic_error(status, message)

    def invalid_json(self, request: RecordedRequest) -> Response:
        return self.error(400, "There was an error parsing the body of your request.")

    def not_found(self, request: RecordedRequest) -> Response:
        return self.error(404, "Not found")

    def check_auth(self, request: RecordedRequest) -> Response | None:
        if self.api_key is not None:
            # `x-api-key`, or (as the SDK sends it since its 2026 versions) a bearer token.
            key = request.headers.get("x-api-key") or bearer_token(request)
            if not key:
                return self.error(401, "x-api-key header is required")
            if key != self.api_key:
                return self.error(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self.error(400, "anthropic-version: header is required")
        return None

    def response_headers(self, request: RecordedRequest) -> list[tuple[str, str]]:
        return [("request-id", synth.random_id("req_011C", 20))]

    # -- validation --------------------------------------------------------------------

    def _check(self, body: dict) -> None:
        for name in body:
            if name not in FIELDS:
                raise self.fail(400, f"{name}: Extra inputs are not permitted")
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                raise self.fail(400, f"{name}: Field required")
        self._check_messages(body["messages"])
        temperature = body.get("temperature")
        if temperature is not None and not 0 <= temperature <= 1:
            raise self.fail(400, "temperature: Input should be less than or equal to 1")
        if body["model"] not in self.models:
            raise self.fail(404, f"model: {body['model']}")
        config = body.get("output_config") if isinstance(body.get("output_config"), dict) else {}
        if config.get("effort") not in (None, *EFFORTS):
            raise self.fail(400, "output_config.effort: Input should be " + ", ".join(EFFORTS))
        if _thinks(body):
            self._check_thinking(body, body["thinking"])

    def _check_messages(self, messages: Any) -> None:
        if not isinstance(messages, list) or not messages:
            raise self.fail(400, "messages: at least one message is required")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
                raise self.fail(
                    400, f"messages.{index}.role: Input should be 'user' or 'assistant'"
                )
            for block in _blocks(message):
                if block.get("type") == "text" and not block.get("text"):
                    raise self.fail(400, "messages: text content blocks must be non-empty")

    def _check_thinking(self, body: dict, thinking: dict) -> None:
        budget = thinking.get("budget_tokens")
        if thinking["type"] == "enabled" and (not isinstance(budget, int) or budget < 1024):
            raise self.fail(
                400,
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
            )
        if thinking["type"] == "enabled" and budget >= body["max_tokens"]:
            raise self.fail(400, "`max_tokens` must be greater than `thinking.budget_tokens`.")
        if body.get("temperature") not in (None, 1):
            raise self.fail(400, "`temperature` may only be set to 1 when thinking is enabled.")
        if choice_of(body) not in ("auto", "none"):
            raise self.fail(400, "Thinking may not be enabled when tool_choice forces tool use.")
        assistants = [m for m in body["messages"] if m.get("role") == "assistant"]
        if assistants:
            blocks = _blocks(assistants[-1])
            kinds = [b.get("type") for b in blocks]
            if "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking"):
                raise self.fail(
                    400,
                    "messages: Expected `thinking` or `redacted_thinking`, but found "
                    f"`{kinds[0]}`. When `thinking` is enabled, a final `assistant` message "
                    "must start with a thinking block.",
                )

    # -- the turn ----------------------------------------------------------------------

    def _turn(self, body: dict) -> tuple[Turn, list[agentic.ToolCall], str | None]:
        """The model's turn, its tool calls (several when `parallel_tools`), its thinking."""
        messages = body["messages"]
        talk = dialogue(messages)
        tools = tools_of(body)
        try:
            action = agentic.decide(
                tools, choice_of(body), output_format(body), talk, self.reply_text
            )
        except agentic.UnknownTool as exc:
            raise self.fail(400, f"tool_choice: Tool '{exc.name}' not found in 'tools'") from None
        action = self._open_tool_action(action, tools, talk)
        thought = None
        if _thinks(body):
            thought = f"The user asks: {talk.last_user}. I will answer plainly."
        prompt_texts = [block_text(body.get("system"))] + [
            block_text(m.get("content")) for m in messages
        ]
        turn = plan_turn(
            prompt_texts,
            talk.last_user,
            self.reply_text,
            body["max_tokens"],
            reasoning_tokens=synth.count_tokens(thought),
            action=action,
        )
        calls = [turn.tool_call] if turn.tool_call is not None else []
        if calls and self.parallel_tools and not self._parallel_disabled(body):
            calls = [
                agentic.ToolCall(t.name, agentic.call_arguments(t, talk.last_user)) for t in tools
            ]
        return turn, calls, thought

    def _open_tool_action(
        self, action: agentic.Action, tools: list[agentic.Tool], talk: agentic.Dialogue
    ) -> agentic.Action:
        """A call of a tool that takes any object (JSON mode) carries a JSON document."""
        call = action.call
        tool = next((t for t in tools if call is not None and t.name == call.name), None)
        if call is None or tool is None or not _open_schema(tool.parameters):
            return action
        said = self.reply_text or f"Echo: {talk.last_user}"
        return agentic.Action(
            "", agentic.ToolCall(call.name, agentic.document("json_object", said))
        )

    @staticmethod
    def _parallel_disabled(body: dict) -> bool:
        choice = body.get("tool_choice")
        return isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True

    def _refuses(self, body: dict) -> bool:
        last = dialogue(body["messages"]).last_user.lower()
        return any(term in last for term in self.refusal_terms)

    def _usage(self, turn: Turn, output_tokens: int, thinking: bool) -> dict:
        prompt = turn.prompt_tokens
        read = min(self.cache_read_tokens, prompt)
        written = min(self.cache_write_tokens, prompt - read)
        usage: dict[str, Any] = {
            "input_tokens": prompt - read - written,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }
        if thinking:
            usage["output_tokens_details"] = {"thinking_tokens": turn.reasoning_tokens}
        return usage

    # -- POST /v1/messages -------------------------------------------------------------

    def messages(self, request: RecordedRequest) -> Response:
        body = self.body_json(request)
        self._check(body)
        turn, calls, thought = self._turn(body)
        refused = self._refuses(body)
        content: list[dict] = []
        hit = None
        if thought is not None and not refused:
            content.append({"type": "thinking", "thinking": thought, "signature": _signature()})
        if refused:
            stop, reply = "refusal", ""
        elif calls:
            stop, reply = "tool_use", ""
            content += [_tool_use(call) for call in calls]
        else:
            stop, reply = _stop_reason(turn), turn.reply
            reply, hit = _cut_at_stop(reply, body.get("stop_sequences"))
            stop = "stop_sequence" if hit is not None else stop
            content.append({"type": "text", "text": reply})
        output = turn.completion_tokens
        if len(calls) > 1:
            output = turn.reasoning_tokens + sum(synth.count_tokens(c.arguments) for c in calls)
        output = 1 if refused else output
        message = {
            "id": synth.random_id("msg_01", 22),
            "type": "message",
            "role": "assistant",
            "model": MODELS.get(body["model"], body["model"]),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": hit if stop == "stop_sequence" else None,
            "stop_details": _refusal_details() if refused else None,
            "usage": self._usage(turn, output, thought is not None),
        }
        if body.get("stream"):
            return self._stream(message)
        return json_response(message)

    def _stream(self, message: dict) -> Response:
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
        start["stop_details"] = None
        start["usage"] = {**message["usage"], "output_tokens": 1}
        start["usage"].pop("output_tokens_details", None)
        events = [
            sse_event("message_start", {"type": "message_start", "message": start}),
            sse_event("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(message["content"]):
            events += _block_events(index, block, self.stream_pieces)
        delta = {
            "stop_reason": message["stop_reason"],
            "stop_sequence": message["stop_sequence"],
            "stop_details": message["stop_details"],
        }
        usage = {k: v for k, v in message["usage"].items() if k != "service_tier"}
        events.append(
            sse_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        events.append(sse_event("message_stop", {"type": "message_stop"}))
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return sse_response(events, error_event=lambda _i: sse_event("error", error))


def _thinks(body: dict) -> bool:
    """Whether the request turns thinking on: a fixed budget, or adaptive (whose effort goes in
    `output_config.effort`)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _signature() -> str:
    return synth.random_id("EqQBCkgIARABGAIiQ", 40)


def _refusal_details() -> dict:
    return {"type": "refusal", "category": None, "explanation": REFUSAL_EXPLANATION}


def _tool_use(call: agentic.ToolCall) -> dict:
    return {
        "type": "tool_use",
        "id": synth.random_id("toolu_01", 22),
        "name": call.name,
        "input": json.loads(call.arguments),
    }


def _stop_reason(turn: Turn) -> str:
    return "max_tokens" if turn.finish_reason == "length" else "end_turn"


def _cut_at_stop(text: str, stops: Any) -> tuple[str, str | None]:
    """The text up to the first stop sequence it holds, and that sequence (None: none)."""
    hits = [(text.find(s), s) for s in stops or () if isinstance(s, str) and s and s in text]
    if not hits:
        return text, None
    where, stop = min(hits)
    return text[:where], stop


def _block_events(index: int, block: dict, pieces: int) -> list[bytes]:
    kind = block["type"]

    def delta(body: dict) -> bytes:
        event = {"type": "content_block_delta", "index": index, "delta": body}
        return sse_event("content_block_delta", event)

    if kind == "text":
        opened = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": p}) for p in _pieces(block["text"], pieces)]
    elif kind == "thinking":
        opened = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            delta({"type": "thinking_delta", "thinking": p})
            for p in synth.split_pieces(block["thinking"], pieces)
        ]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    else:
        opened = {**block, "input": {}}
        arguments = json.dumps(block["input"], separators=(",", ":"))
        deltas = [delta({"type": "input_json_delta", "partial_json": ""})] + [
            delta({"type": "input_json_delta", "partial_json": p})
            for p in synth.split_chars(arguments, pieces)
        ]
    start = {"type": "content_block_start", "index": index, "content_block": opened}
    stop = {"type": "content_block_stop", "index": index}
    return [
        sse_event("content_block_start", start),
        *deltas,
        sse_event("content_block_stop", stop),
    ]


def _pieces(text: str, pieces: int) -> list[str]:
    """A JSON document streams in runs of characters, prose in words."""
    if text.startswith(("{", "[")):
        return synth.split_chars(text, pieces)
    return synth.split_pieces(text, pieces)
