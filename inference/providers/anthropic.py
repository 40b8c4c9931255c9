"""`anthropic`: the Anthropic Messages API (`x-api-key`, `anthropic-version`; base URL like
https://api.anthropic.com/v1). Chat completions in its own wire format; `/v1/responses` through
it (providers.bridge).

The contract's chat request becomes a `POST /messages` body (`messages_body`), its answer and
its server-sent events become the contract's chat completion and chunks (`chat_answer`,
`MessagesEvents`). What maps to what, and what is refused: docs/providers.md ("Anthropic"); the
choices: docs/decisions/providers.md ("Anthropic").

`CLAUDE_THINKING_BUDGETS` and `claude_thinking` are the reasoning effort -> thinking budget
table of every Claude adapter (the Bedrock one uses them for Claude on Bedrock too);
`claude_adaptive` is the effort for the models that think adaptively (catalog option
`claude_thinking: "adaptive"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from catalog.routing import Route
from core.errors import BadRequest

from .base import (
    Transport,
    UpstreamStream,
    malformed,
    refuse_unsupported,
    sanitize_message,
)
from .bridge import ResponsesOverChat
from .events import (
    ChatChunks,
    EventDecoder,
    SSEFrames,
    StreamBroken,
    TranslatingDecoder,
    chat_completion,
    contract_usage,
    loads_frame,
    now,
)

ANTHROPIC_VERSION = "2023-06-01"
# max_tokens is required by the Messages API: the request's, else the catalog model's
# `max_output_tokens` option, else this.
DEFAULT_MAX_TOKENS = 4096

# Reasoning effort -> Claude's extended-thinking budget (tokens). The API's minimum is 1,024;
# the budget is kept below max_tokens (`claude_thinking`).
CLAUDE_THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
THINKING_MIN_BUDGET = 1024

# response_format json_object: Claude has no schemaless JSON mode, so the answer is asked for as
# the input of this one forced tool, and given back as the message's content.
JSON_TOOL = "json_object"
_JSON_TOOL = {
    "name": JSON_TOOL,
    "description": "Answer with a JSON object: the object is this tool's input.",
    "input_schema": {"type": "object", "additionalProperties": True},
}

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
REFUSAL = "The model declined to answer this request."

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
# A `user` that looks like an e-mail address or a phone number is not sent as `metadata.user_id`
# (the API wants an opaque id there and refuses e-mail addresses).
_PERSONAL = re.compile(r".*@.*|\+?[\d\s().-]{8,}", re.DOTALL)
# --- reasoning effort -> thinking -------------------------------------------------------------


def claude_thinking(effort: str | None, max_tokens: int) -> dict | None:
    """Claude's `thinking` for a reasoning effort (None: no thinking, for no effort or
    `none`): the effort's budget from `CLAUDE_THINKING_BUDGETS`, lowered to stay below
    `max_tokens` (which bounds thinking and answer together, as OpenAI's
    `max_completion_tokens` bounds reasoning and answer); the spec's 400 when that leaves less
    than the API's minimum budget."""
    if effort is None or effort == "none":
        return None
    budget = CLAUDE_THINKING_BUDGETS.get(effort)
    if budget is None:
        raise BadRequest(f"Model does not support reasoning effort '{effort}'")
    budget = min(budget, max_tokens - 1)
    if budget < THINKING_MIN_BUDGET:
        raise BadRequest(
            f"'max_tokens' must be more than {THINKING_MIN_BUDGET} with reasoning effort "
            f"'{effort}' on this provider (its thinking budget is at least "
            f"{THINKING_MIN_BUDGET} tokens)"
        )
    return {"type": "enabled", "budget_tokens": budget}


def claude_adaptive(effort: str | None) -> dict | None:
    """The body fields for a reasoning effort on a Claude model that thinks adaptively (catalog
    option `claude_thinking: "adaptive"`: the models that refuse a fixed budget): adaptive
    thinking at the effort's level (`output_config.effort`); None for no effort or `none` (the
    model's own default)."""
    if effort is None or effort == "none":
        return None
    return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}


def _thinking_fields(route: Route, payload: dict, max_tokens: int) -> dict | None:
    effort = requested_effort(payload)
    options = route.model.options if route.model is not None else {}
    if options.get("claude_thinking") == "adaptive":
        return claude_adaptive(effort)
    thinking = claude_thinking(effort, max_tokens)
    return {"thinking": thinking} if thinking is not None else None


def requested_effort(payload: dict) -> str | None:
    """`reasoning_effort` or `reasoning.effort` (the schema lets only one through)."""
    reasoning = payload.get("reasoning")
    if isinstance(reasoning, dict):
        return reasoning.get("effort")
    return payload.get("reasoning_effort")


def max_output(route: Route, payload: dict) -> int:
    """max_tokens for the call: the request's, else the model's maximum, else the default."""
    asked = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if asked:
        return asked
    model_max = route.model.options.get("max_output_tokens") if route.model is not None else None
    return model_max if isinstance(model_max, int) and model_max > 0 else DEFAULT_MAX_TOKENS


# --- the request ------------------------------------------------------------------------------


def _text_blocks(content) -> list[dict]:
    """Text blocks of a string or a list of text parts (empty texts dropped: the API refuses
    them)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [{"type": "text", "text": p["text"]} for p in content or () if p.get("text")]


def _data_url(url: str) -> tuple[str, str] | None:
    match = _DATA_URL.fullmatch(url)
    return (match["type"].lower(), match["data"]) if match else None


def _image_block(part: dict) -> dict:
    url = part["image_url"]["url"]
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    inline = _data_url(url)
    if inline is None:
        raise BadRequest("An image must be an http(s) URL or a base64 data: URL")
    media_type, data = inline
    if media_type not in IMAGE_TYPES:
        raise BadRequest(f"Image type '{media_type}' is not supported by this provider")
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _file_block(part: dict) -> dict:
    inline = _data_url(part["file"].get("file_data") or "")
    if inline is None or inline[0] != "application/pdf":
        raise BadRequest("Only PDF files sent inline (file_data) are supported by this provider")
    source = {"type": "base64", "media_type": "application/pdf", "data": inline[1]}
    return {"type": "document", "source": source}


def _user_blocks(content) -> list[dict]:
    if isinstance(content, str):
        return _text_blocks(content)
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks += _text_blocks([part])
        elif kind == "image_url":
            blocks.append(_image_block(part))
        elif kind == "file":
            blocks.append(_file_block(part))
        else:
            raise BadRequest(f"'{kind}' content is not supported by this provider")
    return blocks


def _tool_input(arguments: str) -> dict:
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise BadRequest("A tool call's arguments must be a JSON object for this provider")
    return value


def _assistant_blocks(message: dict) -> list[dict]:
    blocks = _text_blocks(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": _tool_input(function.get("arguments") or ""),
            }
        )
    return blocks


def _tool_result(message: dict) -> dict:
    content = message.get("content")
    result = content if isinstance(content, str) else _text_blocks(content)
    return {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": result}


def convert_messages(messages: list[dict]) -> tuple[list[dict], list[dict]]:
    """(system blocks, messages): system and developer messages go to `system` in order; the
    others become user/assistant turns, consecutive ones of a role merged into one (tool results
    with the user turn they belong to, as the API wants them)."""
    system: list[dict] = []
    turns: list[dict] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            system += _text_blocks(message["content"])
            continue
        if role == "assistant":
            blocks = _assistant_blocks(message)
        elif role == "tool":
            role, blocks = "user", [_tool_result(message)]
        else:
            blocks = _user_blocks(message["content"])
        if not blocks:
            continue  # the API refuses empty turns
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def _tool(entry: dict) -> dict:
    function = entry["function"]
    tool = {
        "name": function["name"],
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description") is not None:
        tool["description"] = function["description"]
    if function.get("strict"):
        tool["strict"] = True
    return tool


def _tool_choice(payload: dict) -> dict | None:
    choice = payload.get("tool_choice")
    if isinstance(choice, dict):
        mapped = {"type": "tool", "name": choice["function"]["name"]}
    elif choice in ("required", "none"):
        mapped = {"type": "any" if choice == "required" else "none"}
    elif choice == "auto" or payload.get("parallel_tool_calls") is False:
        mapped = {"type": "auto"}
    else:
        return None
    if payload.get("parallel_tool_calls") is False and mapped["type"] != "none":
        mapped["disable_parallel_tool_use"] = True
    return mapped


def _last_turn_calls_tools(turns: list[dict]) -> bool:
    """Whether the conversation's last assistant turn holds tool calls: that turn is being
    continued, and the API wants its thinking block first, which the contract's messages do not
    carry (so thinking stays off for it)."""
    for turn in reversed(turns):
        if turn["role"] == "assistant":
            return any(block["type"] == "tool_use" for block in turn["content"])
    return False


def _json_mode(payload: dict) -> tuple[dict | None, bool]:
    """(the output_config for a json_schema response_format, whether json_object asks for the
    forced JSON tool)."""
    response_format = payload.get("response_format") or {}
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if schema is not None:
            return {"format": {"type": "json_schema", "schema": schema}}, False
        kind = "json_object"  # a json_schema without a schema asks for any JSON object
    return None, kind == "json_object"


@dataclass(frozen=True)
class Shape:
    """What the answer's translation needs to know of the request."""

    json_tool: bool = False  # json_object, answered through the forced JSON tool
    show_reasoning: bool = True  # thinking comes back as `reasoning_content`


def shape_of(payload: dict, body: dict) -> Shape:
    reasoning = payload.get("reasoning")
    exclude = isinstance(reasoning, dict) and reasoning.get("exclude") is True
    json_tool = body.get("tool_choice", {}).get("name") == JSON_TOOL and not payload.get("tools")
    return Shape(json_tool=json_tool, show_reasoning=not exclude)


def _add_tools(payload: dict, body: dict) -> None:
    if payload.get("tools"):
        body["tools"] = [_tool(entry) for entry in payload["tools"]]
        choice = _tool_choice(payload)
        if choice is not None:
            body["tool_choice"] = choice


def _add_format(payload: dict, body: dict) -> None:
    output_config, json_tool = _json_mode(payload)
    if output_config is not None:
        body["output_config"] = {**body.get("output_config", {}), **output_config}
    if json_tool:
        if payload.get("tools") or "thinking" in body:
            raise BadRequest(
                "'response_format' json_object cannot be combined with tools or a reasoning "
                "effort on this provider; use a json_schema response_format"
            )
        body["tools"] = [_JSON_TOOL]
        body["tool_choice"] = {"type": "tool", "name": JSON_TOOL}


def messages_body(route: Route, payload: dict) -> dict:
    """The Messages API body for the contract's chat request."""
    system, turns = convert_messages(payload["messages"])
    max_tokens = max_output(route, payload)
    body: dict[str, Any] = {"model": payload["model"], "max_tokens": max_tokens}
    if system:
        body["system"] = system
    body["messages"] = turns
    for name in ("temperature", "top_p"):
        if payload.get(name) is not None:
            body[name] = payload[name]
    stop = payload.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    user = payload.get("user")
    if user and not _PERSONAL.fullmatch(user):
        body["metadata"] = {"user_id": user}
    _add_tools(payload, body)
    if not _last_turn_calls_tools(turns):
        body.update(_thinking_fields(route, payload, max_tokens) or {})
    _add_format(payload, body)
    if payload.get("stream"):
        body["stream"] = True
    return body


def check_messages(route: Route, payload: dict) -> None:
    """The contract's fields Claude cannot honour, refused before the call."""
    refuse_unsupported(payload)  # every field of CHAT_DEFAULTS
    temperature = payload.get("temperature")
    if temperature is not None and temperature > 1:
        raise BadRequest("'temperature' must be between 0 and 1 on this provider")
    body = messages_body(route, payload)  # refuses what cannot be converted
    if "thinking" not in body:
        return
    if temperature not in (None, 1):
        raise BadRequest("'temperature' cannot be set with a reasoning effort on this provider")
    top_p = payload.get("top_p")
    if top_p is not None and top_p < 0.95:
        raise BadRequest("'top_p' must be at least 0.95 with a reasoning effort on this provider")
    if body.get("tool_choice", {}).get("type") in ("any", "tool"):
        raise BadRequest(
            "'tool_choice' cannot force a tool call with a reasoning effort on this provider"
        )


# --- the answer ------------------------------------------------------------------------------


def _count(usage: dict, name: str) -> int:
    value = usage.get(name)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"usage {name} {value!r}")
    return value


def messages_usage(usage: Any) -> dict:
    """The contract's usage for Anthropic's: prompt = input + cache reads + cache writes,
    cached = cache reads, cache_write = cache writes, completion = output (thinking included),
    reasoning = `output_tokens_details.thinking_tokens` where the API reports it. ValueError
    for a malformed block."""
    if not isinstance(usage, dict):
        raise ValueError("usage is not an object")
    read = _count(usage, "cache_read_input_tokens")
    written = _count(usage, "cache_creation_input_tokens")
    details = usage.get("output_tokens_details")
    thinking = _count(details, "thinking_tokens") if isinstance(details, dict) else 0
    return contract_usage(
        prompt=_count(usage, "input_tokens") + read + written,
        completion=_count(usage, "output_tokens"),
        cached=read,
        cache_write=written,
        reasoning=thinking,
    )


def refusal_text(details: Any) -> str:
    """What `message.refusal` says: the API's explanation (scrubbed), else a plain sentence."""
    explanation = details.get("explanation") if isinstance(details, dict) else None
    return sanitize_message(explanation) if isinstance(explanation, str) else REFUSAL


def _tool_call(block: dict) -> dict:
    arguments = orjson.dumps(block.get("input") or {}).decode()
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def _answer_parts(blocks: list, shape: Shape) -> tuple[list[str], list[dict], list[str]]:
    texts: list[str] = []
    calls: list[dict] = []
    thoughts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use" and shape.json_tool and block.get("name") == JSON_TOOL:
            texts.append(orjson.dumps(block.get("input") or {}).decode())
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind == "thinking":
            thoughts.append(block["thinking"])
    return texts, calls, thoughts


def chat_answer(answer: Any, shape: Shape, model: str) -> dict:
    """The contract's chat completion for a Messages API answer."""
    try:
        blocks = answer["content"]
        if not isinstance(blocks, list):
            raise TypeError("content is not a list")
        texts, calls, thoughts = _answer_parts(blocks, shape)
        usage = messages_usage(answer.get("usage"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise malformed(f"anthropic message: {exc}") from exc
    stop = answer.get("stop_reason")
    finish = FINISH_REASONS.get(stop, "stop") if isinstance(stop, str) else "stop"
    if finish == "tool_calls" and not calls:
        finish = "stop"  # the forced JSON tool's call is the answer
    message: dict[str, Any] = {"content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if thoughts and shape.show_reasoning:
        message["reasoning_content"] = "".join(thoughts)
    if stop == "refusal":
        message["refusal"] = refusal_text(answer.get("stop_details"))
    answer_model = answer.get("model")
    return chat_completion(
        answer_id=answer.get("id") if isinstance(answer.get("id"), str) else "",
        model=answer_model if isinstance(answer_model, str) else model,
        created=now(),
        message=message,
        finish_reason=finish,
        usage=usage,
    )


# --- the stream ------------------------------------------------------------------------------


class MessagesEvents:
    """One Messages API stream in, the contract's chat chunks out: the role at `message_start`,
    text, thinking (as `reasoning_content`) and tool calls as their blocks stream, then at
    `message_stop` the finish reason, the usage chunk and `[DONE]`; an `error` event is the
    contract's error chunk; `ping` and event types this adapter does not know are skipped."""

    def __init__(self, model: str, shape: Shape):
        self.model = model
        self.shape = shape
        self.chunks: ChatChunks | None = None
        self.usage: dict = {}
        self.stop_reason: str | None = None
        self.stop_details: Any = None
        self.blocks: dict[int, str] = {}  # block index -> text, tool, json, thinking, other
        self.calls: dict[int, int] = {}  # block index -> the tool call's index
        self.argued: set[int] = set()  # tool blocks whose arguments came
        self.ended = False

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        event = loads_frame(data)
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            return [ChatChunks.error(message if isinstance(message, str) else "")]
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None or self.ended:
            return []  # ping, and event types added to the API since
        try:
            return handler(self, event)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StreamBroken(f"anthropic {kind} event: {exc}") from exc

    def end(self) -> list[bytes]:
        return []  # without message_stop the stream is incomplete: the relay says so

    def _started(self) -> ChatChunks:
        if self.chunks is None:
            raise StreamBroken("an event before message_start")
        return self.chunks

    def message_start(self, event: dict) -> list[bytes]:
        message = event["message"]
        model = message.get("model")
        self.chunks = ChatChunks(message["id"], model if isinstance(model, str) else self.model)
        self._merge_usage(message.get("usage") or {})
        return [self.chunks.role()]

    def _merge_usage(self, usage: dict) -> None:
        if not isinstance(usage, dict):
            raise TypeError("usage is not an object")
        self.usage.update((k, v) for k, v in usage.items() if v is not None)

    def block_start(self, event: dict) -> list[bytes]:
        chunks = self._started()
        index, block = event["index"], event["content_block"]
        kind = block["type"]
        if kind == "tool_use" and self.shape.json_tool and block["name"] == JSON_TOOL:
            self.blocks[index] = "json"
        elif kind == "tool_use":
            self.blocks[index] = "tool"
            self.calls[index] = len(self.calls)
            return [chunks.tool_call(self.calls[index], block["id"], block["name"])]
        elif kind == "text":
            self.blocks[index] = "text"
            return [chunks.text(block["text"])] if block.get("text") else []
        else:
            self.blocks[index] = "thinking" if kind == "thinking" else "other"
        return []

    def block_delta(self, event: dict) -> list[bytes]:
        chunks = self._started()
        index, delta = event["index"], event["delta"]
        kind, block = delta["type"], self.blocks.get(index)
        if kind == "text_delta" and block == "text":
            return [chunks.text(delta["text"])] if delta["text"] else []
        if kind == "thinking_delta" and block == "thinking":
            thought = delta["thinking"]
            return [chunks.reasoning(thought)] if thought and self.shape.show_reasoning else []
        if kind == "input_json_delta" and block in ("tool", "json"):
            partial = delta["partial_json"]
            if not partial:
                return []
            if block == "json":
                return [chunks.text(partial)]
            self.argued.add(index)
            return [chunks.tool_arguments(self.calls[index], partial)]
        if block is None:
            raise StreamBroken("a delta of a block that never started")
        return []  # signatures, citations, deltas of blocks not relayed

    def block_stop(self, event: dict) -> list[bytes]:
        chunks = self._started()
        index = event["index"]
        if self.blocks.get(index) == "tool" and index not in self.argued:
            return [chunks.tool_arguments(self.calls[index], "{}")]  # a call without arguments
        return []

    def message_delta(self, event: dict) -> list[bytes]:
        self._started()
        delta = event["delta"]
        if delta.get("stop_reason") is not None:
            self.stop_reason = delta["stop_reason"]
        if delta.get("stop_details") is not None:
            self.stop_details = delta["stop_details"]
        self._merge_usage(event.get("usage") or {})
        return []

    def message_stop(self, event: dict) -> list[bytes]:
        chunks = self._started()
        self.ended = True
        stop = self.stop_reason
        finish = FINISH_REASONS.get(stop, "stop") if isinstance(stop, str) else "stop"
        if finish == "tool_calls" and not self.calls:
            finish = "stop"
        out = [chunks.refusal(refusal_text(self.stop_details))] if stop == "refusal" else []
        out += [chunks.finish(finish), chunks.usage(messages_usage(self.usage)), chunks.done()]
        return out


_HANDLERS = {
    "message_start": MessagesEvents.message_start,
    "content_block_start": MessagesEvents.block_start,
    "content_block_delta": MessagesEvents.block_delta,
    "content_block_stop": MessagesEvents.block_stop,
    "message_delta": MessagesEvents.message_delta,
    "message_stop": MessagesEvents.message_stop,
}


# --- the adapter -----------------------------------------------------------------------------


class AnthropicTransport(ResponsesOverChat, Transport):
    kind = "anthropic"
    checks_requests = True

    def auth_headers(self, route: Route, method: str, url: str, body: bytes) -> dict[str, str]:
        return {"x-api-key": route.connection.api_key, "anthropic-version": ANTHROPIC_VERSION}

    def error_message(self, response: httpx.Response) -> str:
        """`{"type": "error", "error": {"type", "message"}}`."""
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return response.text[:500]
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return message if isinstance(message, str) else super().error_message(response)

    def check_chat(self, route: Route, payload: dict) -> None:
        check_messages(route, payload)

    async def chat(self, route: Route, payload: dict) -> dict:
        body = messages_body(route, {**payload, "stream": False})
        answer = await self.post_json(route, "/messages", body, max_bytes=self.answer_cap("chat"))
        return chat_answer(answer, shape_of(payload, body), route.upstream_model)

    async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream:
        body = messages_body(route, payload)
        shape = shape_of(payload, body)
        response = await self.open_stream(route, "/messages", body)

        def decoder(max_event: int) -> EventDecoder:
            translator = MessagesEvents(route.upstream_model, shape)
            return TranslatingDecoder(SSEFrames(max_event), translator)

        return UpstreamStream(response, decoder)
