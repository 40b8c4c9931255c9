"""Chat completions on the Gemini API: the contract's chat request as a `GenerateContentRequest`
(`models/{model}:generateContent`, `:streamGenerateContent?alt=sse`), and Gemini's
`GenerateContentResponse` (whole, or one per SSE event) back as the contract's answer and chunks.

What maps to what, and what is refused, is in docs/providers.md ("Google Gemini"); the choices
the issue left open are in docs/decisions/providers.md. In short:

- system/developer messages -> `systemInstruction` (in order); user/assistant -> `contents`
  (roles user/model); images, audio, video and files only as `data:` URLs (`inlineData`);
- assistant tool calls -> `functionCall` parts, tool messages -> `functionResponse` parts
  `{"output": <content>}` named after the call they answer;
- a call's Gemini `id` and `thoughtSignature` travel inside the contract's tool call id
  (`tool_call_id`), so that a client that sends the conversation back sends them back too.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from typing import Any

import orjson

from core.errors import BadRequest

from .base import malformed, refuse_unsupported
from .events import (
    ChatChunks,
    StreamBroken,
    chat_completion,
    contract_usage,
    loads_frame,
    now,
)

# --- tool call ids: the Gemini call's id and thought signature, round-tripped -------------------

# `call_<hash>` (no id from the API) or `fc_<the API's id>`, then `~<thoughtSignature>` when the
# part carried one. Signatures are base64 (no `~`).
SIGNATURE_SEPARATOR = "~"
API_ID_PREFIX = "fc_"
# Google's documented stand-in for a function call step without a signature (a conversation
# begun on another model): Gemini 3 refuses the step otherwise.
SKIP_SIGNATURE = "skip_thought_signature_validator"

# Reasoning effort -> Gemini 2.5's `thinkingBudget` (tokens; 0 turns thinking off, Flash only)
# and Gemini 3's `thinkingLevel`. Which efforts a model takes is its catalog row's
# `reasoning_efforts` (checked before the call).
THINKING_BUDGET = {"none": 0, "low": 1024, "medium": 8192, "high": 24576}
THINKING_LEVEL = {"none": "minimal", "low": "low", "medium": "medium", "high": "high"}

FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
}
TOOL_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
EMPTY_MESSAGE = {"role": "assistant", "content": None, "refusal": None}
PROMPT_BLOCKED = "The prompt was blocked by the provider's safety filter ({reason})."

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)(?:;[\w=.+-]+)*;base64,(.*)$", re.DOTALL)
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mp3"}


def thinks_in_levels(model: str) -> bool:
    """Gemini 3 and later take `thinkingLevel`; Gemini 2.5 takes `thinkingBudget`."""
    return not model.startswith(("gemini-2", "gemini-1"))


def tool_call_id(base: str, signature: str | None) -> str:
    return f"{base}{SIGNATURE_SEPARATOR}{signature}" if signature else base


def split_call_id(call_id: str) -> tuple[str | None, str | None]:
    """(the Gemini call's own id or None, its thought signature or None)."""
    base, _, signature = call_id.partition(SIGNATURE_SEPARATOR)
    api_id = base[len(API_ID_PREFIX) :] if base.startswith(API_ID_PREFIX) else None
    return api_id or None, signature or None


def stable_call_id(answer_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{answer_id}:{index}".encode()).hexdigest()[:24]
    return f"call_{digest}"


# --- the request --------------------------------------------------------------------------------


def check_request(payload: dict) -> None:
    """The contract fields Gemini has no counterpart for, refused (`BadRequest`) before the call;
    the value that asks for the default is accepted. Also what `gemini_request` cannot map."""
    refuse_unsupported(payload, ("logprobs", "top_logprobs", "logit_bias"))
    if payload.get("stream") and (payload.get("n") or 1) > 1:
        raise BadRequest("'n' greater than 1 is not supported with 'stream' by this provider")
    gemini_request(payload)  # what cannot be mapped (an image URL, an unknown tool call id)


def gemini_request(payload: dict) -> dict:
    """The `GenerateContentRequest` for the contract's chat request (`BadRequest` for what cannot
    be mapped)."""
    model = payload["model"]
    system, contents = _contents(payload["messages"], model)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    tools = payload.get("tools")
    if tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t["function"]) for t in tools]}]
        body["toolConfig"] = {"functionCallingConfig": _calling_config(payload.get("tool_choice"))}
    config = _generation_config(payload, model)
    if config:
        body["generationConfig"] = config
    return body


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or ())


def _contents(messages: list[dict], model: str) -> tuple[list[str], list[dict]]:
    system: list[str] = []
    contents: list[dict] = []
    names: dict[str, str] = {}  # contract tool call id -> function name
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            text = _text_of(message["content"])
            if text:  # Gemini refuses an empty part
                system.append(text)
            continue
        if role == "user":
            turn, parts = "user", _user_parts(message["content"])
        elif role == "assistant":
            turn, parts = "model", _model_parts(message, names, model)
        else:
            turn, parts = "user", [_function_response(message, names)]
        if not parts:
            continue
        if contents and contents[-1]["role"] == turn:
            contents[-1]["parts"].extend(parts)  # Gemini alternates turns
        else:
            contents.append({"role": turn, "parts": parts})
    return system, contents


def _user_parts(content: Any) -> list[dict]:
    if isinstance(content, str):
        return [{"text": content}]
    return [_user_part(part) for part in content]


def _user_part(part: dict) -> dict:
    kind = part["type"]
    if kind == "text":
        return {"text": part["text"]}
    if kind == "input_audio":
        audio = part["input_audio"]
        return {"inlineData": {"mimeType": _AUDIO_TYPES[audio["format"]], "data": audio["data"]}}
    if kind == "file":
        if not part["file"].get("file_data"):
            raise BadRequest("file parts need 'file_data' (a data: URL) with this provider")
        return _inline(part["file"]["file_data"], "file_data")
    field = {"image_url": "image_url", "video_url": "video_url"}[kind]
    return _inline(part[field]["url"], field)


def _inline(url: str, field: str) -> dict:
    match = _DATA_URL.match(url)
    if match is None:
        raise BadRequest(
            f"'{field}' must be a data: URL (base64) with this provider; "
            "it does not fetch http(s) URLs"
        )
    return {"inlineData": {"mimeType": match.group(1), "data": match.group(2)}}


def _model_parts(message: dict, names: dict[str, str], model: str) -> list[dict]:
    parts: list[dict] = []
    text = _text_of(message.get("content"))
    if text:
        parts.append({"text": text})
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        names[call["id"]] = function["name"]
        api_id, signature = split_call_id(call["id"])
        try:
            args = orjson.loads(function["arguments"] or "{}")
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            raise BadRequest("tool call arguments must be a JSON object with this provider")
        part: dict[str, Any] = {"functionCall": {"name": function["name"], "args": args}}
        if api_id:
            part["functionCall"]["id"] = api_id
        if signature is None and index == 0 and thinks_in_levels(model):
            signature = SKIP_SIGNATURE  # a call Gemini did not make (another model's)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(message: dict, names: dict[str, str]) -> dict:
    call_id = message["tool_call_id"]
    name = names.get(call_id)
    if name is None:
        raise BadRequest(f"tool message '{call_id}' answers no earlier tool call")
    response: dict[str, Any] = {"name": name, "response": {"output": _text_of(message["content"])}}
    api_id, _ = split_call_id(call_id)
    if api_id:
        response["id"] = api_id
    return {"functionResponse": response}


def _declaration(function: dict) -> dict:
    declaration = {"name": function["name"]}
    if function.get("description"):
        declaration["description"] = function["description"]
    if function.get("parameters"):
        declaration["parametersJsonSchema"] = function["parameters"]
    return declaration


def _calling_config(choice: Any) -> dict:
    if isinstance(choice, dict):
        return {"mode": "ANY", "allowedFunctionNames": [choice["function"]["name"]]}
    return {"mode": TOOL_MODES[choice or "auto"]}


_CONFIG_FIELDS = {
    "temperature": "temperature",
    "top_p": "topP",
    "n": "candidateCount",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "seed": "seed",
}


def _generation_config(payload: dict, model: str) -> dict:
    config = {
        name: payload[field]
        for field, name in _CONFIG_FIELDS.items()
        if payload.get(field) is not None
    }
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if limit is not None:
        config["maxOutputTokens"] = limit
    stop = payload.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else stop
    config.update(_response_format(payload.get("response_format")))
    thinking = _thinking(payload, model)
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def _response_format(response_format: dict | None) -> dict:
    kind = (response_format or {}).get("type")
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        schema = response_format["json_schema"].get("schema")  # type: ignore[index]
        if schema:
            return {"responseMimeType": "application/json", "responseJsonSchema": schema}
        return {"responseMimeType": "application/json"}
    return {}


def _thinking(payload: dict, model: str) -> dict:
    reasoning = payload.get("reasoning") or {}
    effort = reasoning.get("effort") or payload.get("reasoning_effort")
    thinking: dict[str, Any] = {}
    if effort is not None:
        if thinks_in_levels(model):
            thinking["thinkingLevel"] = THINKING_LEVEL[effort]
        else:
            thinking["thinkingBudget"] = THINKING_BUDGET[effort]
    # Thought summaries whenever an effort is asked for (they cost nothing more: thinking is
    # billed either way), unless `reasoning.exclude` says the client does not want them.
    if effort not in (None, "none") and not reasoning.get("exclude"):
        thinking["includeThoughts"] = True
    return thinking


# --- the answer -----------------------------------------------------------------------------------


def answer_usage(metadata: Any) -> dict:
    """The contract's usage of `usageMetadata` (`StreamBroken`-free: a wrong shape reads as 0)."""
    metadata = metadata if isinstance(metadata, dict) else {}

    def count(name: str) -> int:
        value = metadata.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    thoughts = count("thoughtsTokenCount")
    return contract_usage(
        prompt=count("promptTokenCount") + count("toolUsePromptTokenCount"),
        cached=count("cachedContentTokenCount"),
        completion=count("candidatesTokenCount") + thoughts,
        reasoning=thoughts,
    )


def finish_reason(reason: Any, has_calls: bool) -> str:
    if reason in FINISH_REASONS:
        mapped = FINISH_REASONS[reason]
        return "tool_calls" if has_calls and mapped == "stop" else mapped
    # OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL, ...: the answer ended, with what it has.
    return "tool_calls" if has_calls else "stop"


def candidate_parts(candidate: dict) -> list[dict]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def iter_calls(parts: list[dict]) -> Iterator[tuple[dict, str | None]]:
    """Each `functionCall` of the parts with the part's thought signature."""
    for part in parts:
        call = part.get("functionCall")
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            signature = part.get("thoughtSignature")
            yield call, signature if isinstance(signature, str) else None


def call_base_id(call: dict, answer_id: str, index: int) -> str:
    api_id = call.get("id")
    if isinstance(api_id, str) and api_id:
        return API_ID_PREFIX + api_id
    return stable_call_id(answer_id, index)


def arguments(call: dict) -> str:
    args = call.get("args")
    return orjson.dumps(args if isinstance(args, dict) else {}).decode()


def _message(candidate: dict, answer_id: str, single_call: bool) -> tuple[dict, bool]:
    texts: list[str] = []
    thoughts: list[str] = []
    for part in candidate_parts(candidate):
        text = part.get("text")
        if isinstance(text, str):
            (thoughts if part.get("thought") else texts).append(text)
    calls = [
        {
            "id": tool_call_id(call_base_id(call, answer_id, index), signature),
            "type": "function",
            "function": {"name": call["name"], "arguments": arguments(call)},
        }
        for index, (call, signature) in enumerate(iter_calls(candidate_parts(candidate)))
    ]
    if single_call:
        calls = calls[:1]
    message: dict[str, Any] = {"content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message, bool(calls)


def chat_answer(answer: dict, payload: dict) -> dict:
    """The contract's chat completion for a `GenerateContentResponse` (one choice a candidate)."""
    answer_id = _answer_id(answer)
    single_call = payload.get("parallel_tool_calls") is False
    candidates = answer.get("candidates") or []
    if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
        raise malformed("gemini candidates")
    choices = []
    for index, candidate in enumerate(candidates):
        message, has_calls = _message(candidate, answer_id, single_call)
        reason = finish_reason(candidate.get("finishReason"), has_calls)
        choices.append((message, reason, candidate.get("index", index)))
    if not choices:
        choices = [_blocked_prompt(answer.get("promptFeedback"))]
    message, reason, _ = choices[0]
    completion = chat_completion(
        answer_id=f"chatcmpl-{answer_id}",
        model=str(answer.get("modelVersion") or payload["model"]),
        created=now(),
        message=message,
        finish_reason=reason,
        usage=answer_usage(answer.get("usageMetadata")),
    )
    if len(choices) > 1:  # candidateCount (n): one choice a candidate
        first = completion["choices"][0]
        completion["choices"] = [
            {**first, "index": i, "message": {**EMPTY_MESSAGE, **m}, "finish_reason": r}
            for i, (m, r, _) in enumerate(choices)
        ]
    return completion


def _answer_id(answer: dict) -> str:
    """Gemini's `responseId`, else one made up (it is in every answer today)."""
    value = answer.get("responseId")
    return value if isinstance(value, str) and value else secrets.token_hex(12)


def _blocked_prompt(feedback: Any) -> tuple[dict, str, int]:
    """The answer to a prompt Gemini blocked; an answer without candidates that says no block
    reason is unreadable (`malformed`)."""
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if not reason:
        raise malformed("gemini answer without candidates or a block reason")
    refusal = PROMPT_BLOCKED.format(reason=reason)
    return {"content": None, "refusal": refusal}, "content_filter", 0


# --- the stream -----------------------------------------------------------------------------------


class GeminiChatEvents:
    """One `streamGenerateContent?alt=sse` stream as the contract's chat chunks. Each event is a
    whole `GenerateContentResponse`: its text parts are deltas, its function calls come whole,
    `finishReason` and `usageMetadata` on the last ones. The stream simply ends: `end()` writes
    the finish, the usage chunk and `[DONE]`; a stream that ended without a `finishReason` is
    broken (`StreamBroken`)."""

    def __init__(self, payload: dict):
        self.payload = payload
        self.chunks: ChatChunks | None = None
        self.calls = 0
        self.finish: str | None = None
        self.usage: Any = None
        self.failed = False
        self.single_call = payload.get("parallel_tool_calls") is False

    def _open(self, frame: dict) -> ChatChunks:
        if self.chunks is None:
            self.answer_id = _answer_id(frame)
            model = str(frame.get("modelVersion") or self.payload["model"])
            self.chunks = ChatChunks(f"chatcmpl-{self.answer_id}", model)
        return self.chunks

    def event(self, name: bytes | None, data: bytes) -> list[bytes]:
        if self.failed:
            return []
        frame = loads_frame(data)
        error = frame.get("error")
        if error is not None:
            self.failed = True
            message = error.get("message") if isinstance(error, dict) else None
            return [ChatChunks.error(message if isinstance(message, str) else str(error))]
        chunks = self._open(frame)
        if frame.get("usageMetadata") is not None:
            self.usage = frame["usageMetadata"]
        candidates = frame.get("candidates")
        if not candidates:
            return self._blocked(frame.get("promptFeedback"), chunks)
        candidate = candidates[0] if isinstance(candidates, list) else None
        if not isinstance(candidate, dict):
            raise StreamBroken("a Gemini candidate is not an object")
        out = self._parts(candidate_parts(candidate), chunks)
        if candidate.get("finishReason"):
            self.finish = str(candidate["finishReason"])
        return out

    def _parts(self, parts: list[dict], chunks: ChatChunks) -> list[bytes]:
        out: list[bytes] = []
        if not chunks.role_sent:
            out.append(chunks.role())
        for part in parts:
            text = part.get("text")
            if isinstance(text, str) and text:
                out.append(chunks.reasoning(text) if part.get("thought") else chunks.text(text))
        for call, signature in iter_calls(parts):
            if self.single_call and self.calls:
                continue
            call_id = tool_call_id(call_base_id(call, self.answer_id, self.calls), signature)
            out.append(chunks.tool_call(self.calls, call_id, call["name"], arguments(call)))
            self.calls += 1
        return out

    def _blocked(self, feedback: Any, chunks: ChatChunks) -> list[bytes]:
        if not (isinstance(feedback, dict) and feedback.get("blockReason")):
            return []  # a usage-only event
        message, self.finish, _ = _blocked_prompt(feedback)
        return [chunks.refusal(message["refusal"])]

    def end(self) -> list[bytes]:
        if self.failed:
            return []
        if self.chunks is None or self.finish is None:
            raise StreamBroken("the Gemini stream ended without a finish reason")
        reason = (
            self.finish
            if self.finish == "content_filter"
            else finish_reason(self.finish, self.calls > 0)
        )
        return [
            self.chunks.finish(reason),
            self.chunks.usage(answer_usage(self.usage)),
            ChatChunks.done(),
        ]
