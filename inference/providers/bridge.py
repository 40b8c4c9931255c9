"""`/v1/responses` through a provider's chat API, for every kind without a Responses API of its
own (Anthropic, Bedrock Converse, Gemini, an OpenAI-compatible server without one).

Stateless, in the contract's shapes on both sides: the Responses request becomes the contract's
chat request (`responses_to_chat`), the adapter's `chat` / `chat_stream` make the call in their
own wire format, and the contract's chat answer or chunks become the Responses answer or events
(`chat_to_response`, `ChatToResponsesEvents`). `previous_response_id` and `item_reference` stay
the spec's 400 (`stateful_responses = False`); docs/decisions/providers.md says what maps.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from catalog.routing import Route
from core.errors import PROVIDER_ERROR, BadRequest

from .base import UpstreamStream, malformed
from .events import (
    DecodedFrames,
    EventDecoder,
    EventTranslator,
    StreamBroken,
    TranslatingDecoder,
    loads_frame,
    now,
)

# --- the request: Responses -> chat ------------------------------------------------------------

# Passed on under the same name (chat's own fields).
_SAME = ("temperature", "top_p", "parallel_tool_calls", "user", "metadata")
_IMAGE_DETAIL = {"auto": "auto", "low": "low", "high": "high", "original": "high"}


def _refused(what: str) -> BadRequest:
    return BadRequest(f"{what} is not supported by this provider")


def _image_part(part: dict) -> dict:
    if not part.get("image_url"):
        raise _refused("'input_image' with 'file_id'")  # the file lives in OpenAI's store
    image: dict[str, Any] = {"url": part["image_url"]}
    if part.get("detail") is not None:
        image["detail"] = _IMAGE_DETAIL[part["detail"]]
    return {"type": "image_url", "image_url": image}


def _file_part(part: dict) -> dict:
    if part.get("file_url"):
        raise _refused("'input_file' with 'file_url'")  # the chat APIs fetch no URL
    if not (part.get("file_data") or part.get("file_id")):
        raise BadRequest("'input_file' needs 'file_data' or 'file_id'")
    file = {key: part[key] for key in ("file_data", "file_id", "filename") if part.get(key)}
    return {"type": "file", "file": file}


def _part(part: dict) -> dict:
    """A Responses content part as the chat part that carries the same."""
    kind = part["type"]
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":  # what the assistant said: the model reads it back as text
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        return _image_part(part)
    if kind == "input_file":
        return _file_part(part)
    if kind == "input_audio":
        return {"type": "input_audio", "input_audio": part["input_audio"]}
    raise _refused(f"content part '{kind}'")


def _content(content: str | list, role: str) -> str | list[dict]:
    """A message's content: a string as it is, parts as chat parts. Only a user message takes
    more than text in the chat API."""
    if isinstance(content, str):
        return content
    parts = [_part(part) for part in content]
    if role != "user":
        for original, part in zip(content, parts, strict=True):
            if part["type"] != "text":
                raise _refused(f"'{original['type']}' in a {role} message")
        if role == "assistant":
            return "".join(part["text"] for part in parts)
    return parts


def _tool_output(output: str | list) -> str | list[dict]:
    if isinstance(output, str):
        return output
    for part in output:
        if part["type"] != "input_text":
            raise _refused(f"'{part['type']}' in a 'function_call_output'")
    return [{"type": "text", "text": part["text"]} for part in output]


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


class _Messages:
    """The chat messages of Responses input items, in order."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    def add(self, item: dict) -> None:
        kind = item.get("type") or "message"
        if kind == "message":
            role = item["role"]
            self.messages.append({"role": role, "content": _content(item["content"], role)})
        elif kind == "function_call":
            self._call(item)
        elif kind == "function_call_output":
            content = _tool_output(item["output"])
            self.messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": content}
            )
        elif kind == "reasoning":
            pass  # dropped: a chat request has no place for an earlier turn's reasoning
        else:  # item_reference: the endpoint's 400 comes first
            raise _refused(f"input item '{kind}'")

    def _call(self, item: dict) -> None:
        """Consecutive calls are one assistant message with several tool calls, and calls that
        follow the assistant's text belong to its message (the chat API's own shape)."""
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": _arguments(item["arguments"])},
        }
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": None}
            self.messages.append(last)
        last.setdefault("tool_calls", []).append(call)


def _function_tool(tool: dict) -> dict:
    function = {
        key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool
    }
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text_format: dict) -> dict:
    if text_format["type"] != "json_schema":
        return {"type": text_format["type"]}
    schema = {"name": text_format["name"], "schema": text_format["schema"]}
    for key in ("description", "strict"):
        if text_format.get(key) is not None:
            schema[key] = text_format[key]
    return {"type": "json_schema", "json_schema": schema}


def effort_of(payload: dict) -> str | None:
    reasoning = payload.get("reasoning")
    if isinstance(reasoning, dict):
        return reasoning.get("effort")
    return payload.get("reasoning_effort")


def _reasoning_excluded(request: dict) -> bool:
    reasoning = request.get("reasoning")
    return isinstance(reasoning, dict) and bool(reasoning.get("exclude"))


def _input_messages(payload: dict) -> list[dict]:
    messages = _Messages()
    if payload.get("instructions"):
        messages.messages.append({"role": "system", "content": payload["instructions"]})
    given = payload["input"]
    if isinstance(given, str):
        messages.messages.append({"role": "user", "content": given})
    else:
        for item in given:
            messages.add(item)
    return messages.messages


# What a chat call cannot carry, refused (400) when set to anything but its default; every other
# field is mapped or dropped as advisory (the table in docs/decisions/README.md, "Responses fields
# by provider kind").
_REFUSED_UNLESS: dict[str, tuple[Any, ...]] = {
    "conversation": (None,),  # state kept at the provider
    "prompt": (None,),  # a template stored at the provider
    "background": (None, False),  # needs the answer stored to be fetched later
    "top_logprobs": (None, 0),  # the translated answer carries no logprobs
    "max_tool_calls": (None,),  # one chat call cannot be capped by tool calls
    "moderation": (None,),  # the provider's own moderation of the Responses API
    "service_tier": (None, "auto", "default"),  # another tier is another price
}
_TOOL_KINDS = ("function", None)  # the function format, and `{name, input_schema}`


def _refuse_unmappable(payload: dict) -> None:
    for name, defaults in _REFUSED_UNLESS.items():
        if payload.get(name) not in defaults:
            raise _refused(f"'{name}'")
    reasoning = payload.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("mode") not in (None, "standard"):
        raise _refused("'reasoning.mode'")
    for tool in payload.get("tools") or ():
        if tool.get("type") not in _TOOL_KINDS:
            raise _refused(f"the '{tool['type']}' tool")
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") != "function":
        raise _refused(f"tool_choice '{choice['type']}'")


def responses_to_chat(payload: dict) -> dict:
    """The contract's chat request for a Responses request (stream flags included).

    Dropped, with their reasons in docs/decisions/providers.md: `store` (nothing is stored),
    the advisory `prompt_cache_key`, `prompt_cache_retention`, `prompt_cache_options`,
    `safety_identifier`, `client_metadata`, `stream_options`, `context_management`, `image`,
    `access_programs`, `reasoning.context`,
    `truncation` (a chat call never truncates: an input over the context is the provider's
    400), `include` (only `reasoning.encrypted_content` passes the endpoint, and there is
    none to give), `text.verbosity` and `reasoning.summary` / `generate_summary` (no chat
    counterpart; the reasoning text the provider gives is answered as it is), `reasoning`
    items of the input (a chat request cannot carry them back)."""
    _refuse_unmappable(payload)
    chat: dict[str, Any] = {"model": payload["model"], "messages": _input_messages(payload)}
    for key in _SAME:
        if payload.get(key) is not None:
            chat[key] = payload[key]
    if payload.get("max_output_tokens") is not None:
        chat["max_completion_tokens"] = payload["max_output_tokens"]
    if payload.get("tools") is not None:
        chat["tools"] = [_function_tool(tool) for tool in payload["tools"]]
    if payload.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(payload["tool_choice"])
    text_format = (payload.get("text") or {}).get("format")
    if text_format is not None:
        chat["response_format"] = _response_format(text_format)
    effort = effort_of(payload)
    if effort is not None:
        chat["reasoning_effort"] = effort
    if payload.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


# --- the answer: chat -> Responses -------------------------------------------------------------

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def response_ids(chat_id: Any) -> str:
    """The hex a response's ids are made of: the same for the same chat answer id (a stream
    and its chunks), random when the provider gave none."""
    if isinstance(chat_id, str) and chat_id:
        return hashlib.sha256(chat_id.encode()).hexdigest()[:48]
    return uuid.uuid4().hex + uuid.uuid4().hex[:16]


def response_usage(usage: Any) -> dict:
    """The contract's chat usage (`contract_usage`) in the Responses API's words; cache writes
    as `input_tokens_details.cache_write_tokens` (providers.usage.openai_responses)."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": prompt_details.get("cached_tokens") or 0,
            "cache_write_tokens": prompt_details.get("cache_write_tokens") or 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": completion_details.get("reasoning_tokens") or 0
        },
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def _echo_tool(tool: dict) -> dict:
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def response_object(
    request: dict,
    *,
    ids: str,
    created: int,
    model: str,
    status: str,
    output: list[dict],
    usage: dict | None,
    finish_reason: str | None = None,
) -> dict:
    """A Responses object with the request's settings echoed as the Responses API does."""
    reasoning = request.get("reasoning")
    summary = reasoning.get("summary") if isinstance(reasoning, dict) else None
    text = request.get("text") or {}
    incomplete = INCOMPLETE.get(finish_reason or "") if status == "incomplete" else None
    return {
        "id": f"resp_{ids}",
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "completed_at": None if status == "in_progress" else created,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": {"effort": effort_of(request), "summary": summary},
        "store": False,  # nothing is kept: the translation is stateless
        "temperature": request.get("temperature"),
        "text": {
            "format": text.get("format") or {"type": "text"},
            "verbosity": text.get("verbosity"),
        },
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": [_echo_tool(tool) for tool in request.get("tools") or ()],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": usage,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(text: str) -> dict:
    return {"type": "refusal", "refusal": text}


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def message_item(item_id: str, content: list[dict], status: str) -> dict:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _reasoning_text(holder: dict) -> Any:
    """The contract, vLLM and DeepSeek say `reasoning_content`; OpenRouter and Ollama say
    `reasoning`."""
    text = holder.get("reasoning_content")
    return text if text is not None else holder.get("reasoning")


def _message_text(content: Any) -> Any:
    """A message's content; a list of text parts (some servers answer so) as its text."""
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return content


def _output(message: dict, ids: str, status: str, request: dict) -> list[dict]:
    """The output items of a chat answer's message; item ids `<prefix>_<ids>_<output index>`,
    as a stream of the same answer numbers them."""
    output = []
    reasoning = _reasoning_text(message)
    if isinstance(reasoning, str) and reasoning and not _reasoning_excluded(request):
        output.append(reasoning_item(f"rs_{ids}_0", reasoning, status))
    content, refusal = _message_text(message.get("content")), message.get("refusal")
    calls = message.get("tool_calls") or []
    parts = [text_part(content)] if isinstance(content, str) and content else []
    if isinstance(refusal, str) and refusal:
        parts.append(refusal_part(refusal))
    if parts or not calls:
        item_id = f"msg_{ids}_{len(output)}"
        output.append(message_item(item_id, parts or [text_part("")], status))
    for call in calls:
        function, index = call["function"], len(output)
        output.append(
            call_item(
                f"fc_{ids}_{index}",
                call.get("id") or f"call_{ids[:24]}_{index}",
                function["name"],
                _arguments(function.get("arguments") or ""),
                status,
            )
        )
    return output


def chat_to_response(answer: dict, request: dict) -> dict:
    """The contract's Responses object for a chat completion answering `request`: the first
    choice's reasoning, text or refusal, and tool calls as output items in that order;
    `finish_reason` length or content_filter make the response `incomplete`."""
    try:
        choice = answer["choices"][0]
        message = choice["message"]
        finish = choice.get("finish_reason")
        ids = response_ids(answer.get("id"))
        status = "incomplete" if finish in INCOMPLETE else "completed"
        output = _output(message, ids, status, request)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise malformed("chat answer without a readable choice") from exc
    created = answer.get("created")
    model = answer.get("model")
    return response_object(
        request,
        ids=ids,
        created=created if isinstance(created, int) else now(),
        model=model if isinstance(model, str) and model else request["model"],
        status=status,
        output=output,
        usage=response_usage(answer.get("usage")),
        finish_reason=finish,
    )


# --- the stream: chat chunks -> Responses events -----------------------------------------------


class _Item:
    """One output item being streamed: a message (its parts), a reasoning item or a call."""

    def __init__(self, kind: str, index: int, item_id: str, call_id: str = "", name: str = ""):
        self.kind = kind
        self.index = index
        self.id = item_id
        self.call_id = call_id
        self.name = name
        self.parts: list[tuple[str, list[str]]] = []  # (part type, its pieces)
        self.final: dict | None = None  # the item as its `output_item.done` carried it

    def where(self, part: int | None = None) -> dict:
        where: dict[str, Any] = {"item_id": self.id, "output_index": self.index}
        if part is not None:
            where["content_index"] = part
        return where


_PREFIX = {"message": "msg", "reasoning": "rs", "function_call": "fc"}
_EMPTY_PART = {
    "output_text": text_part(""),
    "refusal": refusal_part(""),
    "reasoning_text": {"type": "reasoning_text", "text": ""},
}
_DELTA = {
    "output_text": "response.output_text.delta",
    "refusal": "response.refusal.delta",
    "reasoning_text": "response.reasoning_text.delta",
}


def _done_part(kind: str, text: str) -> tuple[str, dict, dict]:
    """(event, its fields, the finished part) of a content part's end."""
    if kind == "output_text":
        return "response.output_text.done", {"text": text, "logprobs": []}, text_part(text)
    if kind == "refusal":
        return "response.refusal.done", {"refusal": text}, refusal_part(text)
    part = {"type": "reasoning_text", "text": text}
    return "response.reasoning_text.done", {"text": text}, part


class ChatToResponsesEvents:
    """Contract chat chunks in, the contract's Responses events out (one stream).

    `response.created` and `response.in_progress` come with the first chunk; each kind of
    delta goes to an output item of its own (reasoning, the message with its `output_text` or
    `refusal` parts, one `function_call` per tool call index, so that interleaved parallel
    calls come out as separate items); an item is done when another kind of item starts (a
    call at `[DONE]`), and `[DONE]` ends the response with `response.completed` (or
    `response.incomplete`) carrying the whole response and the usage of the usage-only chunk
    (null without one). A chat error chunk is an `error` event, and nothing follows it."""

    def __init__(self, request: dict):
        self.request = request
        self.sequence = 0
        self.ids = ""
        self.model = request["model"]
        self.created = 0
        self.items: list[_Item] = []
        self.open: _Item | None = None  # the message or reasoning item text deltas go to
        self.calls: dict[Any, _Item] = {}  # chat tool call index -> its item
        self.last_call: Any = None  # the index of the call opened last
        self.finish: str | None = None
        self.usage: dict | None = None
        self.ended = False
        self.exclude_reasoning = _reasoning_excluded(request)

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = orjson.dumps({"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        if self.ended:
            return []
        if data.strip() == b"[DONE]":
            return self._done()
        chunk = loads_frame(data)
        if chunk.get("error"):
            return self._error(chunk["error"])
        out = [] if self.ids else self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        choices = [] if choices is None else choices
        if not isinstance(choices, list):
            raise StreamBroken("a chat chunk's choices are not a list")
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            delta = {} if delta is None else delta
            if not isinstance(choice, dict) or not isinstance(delta, dict):
                raise StreamBroken("a chat chunk's choice is not an object")
            out += self._delta(delta)
            if isinstance(choice.get("finish_reason"), str):
                self.finish = choice["finish_reason"]
        return out

    def end(self) -> list[bytes]:
        # Without `[DONE]` (or an error) the chat stream failed: the relay sees no final event
        # and sends the in-stream error.
        return []

    # --- the response's life ---------------------------------------------------------------

    def _response(self, status: str, usage: dict | None = None) -> dict:
        output = (
            [item.final for item in self.items if item.final] if status != "in_progress" else []
        )
        return response_object(
            self.request,
            ids=self.ids,
            created=self.created,
            model=self.model,
            status=status,
            output=output,
            usage=usage,
            finish_reason=self.finish,
        )

    def _start(self, chunk: dict) -> list[bytes]:
        self.ids = response_ids(chunk.get("id"))
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        created = chunk.get("created")
        self.created = created if isinstance(created, int) else now()
        started = self._response("in_progress")
        return [
            self._event("response.created", response=started),
            self._event("response.in_progress", response=started),
        ]

    def _done(self) -> list[bytes]:
        out = [] if self.ids else self._start({})
        if not self.items:  # an empty answer is an empty message, as the API gives one
            out += self._text("output_text", "")
        status = "incomplete" if self.finish in INCOMPLETE else "completed"
        for item in self.items:
            if item.final is None:
                out += self._close(item, status)
        # Without a usage chunk the usage is null, not zeros: the relay then records the
        # stream at zero cost and logs that it ended without usage (as a chat stream's).
        usage = response_usage(self.usage) if self.usage is not None else None
        final = self._response(status, usage)
        out.append(self._event(f"response.{status}", response=final))
        self.ended = True
        return out

    def _error(self, error: Any) -> list[bytes]:
        error = error if isinstance(error, dict) else {"message": error}
        code, kind, param = error.get("code"), error.get("type"), error.get("param")
        message = error.get("message")
        out = [] if self.ids else self._start({})  # every stream opens with response.created
        self.ended = True
        return out + [
            self._event(
                "error",
                code=code if isinstance(code, str) else kind if isinstance(kind, str) else None,
                message=message if isinstance(message, str) and message else PROVIDER_ERROR,
                param=param if isinstance(param, str) else None,
            )
        ]

    # --- deltas ----------------------------------------------------------------------------

    def _delta(self, delta: dict) -> list[bytes]:
        out: list[bytes] = []
        reasoning = _reasoning_text(delta)
        if isinstance(reasoning, str) and reasoning and not self.exclude_reasoning:
            out += self._text("reasoning_text", reasoning)
        for key, kind in (("content", "output_text"), ("refusal", "refusal")):
            if isinstance(delta.get(key), str) and delta[key]:
                out += self._text(kind, delta[key])
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            raise StreamBroken("a chat chunk's tool_calls are not a list")
        for position, call in enumerate(calls):
            out += self._call(call, position)
        return out

    def _add(self, kind: str, **fields: Any) -> tuple[_Item, bytes]:
        index = len(self.items)
        item = _Item(kind, index, f"{_PREFIX[kind]}_{self.ids}_{index}", **fields)
        self.items.append(item)
        if kind == "function_call":
            opened = call_item(item.id, item.call_id, item.name, "", "in_progress")
        elif kind == "reasoning":
            opened = {**reasoning_item(item.id, "", "in_progress"), "content": []}
        else:
            opened = message_item(item.id, [], "in_progress")
        return item, self._event("response.output_item.added", output_index=index, item=opened)

    def _text(self, kind: str, text: str) -> list[bytes]:
        """A piece of the message's text or refusal, or of the reasoning."""
        out: list[bytes] = []
        wanted = "reasoning" if kind == "reasoning_text" else "message"
        item = self.open
        if item is None or item.kind != wanted:
            if item is not None:
                out += self._close(item, "completed")
            item, added = self._add(wanted)
            self.open = item
            out.append(added)
        if not item.parts or item.parts[-1][0] != kind:
            item.parts.append((kind, []))
            where = item.where(len(item.parts) - 1)
            out.append(self._event("response.content_part.added", **where, part=_EMPTY_PART[kind]))
        if text:
            item.parts[-1][1].append(text)
            where = item.where(len(item.parts) - 1)
            extra: dict = {"logprobs": []} if kind == "output_text" else {}
            out.append(self._event(_DELTA[kind], **where, delta=text, **extra))
        return out

    def _call(self, call: Any, position: int) -> list[bytes]:
        if not isinstance(call, dict) or not isinstance(call.get("function") or {}, dict):
            raise StreamBroken("a chat chunk's tool call is not an object")
        function = call.get("function") or {}
        index = call.get("index")
        if index is None:  # a server that numbers no calls: each id a call, pieces the last's
            index = call.get("id") or self.last_call or position
        out: list[bytes] = []
        item = self.calls.get(index)
        if item is None:
            if self.open is not None:
                out += self._close(self.open, "completed")
            call_id = call.get("id") or f"call_{self.ids[:24]}_{len(self.items)}"
            item, added = self._add(
                "function_call", call_id=call_id, name=function.get("name") or ""
            )
            self.calls[index] = item
            self.last_call = index
            item.parts.append(("arguments", []))
            out.append(added)
        if not item.name and isinstance(function.get("name"), str):
            item.name = function["name"]  # a server that names the call after opening it
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.parts[0][1].append(arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.delta", **item.where(), delta=arguments
                )
            )
        return out

    def _close(self, item: _Item, status: str) -> list[bytes]:
        if item is self.open:
            self.open = None
        out: list[bytes] = []
        if item.kind == "function_call":
            arguments = "".join(item.parts[0][1])
            out.append(
                self._event(
                    "response.function_call_arguments.done", **item.where(), arguments=arguments
                )
            )
            item.final = call_item(item.id, item.call_id, item.name, arguments, status)
        else:
            parts = []
            for number, (kind, pieces) in enumerate(item.parts):
                event, fields, part = _done_part(kind, "".join(pieces))
                out.append(self._event(event, **item.where(number), **fields))
                out.append(
                    self._event("response.content_part.done", **item.where(number), part=part)
                )
                parts.append(part)
            if item.kind == "reasoning":
                item.final = {**reasoning_item(item.id, "", status), "content": parts}
            else:
                item.final = message_item(item.id, parts, status)
        out.append(
            self._event("response.output_item.done", output_index=item.index, item=item.final)
        )
        return out


def _translator(request: dict) -> EventTranslator:
    return ChatToResponsesEvents(request)


class ResponsesOverChat:
    """Mixin of an adapter with `chat` and `chat_stream`: `/v1/responses` through them."""

    stateful_responses: ClassVar[bool] = False
    # The translation refuses what a chat request cannot carry (`responses_to_chat`), before
    # the call (step 7).
    checks_requests: ClassVar[bool] = True
    # What a translated answer can honour: encrypted reasoning is asked by agents (Codex) and
    # is simply absent from the answer (the Responses API's own rule when there is none).
    responses_include: ClassVar[frozenset[str] | None] = frozenset({"reasoning.encrypted_content"})

    if TYPE_CHECKING:  # the adapter's own (ChatProvider)

        async def chat(self, route: Route, payload: dict) -> dict: ...

        async def chat_stream(self, route: Route, payload: dict) -> UpstreamStream: ...

        def check_chat(self, route: Route, payload: dict) -> None: ...

    def check_responses(self, route: Route, payload: dict) -> None:
        """What the chat call would refuse, refused before it (step 7)."""
        self.check_chat(route, responses_to_chat(payload))

    async def responses(self, route: Route, payload: dict) -> dict:
        answer = await self.chat(route, responses_to_chat(payload))
        return chat_to_response(answer, payload)

    async def responses_stream(self, route: Route, payload: dict) -> UpstreamStream:
        opened = await self.chat_stream(route, responses_to_chat(payload))
        inner = opened.decoder

        def decoder(max_event: int) -> EventDecoder:
            from .events import SSEDecoder

            chat_events: Any = SSEDecoder(max_event) if inner is None else inner(max_event)
            return TranslatingDecoder(DecodedFrames(chat_events), _translator(payload))

        return UpstreamStream(opened.response, decoder)
