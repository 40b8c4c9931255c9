"""Bedrock Runtime's ``Converse`` and ``ConverseStream`` for :class:`BedrockFake`.

What the model "says" comes from :mod:`fake_upstreams.agentic` (a tool call chosen by word
overlap, ``The <tool> tool returned: ...`` after tool results, a JSON document for
``outputConfig.textFormat``, ``Echo: <last user text>`` otherwise), so every fake answers the
same conversation the same way. The stream is AWS's binary event stream
(``application/vnd.amazon.eventstream``): each message a prelude (total and headers length and
their CRC32), string headers (``:message-type``, ``:event-type`` or ``:exception-type``,
``:content-type``), a JSON payload and the message's CRC32, written here with ``binascii.crc32``
and read back in the tests by botocore's own parser.

Usage follows the API: ``inputTokens`` is the input not read from or written to the prompt
cache; ``cacheReadInputTokens`` / ``cacheWriteInputTokens`` the rest (knobs), ``totalTokens``
all of them plus ``outputTokens`` (thinking included).
"""

from __future__ import annotations

import binascii
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from . import agentic, synth

CLAUDE = "anthropic.claude"
CHAT_MODELS = {
    "anthropic.claude-sonnet-4-5-20250929-v1:0",
    "anthropic.claude-haiku-4-5-20251001-v1:0",
    "anthropic.claude-opus-4-1-20250805-v1:0",
    "anthropic.claude-sonnet-4-20250514-v1:0",
    "anthropic.claude-3-5-haiku-20241022-v1:0",
    "meta.llama3-3-70b-instruct-v1:0",
    "meta.llama4-maverick-17b-instruct-v1:0",
    "mistral.mistral-large-2407-v1:0",
    "mistral.pixtral-large-2502-v1:0",
    "amazon.nova-pro-v1:0",
    "amazon.nova-lite-v1:0",
    "amazon.nova-micro-v1:0",
}
TOOLCONFIG_REQUIRED = (
    "The toolConfig field must be defined when using toolUse and toolResult content blocks."
)
FILTERED_TEXT = "I can't help with that request."
STREAM_ERROR = "The model encountered an error processing your request."


class Invalid(ValueError):
    """A request Bedrock refuses with 400 ValidationException (the message is AWS's)."""


# --------------------------------------------------------------------------- event stream


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack("B", len(raw_name)) + raw_name + b"\x07" + struct.pack(">H", len(raw_value))
    ) + raw_value


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + head + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


def event_frame(event_type: str, body: dict, padding: bool = True) -> bytes:
    """An ``event`` message; AWS pads each payload with a ``p`` field of varying length."""
    if padding:
        body = {**body, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[: 1 + len(event_type) % 30]}
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return frame(headers, _dumps(body))


def exception_frame(exception_type: str, message: str) -> bytes:
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    body: dict[str, Any] = {"message": message}
    if exception_type == "modelStreamErrorException":
        body.update(originalStatusCode=500, originalMessage=message)
    return frame(headers, _dumps(body))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# --------------------------------------------------------------------------- the request


def _text_of(blocks: list) -> str:
    texts = []
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block, dict) and "json" in block:
            texts.append(_dumps(block["json"]).decode())
    return " ".join(texts)


def _validate_block(block: Any, role: str) -> None:
    if not isinstance(block, dict) or len(block) != 1:
        raise Invalid("A content block must have exactly one member.")
    kind, value = next(iter(block.items()))
    if kind == "text" and (not isinstance(value, str) or not value.strip()):
        raise Invalid("The text field in the ContentBlock object is blank.")
    if kind == "image":
        source = value.get("source") if isinstance(value, dict) else None
        if value.get("format") not in ("png", "jpeg", "gif", "webp") or not isinstance(
            (source or {}).get("bytes"), str
        ):
            raise Invalid("The image block is malformed.")
    if kind == "toolUse" and role != "assistant":
        raise Invalid("A toolUse block can only be in an assistant message.")
    if kind == "toolResult" and role != "user":
        raise Invalid("A toolResult block can only be in a user message.")


def validate(body: dict, model: str) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("The messages field is required.")
    previous = None
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid("A message's role must be user or assistant.")
        if previous is None and role != "user":
            raise Invalid("A conversation must start with a user message.")
        if role == previous:
            raise Invalid("A conversation must alternate between user and assistant roles.")
        previous = role
        content = message.get("content")
        if not isinstance(content, list) or not content:
            raise Invalid("The content field in the Message object is empty.")
        for block in content:
            _validate_block(block, role)
    uses_tools = any("toolUse" in b or "toolResult" in b for m in messages for b in m["content"])
    if uses_tools and not (body.get("toolConfig") or {}).get("tools"):
        raise Invalid(TOOLCONFIG_REQUIRED)
    _validate_config(body, model)


def _validate_config(body: dict, model: str) -> None:
    config = body.get("inferenceConfig") or {}
    temperature = config.get("temperature")
    if temperature is not None and not 0 <= temperature <= 1:
        raise Invalid(
            "1 validation error detected: Value at 'inferenceConfig.temperature' failed to "
            "satisfy constraint: Member must have value less than or equal to 1"
        )
    thinking = (body.get("additionalModelRequestFields") or {}).get("thinking")
    if thinking is None:
        return
    if CLAUDE not in model:
        raise Invalid(
            "The model returned the following errors: thinking: Extra inputs are not permitted"
        )
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < 1024:
        raise Invalid("thinking.budget_tokens: Input should be greater than or equal to 1024")
    max_tokens = config.get("maxTokens")
    if max_tokens is not None and max_tokens <= budget:
        raise Invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
    choice = (body.get("toolConfig") or {}).get("toolChoice") or {}
    if "any" in choice or "tool" in choice:
        raise Invalid("Thinking may not be enabled when tool_choice forces tool use.")


def _tools(body: dict) -> tuple[list[agentic.Tool], str]:
    config = body.get("toolConfig") or {}
    tools = []
    for entry in config.get("tools") or ():
        spec = entry.get("toolSpec") if isinstance(entry, dict) else None
        if isinstance(spec, dict):
            schema = (spec.get("inputSchema") or {}).get("json")
            tools.append(agentic.Tool(spec["name"], spec.get("description") or "", schema))
    choice = config.get("toolChoice") or {"auto": {}}
    if "any" in choice:
        return tools, "required"
    if "tool" in choice:
        return tools, choice["tool"]["name"]
    return tools, "auto"


def _dialogue(messages: list[dict]) -> agentic.Dialogue:
    names: dict[str, str] = {}
    for message in messages:
        for block in message["content"]:
            use = block.get("toolUse")
            if isinstance(use, dict):
                names[str(use.get("toolUseId"))] = use.get("name", "")
    last = messages[-1]
    results = tuple(
        (
            names.get(str(block["toolResult"].get("toolUseId")), ""),
            _text_of(block["toolResult"].get("content") or []),
        )
        for block in last["content"]
        if "toolResult" in block
    )
    users = [
        _text_of([b for b in m["content"] if "text" in b])
        for m in messages
        if m["role"] == "user" and any("text" in b for b in m["content"])
    ]
    return agentic.Dialogue(users[-1] if users else "", results, frozenset(names.values()))


def _response_format(body: dict) -> Any:
    text_format = (body.get("outputConfig") or {}).get("textFormat")
    if not isinstance(text_format, dict):
        return None
    schema = ((text_format.get("structure") or {}).get("jsonSchema") or {}).get("schema")
    if not isinstance(schema, str):
        raise Invalid("outputConfig.textFormat.structure.jsonSchema.schema must be a string.")
    try:
        return json.loads(schema)
    except ValueError:
        raise Invalid("The JSON schema in outputConfig is not valid JSON.") from None


# --------------------------------------------------------------------------- the answer


@dataclass
class Reply:
    """The model's turn in Converse's terms."""

    text: str = ""
    calls: list[tuple[str, str, dict]] = field(default_factory=list)  # (id, name, input)
    thinking: str = ""
    stop_reason: str = "end_turn"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    structured: bool = False

    def usage(self) -> dict:
        usage = {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.input_tokens
            + self.output_tokens
            + self.cache_read
            + self.cache_write,
        }
        if self.cache_read or self.cache_write:
            usage["cacheReadInputTokens"] = self.cache_read
            usage["cacheWriteInputTokens"] = self.cache_write
        return usage

    def content(self) -> list[dict]:
        blocks: list[dict] = []
        if self.thinking:
            blocks.append(
                {"reasoningContent": {"reasoningText": {"text": self.thinking, "signature": "sig"}}}
            )
        if self.text or not self.calls:
            blocks.append({"text": self.text})
        for call_id, name, arguments in self.calls:
            blocks.append({"toolUse": {"toolUseId": call_id, "name": name, "input": arguments}})
        return blocks


@dataclass(frozen=True)
class Knobs:
    reply_text: str | None = None
    cache_read: int = 0
    cache_write: int = 0
    parallel_calls: bool = False


def _prompt_tokens(body: dict) -> int:
    texts = [_text_of(body.get("system") or [])]
    for message in body["messages"]:
        texts.append(_text_of(message["content"]))
        for block in message["content"]:
            if "toolUse" in block:
                texts.append(_dumps(block["toolUse"].get("input")).decode())
            if "toolResult" in block:
                texts.append(_text_of(block["toolResult"].get("content") or []))
    return sum(synth.count_tokens(t) for t in texts)


def _calls(action: agentic.Action, tools, choice, dialogue, knobs: Knobs) -> list:
    if action.call is None:
        return []
    calls = [action.call]
    if knobs.parallel_calls and choice in ("auto", "required") and not dialogue.results:
        calls = [
            agentic.ToolCall(t.name, agentic.call_arguments(t, dialogue.last_user)) for t in tools
        ]
    return [(synth.random_id("tooluse_", 22), c.name, json.loads(c.arguments)) for c in calls]


def _limit(reply: Reply, produced: str, body: dict) -> str:
    config = body.get("inferenceConfig") or {}
    for stop in config.get("stopSequences") or ():
        if stop and stop in produced and not reply.calls:
            reply.stop_reason = "stop_sequence"
            return produced[: produced.index(stop)]
    limit = config.get("maxTokens")
    if isinstance(limit, int) and synth.count_tokens(produced) > limit:
        reply.stop_reason = "max_tokens"
        return synth.truncate_words(produced, limit)
    return produced


def _cache_point(body: dict, model: str, cache: set[str] | None) -> tuple[int, int]:
    """(read, written) tokens of the system prompt before a `cachePoint`: written the first
    time a model sees that prefix, read after (`cache` holds what was written)."""
    system = body.get("system") or []
    ends = [
        i for i, block in enumerate(system) if isinstance(block, dict) and "cachePoint" in block
    ]
    if cache is None or not ends:
        return 0, 0
    prefix = _text_of(system[: ends[-1]])
    key = f"{model}\x00{prefix}"
    tokens = synth.count_tokens(prefix)
    if key in cache:
        return tokens, 0
    cache.add(key)
    return 0, tokens


def converse_reply(body: dict, model: str, knobs: Knobs, cache: set[str] | None = None) -> Reply:
    """The model's turn for a Converse body (raises Invalid, agentic.UnknownTool); `cache`:
    the prompt prefixes cached so far (a `cachePoint` in `system` reads or writes them)."""
    validate(body, model)
    tools, choice = _tools(body)
    dialogue = _dialogue(body["messages"])
    action = agentic.decide(tools, choice, _response_format(body), dialogue, knobs.reply_text)
    reply = Reply(
        calls=_calls(action, tools, choice, dialogue, knobs), structured=action.structured
    )
    if (body.get("additionalModelRequestFields") or {}).get("thinking"):
        reply.thinking = f"The user asks: {dialogue.last_user}"
    if synth.has_word(dialogue.last_user, "forbidden") and not dialogue.results:
        reply.calls, action = [], agentic.Action(FILTERED_TEXT)
        reply.stop_reason = "content_filtered"
    if reply.calls:
        reply.stop_reason = "tool_use"
        produced = " ".join(_dumps(arguments).decode() for _, _, arguments in reply.calls)
    else:
        produced = reply.text = _limit(reply, action.text, body)
    prompt = _prompt_tokens(body)
    read, written = _cache_point(body, model, cache)
    reply.cache_read = min(knobs.cache_read or read, prompt)
    reply.cache_write = min(knobs.cache_write or written, prompt - reply.cache_read)
    reply.input_tokens = prompt - reply.cache_read - reply.cache_write
    reply.output_tokens = synth.count_tokens(produced) + synth.count_tokens(reply.thinking)
    return reply


def converse_answer(reply: Reply) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": reply.content()}},
        "stopReason": reply.stop_reason,
        "usage": reply.usage(),
        "metrics": {"latencyMs": 42},
    }


def stream_frames(reply: Reply, pieces: int = 4) -> list[bytes]:
    """ConverseStream's messages for a reply, in order."""
    frames = [event_frame("messageStart", {"role": "assistant"})]
    index = 0
    if reply.thinking:
        for piece in synth.split_pieces(reply.thinking, pieces):
            delta = {"reasoningContent": {"text": piece}}
            frames.append(
                event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
            )
        signature = {"reasoningContent": {"signature": "sig"}}
        frames.append(
            event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": signature})
        )
        frames.append(event_frame("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if reply.text or not reply.calls:
        split = synth.split_chars if reply.structured else synth.split_pieces
        for piece in split(reply.text, pieces):
            frames.append(
                event_frame(
                    "contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": piece}}
                )
            )
        frames.append(event_frame("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for call_id, name, arguments in reply.calls:
        start = {"toolUse": {"toolUseId": call_id, "name": name}}
        frames.append(
            event_frame("contentBlockStart", {"contentBlockIndex": index, "start": start})
        )
        for piece in synth.split_chars(_dumps(arguments).decode(), pieces):
            delta = {"toolUse": {"input": piece}}
            frames.append(
                event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
            )
        frames.append(event_frame("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    frames.append(event_frame("messageStop", {"stopReason": reply.stop_reason}))
    metrics = {"latencyMs": 42}
    frames.append(event_frame("metadata", {"usage": reply.usage(), "metrics": metrics}))
    return frames
