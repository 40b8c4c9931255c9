"""The contract's chat on AWS Bedrock's Converse and ConverseStream APIs, both ways.

`converse_request` turns the contract's chat request into a Converse body (`check_converse`
refuses, before any call, what Converse cannot take); `chat_answer` turns a Converse answer into
the contract's chat completion; `EventStreamFrames` splits ConverseStream's binary
`application/vnd.amazon.eventstream` body into frames with botocore's own parser, and
`StreamTranslator` turns those frames into the contract's chunks. docs/providers.md
("AWS Bedrock (Converse)") says what maps to what; docs/decisions/providers.md the choices.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import orjson
from botocore.eventstream import EventStreamBuffer, ParserError

from core.errors import BadRequest

from .anthropic import claude_thinking
from .base import refuse_unsupported
from .events import ChatChunks, StreamBroken, chat_completion, contract_usage, loads_frame, now

# The tool a JSON response format is asked through when the model has no native structured
# output (as LiteLLM does on Converse); its input is the answer's content.
JSON_TOOL = "json_tool_call"
JSON_TOOL_DESCRIPTION = "Answer with a JSON document: call this tool with it as the input."
IMAGE_FORMATS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg", "gif": "gif", "webp": "webp"}
DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(?P<data>.*)$", re.S)
# requestMetadata keys and values (the API reference's pattern, at most 256 characters).
_METADATA_VALUE = re.compile(r"^[a-zA-Z0-9\s:_@$#=/+,.-]{1,256}$")
_DOCUMENT_NAME = re.compile(r"[^A-Za-z0-9\-()\[\] ]+")
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
TEMPERATURE_MAX = 1.0  # InferenceConfiguration.temperature: 0..1


# --- what the adapter must know of the model ----------------------------------------------------


def base_model(upstream_model: str) -> str:
    """The model id behind an ARN (its last path segment) or an inference profile id."""
    return upstream_model.rsplit("/", 1)[-1]


def is_claude(upstream_model: str, options: dict) -> bool:
    """Claude takes Anthropic's thinking budget (catalog option `family`, else its id)."""
    family = options.get("family")
    if family is not None:
        return family == "claude"
    return "anthropic.claude" in base_model(upstream_model)


@dataclass(frozen=True)
class Plan:
    """A Converse body and what reading its answer needs."""

    body: dict
    json_tool: bool = False  # the answer's `json_tool_call` input is its content
    show_reasoning: bool = True  # reasoning.exclude: thinking is not relayed


# --- refusals before the call ----------------------------------------------------------------


def check_converse(payload: dict, *, claude: bool) -> None:
    """The spec's 400 for what Converse has no control for and would change the answer."""
    refuse_unsupported(payload)  # every field of CHAT_DEFAULTS
    temperature = payload.get("temperature")
    if temperature is not None and temperature > TEMPERATURE_MAX:
        raise BadRequest("'temperature' above 1 is not supported by this provider")
    effort = _effort(payload)
    if effort not in (None, "none") and not claude:
        raise BadRequest(f"Model does not support reasoning effort '{effort}'")
    if claude:
        claude_thinking(effort, _max_tokens(payload))  # a budget max_tokens leaves room for
    for message in payload.get("messages") or ():
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            for part in content:
                _check_part(part)
        for call in message.get("tool_calls") or ():
            _arguments(call)


def _check_part(part: dict) -> None:
    kind = part.get("type")
    if kind == "image_url":
        _image_block(part["image_url"]["url"])
    elif kind == "file":
        _document_block(part["file"])
    elif kind == "input_audio":
        raise BadRequest("audio input is not supported by this provider")
    elif kind == "video_url":
        raise BadRequest("video input is not supported by this provider")


def _effort(payload: dict) -> str | None:
    reasoning = payload.get("reasoning")
    if isinstance(reasoning, dict):
        return reasoning.get("effort")
    return payload.get("reasoning_effort")


# --- the request ------------------------------------------------------------------------------


def _texts(content) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    return [part["text"] for part in content if part.get("type") == "text"]


def _image_block(url: str) -> dict:
    match = _DATA_URL.match(url)
    if match is None:
        raise BadRequest(
            "image URLs are not supported by this provider; send the image as a data: URL (base64)"
        )
    kind, _, subtype = match["mime"].lower().partition("/")
    image_format = IMAGE_FORMATS.get(subtype) if kind == "image" else None
    if image_format is None:
        raise BadRequest(
            f"image type '{match['mime']}' is not supported by this provider "
            "(png, jpeg, gif or webp)"
        )
    return {"image": {"format": image_format, "source": {"bytes": match["data"]}}}


def _document_block(file: dict) -> dict:
    data = file.get("file_data")
    match = _DATA_URL.match(data) if data else None
    if match is None:
        raise BadRequest(
            "files are taken by this provider as file_data data: URLs (base64), not file_id"
        )
    document_format = DOCUMENT_FORMATS.get(match["mime"].lower())
    if document_format is None:
        raise BadRequest(f"file type '{match['mime']}' is not supported by this provider")
    # Converse's document names: letters, digits, spaces, hyphens, parentheses, brackets.
    stem = (file.get("filename") or "document").rsplit(".", 1)[0]
    name = " ".join(_DOCUMENT_NAME.sub(" ", stem).split())[:200] or "document"
    return {
        "document": {"format": document_format, "name": name, "source": {"bytes": match["data"]}}
    }


def _user_blocks(content) -> list[dict]:
    if isinstance(content, str):
        return [{"text": content}]
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks.append({"text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image_block(part["image_url"]["url"]))
        elif kind == "file":
            blocks.append(_document_block(part["file"]))
        else:
            _check_part(part)
    return blocks


def _arguments(call: dict):
    try:
        value = orjson.loads(call["function"]["arguments"] or "{}")
    except orjson.JSONDecodeError:
        raise BadRequest("a tool call's 'arguments' must be a JSON object") from None
    if not isinstance(value, dict):
        raise BadRequest("a tool call's 'arguments' must be a JSON object")
    return value


def _assistant_blocks(message: dict) -> list[dict]:
    blocks: list[dict] = [{"text": text} for text in _texts(message.get("content")) if text]
    for call in message.get("tool_calls") or ():
        blocks.append(
            {
                "toolUse": {
                    "toolUseId": call["id"],
                    "name": call["function"]["name"],
                    "input": _arguments(call),
                }
            }
        )
    return blocks


def _tool_result(message: dict) -> dict:
    text = "".join(_texts(message.get("content")))
    return {
        "toolResult": {
            "toolUseId": message["tool_call_id"],
            "content": [{"text": text}] if text else [],
            "status": "success",
        }
    }


def converse_messages(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """(system blocks, messages): system and developer messages go to `system`; tool results
    are user turns; consecutive turns of one role are one message (Converse alternates)."""
    system: list[dict] = []
    turns: list[dict] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            system += [{"text": text} for text in _texts(message["content"]) if text]
            continue
        if role == "assistant":
            blocks, speaker = _assistant_blocks(message), "assistant"
        elif role == "tool":
            blocks, speaker = [_tool_result(message)], "user"
        else:
            blocks, speaker = _user_blocks(message["content"]), "user"
        if not blocks:
            continue
        if turns and turns[-1]["role"] == speaker:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": speaker, "content": blocks})
    return system, turns


def _tool_spec(function: dict) -> dict:
    spec: dict = {
        "name": function["name"],
        "inputSchema": {"json": function.get("parameters") or {"type": "object", "properties": {}}},
    }
    if function.get("description"):
        spec["description"] = function["description"]
    return {"toolSpec": spec}


def _history_tools(turns: list[dict]) -> list[dict]:
    """Specs for the tools the conversation used: Converse wants a toolConfig whenever its
    messages hold toolUse or toolResult blocks, even when this call offers no tools."""
    names = []
    for turn in turns:
        for block in turn["content"]:
            name = block.get("toolUse", {}).get("name")
            if name and name not in names:
                names.append(name)
    return [_tool_spec({"name": name}) for name in names]


def _history_config(payload: dict, turns: list[dict]) -> dict | None:
    """The toolConfig of a call that offers no tools (`tool_choice: none`, or none declared):
    Converse wants one whenever the messages hold toolUse or toolResult blocks. The declared
    tools, and the tools the conversation called that are no longer declared (with an empty
    object schema); no toolChoice."""
    if not any("toolUse" in b or "toolResult" in b for turn in turns for b in turn["content"]):
        return None
    tools = [_tool_spec(t["function"]) for t in payload.get("tools") or ()]
    declared = {tool["toolSpec"]["name"] for tool in tools}
    tools += [t for t in _history_tools(turns) if t["toolSpec"]["name"] not in declared]
    return {"tools": tools} if tools else None


def _tool_choice(choice) -> dict | None:
    if choice is None or choice == "auto":
        return {"auto": {}}
    if choice == "required":
        return {"any": {}}
    if isinstance(choice, dict):
        return {"tool": {"name": choice["function"]["name"]}}
    return None  # none


def _json_format(payload: dict) -> dict | None:
    """The schema of a JSON response format ({"type": "object"} for json_object), else None."""
    response_format = payload.get("response_format") or {}
    if response_format.get("type") == "json_object":
        return {"schema": {"type": "object"}}
    if response_format.get("type") == "json_schema":
        spec = response_format["json_schema"]
        return {
            "schema": spec.get("schema") or {"type": "object"},
            "name": spec["name"],
            "description": spec.get("description"),
        }
    return None


def _tool_config(
    payload: dict, turns: list[dict], json_format: dict | None, thinking: bool
) -> dict | None:
    choice = payload.get("tool_choice")
    offered = (
        [] if choice == "none" else [_tool_spec(t["function"]) for t in payload.get("tools") or ()]
    )
    tool_choice = _tool_choice(choice) if offered else None
    if json_format is not None:
        function = {"name": JSON_TOOL, "description": JSON_TOOL_DESCRIPTION}
        offered.append(_tool_spec({**function, "parameters": json_format["schema"]}))
        if tool_choice is None or tool_choice == {"auto": {}}:
            # The model answers through the tool (one of the client's or this one); Claude
            # takes no forced tool while it thinks.
            tool_choice = {"any": {}} if len(offered) > 1 else {"tool": {"name": JSON_TOOL}}
        if thinking:
            tool_choice = {"auto": {}}
    if not offered:
        return _history_config(payload, turns)
    config: dict = {"tools": offered}
    if tool_choice is not None:
        config["toolChoice"] = tool_choice
    return config


def _inference_config(payload: dict) -> dict:
    config: dict = {}
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if max_tokens is not None:
        config["maxTokens"] = max_tokens
    if payload.get("temperature") is not None:
        config["temperature"] = payload["temperature"]
    if payload.get("top_p") is not None:
        config["topP"] = payload["top_p"]
    stop = payload.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else stop
    return config


def _continues_tool_use(turns: list[dict]) -> bool:
    """Whether the call answers tool results of an assistant turn: Claude then wants that
    turn's thinking back, which the contract's messages do not carry, so it does not think."""
    return len(turns) >= 2 and any("toolUse" in block for block in turns[-2]["content"])


def _max_tokens(payload: dict) -> int:
    """The request's output limit; without one Converse allows the model's maximum, which is
    above every thinking budget."""
    asked = payload.get("max_completion_tokens", payload.get("max_tokens"))
    return asked if asked is not None else 2**31


def _thinking(payload: dict, claude: bool, turns: list[dict]) -> dict | None:
    if not claude or _continues_tool_use(turns):
        return None
    return claude_thinking(_effort(payload), _max_tokens(payload))


def converse_request(
    payload: dict, *, claude: bool, native_json: bool = False, cache_system: bool = False
) -> Plan:
    """The Converse body of the contract's chat request (`modelId` goes in the path).
    `native_json`: the model takes `outputConfig.textFormat`; `cache_system`: a cache point
    after the system prompt (catalog option `prompt_cache`)."""
    system, turns = converse_messages(payload["messages"])
    body: dict = {"messages": turns}
    if system:
        body["system"] = system + ([{"cachePoint": {"type": "default"}}] if cache_system else [])
    config = _inference_config(payload)
    if config:
        body["inferenceConfig"] = config
    thinking = _thinking(payload, claude, turns)
    if thinking is not None:
        body["additionalModelRequestFields"] = {"thinking": thinking}
    json_format = _json_format(payload)
    if native_json and json_format is not None:
        body["outputConfig"] = {"textFormat": _text_format(json_format)}
        json_format = None
    tool_config = _tool_config(payload, turns, json_format, thinking is not None)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    user = payload.get("user")
    if isinstance(user, str) and _METADATA_VALUE.match(user):
        body["requestMetadata"] = {"user": user}
    reasoning = payload.get("reasoning")
    exclude = isinstance(reasoning, dict) and bool(reasoning.get("exclude"))
    return Plan(body, json_tool=json_format is not None, show_reasoning=not exclude)


def _text_format(json_format: dict) -> dict:
    schema: dict = {"schema": orjson.dumps(json_format["schema"]).decode()}
    for key in ("name", "description"):
        if json_format.get(key):
            schema[key] = json_format[key]
    return {"type": "json_schema", "structure": {"jsonSchema": schema}}


# --- the answer -------------------------------------------------------------------------------


def _count(usage: dict, key: str) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"usage {key} is {value!r}")
    return value


def converse_usage(usage) -> dict:
    """The contract's usage of Converse's: `inputTokens` counts the input not read from or
    written to the cache, so the prompt is the three together. Converse reports no reasoning
    tokens apart: thinking is in `outputTokens` (billed as completion)."""
    if not isinstance(usage, dict):
        usage = {}
    read = _count(usage, "cacheReadInputTokens")
    written = _count(usage, "cacheWriteInputTokens")
    return contract_usage(
        prompt=_count(usage, "inputTokens") + read + written,
        completion=_count(usage, "outputTokens"),
        cached=read,
        cache_write=written,
    )


def finish_reason(stop_reason, *, called_tools: bool) -> str:
    reason = FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"
    if reason == "tool_calls" and not called_tools:
        return "stop"  # only the JSON tool was called: its input is the content
    return reason


def chat_answer(answer: dict, plan: Plan, *, model: str, answer_id: str) -> dict:
    """The contract's chat completion of a Converse answer (ValueError: unreadable)."""
    output = answer.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise ValueError("no output message")
    texts, reasoning, calls = _answer_parts(message["content"], plan)
    reason = finish_reason(answer.get("stopReason"), called_tools=bool(calls))
    content: dict = {"content": "".join(texts) if texts or not calls else None}
    if calls:
        content["tool_calls"] = calls
    if reasoning and plan.show_reasoning:
        content["reasoning_content"] = "".join(reasoning)
    if reason == "content_filter" and content["content"]:
        content["refusal"], content["content"] = content["content"], None
    return chat_completion(
        answer_id=answer_id,
        model=model,
        created=now(),
        message=content,
        finish_reason=reason,
        usage=converse_usage(answer.get("usage")),
    )


def _answer_parts(blocks: list, plan: Plan) -> tuple[list[str], list[str], list[dict]]:
    """An answer's content blocks as (texts, reasoning, the contract's tool calls); the JSON
    tool's input is text (structured output). ValueError: a block is not an object."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict] = []
    for block in blocks:
        if not isinstance(block, dict):
            raise ValueError("a content block is not an object")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            arguments = orjson.dumps(use.get("input", {})).decode()
            if plan.json_tool and use.get("name") == JSON_TOOL:
                texts.append(arguments)
                continue
            calls.append(
                {
                    "id": str(use["toolUseId"]),
                    "type": "function",
                    "function": {"name": str(use["name"]), "arguments": arguments},
                }
            )
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                reasoning.append(text)
    return texts, reasoning, calls


# --- the stream -------------------------------------------------------------------------------

PRELUDE = struct.Struct(">III")  # total length, headers length, prelude CRC
MINIMUM_MESSAGE = PRELUDE.size + 4  # prelude and the message CRC
EXCEPTION = b"exception:"  # a frame name's prefix for exception and error messages


class EventStreamFrames:
    """ConverseStream's `application/vnd.amazon.eventstream` body as `(name, payload)` frames:
    an event's name is its `:event-type`; an exception's (or an error's) `exception:` and its
    `:exception-type` (or `:error-code`). Parsed by botocore's `EventStreamBuffer` (its CRC
    checks included); a prelude announcing more than `max_event` bytes is refused before any
    of it is held, as is anything botocore cannot parse (`StreamBroken`)."""

    def __init__(self, max_event: int):
        self.max_event = max_event
        self.buffer = EventStreamBuffer()

    def _check_prelude(self) -> None:
        # The buffer's unparsed bytes: botocore checks a prelude's lengths only against its own
        # 24 MB limit, so the cap is applied here before the rest of the message is held.
        data = self.buffer._data
        if len(data) < PRELUDE.size:
            return
        total, headers, _ = PRELUDE.unpack_from(data)
        if total > self.max_event:
            raise StreamBroken(f"an event-stream message of {total} bytes")
        if total < MINIMUM_MESSAGE + headers:
            raise StreamBroken("an event-stream prelude that does not add up")

    def feed(self, chunk: bytes) -> list[tuple[bytes | None, bytes]]:
        self.buffer.add_data(chunk)
        frames = []
        try:
            self._check_prelude()
            for message in self.buffer:
                frames.append(_frame(message.headers, message.payload))
                self._check_prelude()
        except ParserError as exc:
            raise StreamBroken(f"event stream: {type(exc).__name__}") from exc
        return frames

    def flush(self) -> list[tuple[bytes | None, bytes]]:
        if self.buffer._data:
            raise StreamBroken("the event stream ended inside a message")
        return []


def _frame(headers: dict, payload: bytes) -> tuple[bytes | None, bytes]:
    kind = headers.get(":message-type")
    if kind == "event":
        name = headers.get(":event-type")
        return (name.encode() if isinstance(name, str) else None), payload
    if kind == "exception":
        return EXCEPTION + str(headers.get(":exception-type", "")).encode(), payload
    if kind == "error":
        message = {"message": str(headers.get(":error-message") or headers.get(":error-code"))}
        return EXCEPTION + str(headers.get(":error-code", "")).encode(), orjson.dumps(message)
    raise StreamBroken(f"an event-stream message of type {kind!r}")


class StreamTranslator:
    """One ConverseStream's frames into the contract's chunks: `messageStart` the role,
    `contentBlockStart` a tool call, `contentBlockDelta` text / tool arguments / thinking,
    `messageStop` the finish, `metadata` the usage and `[DONE]`; an exception frame the
    contract's error chunk."""

    def __init__(self, plan: Plan, *, model: str, answer_id: str):
        self.plan = plan
        self.chunks = ChatChunks(answer_id, model)
        self.tools: dict[int, int] = {}  # content block index -> tool call index
        self.json_blocks: set[int] = set()
        self.called = False
        self.done = False

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        if self.done:
            return []
        if name is not None and name.startswith(EXCEPTION):
            self.done = True
            message = loads_frame(data).get("message")
            return [self.chunks.error(message if isinstance(message, str) else "stream failed")]
        handler = _HANDLERS.get(name) if name is not None else None
        if handler is None:
            return []  # an event this gateway does not know yet (forward compatible)
        try:
            return handler(self, loads_frame(data))
        except (KeyError, TypeError, AttributeError) as exc:
            raise StreamBroken(f"a {name!r} event of an unexpected shape") from exc

    def end(self) -> list[bytes]:
        return []

    def _start(self, event: dict) -> list[bytes]:
        return [self.chunks.role()]

    def _block_start(self, event: dict) -> list[bytes]:
        use = event["start"].get("toolUse")
        if not isinstance(use, dict):
            return []
        index = event["contentBlockIndex"]
        if self.plan.json_tool and use["name"] == JSON_TOOL:
            self.json_blocks.add(index)
            return []
        self.called = True
        self.tools[index] = len(self.tools)
        return [self.chunks.tool_call(self.tools[index], str(use["toolUseId"]), str(use["name"]))]

    def _delta(self, event: dict) -> list[bytes]:
        delta, index = event["delta"], event["contentBlockIndex"]
        if isinstance(delta.get("text"), str):
            return [self.chunks.text(delta["text"])] if delta["text"] else []
        if isinstance(delta.get("toolUse"), dict):
            arguments = delta["toolUse"]["input"]
            if index in self.json_blocks:
                return [self.chunks.text(arguments)]
            return [self.chunks.tool_arguments(self.tools[index], arguments)]
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict) and isinstance(reasoning.get("text"), str):
            if self.plan.show_reasoning and reasoning["text"]:
                return [self.chunks.reasoning(reasoning["text"])]
        return []  # a signature, redacted thinking, a citation

    def _stop(self, event: dict) -> list[bytes]:
        reason = finish_reason(event.get("stopReason"), called_tools=self.called)
        return [self.chunks.finish(reason)]

    def _metadata(self, event: dict) -> list[bytes]:
        try:
            usage = converse_usage(event.get("usage"))
        except ValueError as exc:
            raise StreamBroken(str(exc)) from exc
        self.done = True
        return [self.chunks.usage(usage), self.chunks.done()]


_HANDLERS = {
    b"messageStart": StreamTranslator._start,
    b"contentBlockStart": StreamTranslator._block_start,
    b"contentBlockDelta": StreamTranslator._delta,
    b"messageStop": StreamTranslator._stop,
    b"metadata": StreamTranslator._metadata,
}
