"""The Gemini fake's chat models: ``:generateContent`` and ``:streamGenerateContent?alt=sse``
on the text models, answered by ``agentic`` (a tool call, a report of tool results, a JSON
document for a response schema, ``Echo: <last user text>``) the way every fake answers.

What the real API checks and the fake checks too (a 400 INVALID_ARGUMENT each): unknown field
names (camelCase, as the REST API spells them), roles other than user/model, ``inlineData``
that is not base64, ``thinkingLevel`` on a Gemini 2.5 model and ``thinkingBudget`` out of the
model's range (Pro cannot turn thinking off), a ``thinkingLevel`` the model lacks (Gemini 3
Pro: low/high), and on Gemini 3 a function call step of the current turn without its
``thoughtSignature``.

Thinking models report ``thoughtsTokenCount`` (the fake's thought is ``Thinking about: <last
user text>``, sent as a ``thought`` part only with ``includeThoughts``); the knob
``cached_tokens`` reports that many prompt tokens as ``cachedContentTokenCount``. Images in
the input count 258 tokens each, as Gemini counts them. A prompt with the word "forbidden" is
blocked: ``chat_block_mode`` "safety" (a candidate with ``finishReason: SAFETY`` and no
content) or "prompt_blocked" (``promptFeedback.blockReason``, no candidates).
``parallel_calls`` makes a call of every tool offered in one turn (parallel function calls;
only the first part carries the thought signature, as Gemini 3 does).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from . import agentic, synth

THINKING_MODELS = {"gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-pro-preview"}
LEVELS = {"gemini-3-pro-preview": ("low", "high")}
BUDGETS = {"gemini-2.5-flash": (0, 24576), "gemini-2.5-pro": (128, 32768)}
IMAGE_TOKENS_IN = 258

REQUEST_FIELDS = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
}
CONFIG_FIELDS = {
    "temperature",
    "topP",
    "topK",
    "candidateCount",
    "maxOutputTokens",
    "stopSequences",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "thinkingConfig",
    "imageConfig",
    "responseLogprobs",
    "logprobs",
}
PART_FIELDS = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "thought",
    "thoughtSignature",
}
DECLARATION_FIELDS = {"name", "description", "parameters", "parametersJsonSchema"}


class Invalid(ValueError):
    """The real API's 400 INVALID_ARGUMENT, with its message."""


def _unknown(fields: dict, known: set[str], where: str) -> None:
    for name in fields:
        if name not in known:
            raise Invalid(
                f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': "
                "Cannot find field."
            )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _keys(value: Any) -> Any:
    return {_camel(k): v for k, v in value.items()} if isinstance(value, dict) else value


def normalize(body: dict) -> dict:
    """The request with its field names in camelCase: the API (proto3 JSON) takes either
    spelling, and the SDK sends some nested ones in snake_case. Schemas and arguments (the
    client's own data) are left as they are."""
    body = _keys(body)
    config = _keys(body.get("generationConfig") or {})
    if "thinkingConfig" in config:
        config["thinkingConfig"] = _keys(config["thinkingConfig"])
    body["generationConfig"] = config
    tool_config = _keys(body.get("toolConfig") or {})
    if "functionCallingConfig" in tool_config:
        tool_config["functionCallingConfig"] = _keys(tool_config["functionCallingConfig"])
    body["toolConfig"] = tool_config
    body["tools"] = [
        {
            **_keys(tool),
            "functionDeclarations": [
                _keys(d) for d in _keys(tool).get("functionDeclarations") or []
            ],
        }
        for tool in body.get("tools") or []
    ]
    body["contents"] = [
        {**content, "parts": [_part(p) for p in content.get("parts") or []]}
        for content in body["contents"]
    ]
    if isinstance(body.get("systemInstruction"), dict):
        system = body["systemInstruction"]
        body["systemInstruction"] = {
            **system,
            "parts": [_part(p) for p in system.get("parts") or []],
        }
    return body


def _part(part: dict) -> dict:
    part = _keys(part)
    for name in ("inlineData", "functionCall", "functionResponse"):
        if name in part:
            part[name] = _keys(part[name])
    return part


def signature(seed: str) -> str:
    """An opaque thought signature (base64, as the API sends them)."""
    return base64.b64encode(hashlib.sha256(seed.encode()).digest() * 2).decode()


# --- reading the request ----------------------------------------------------------------------


def check(model: str, body: dict) -> None:
    _unknown(body, REQUEST_FIELDS, "")
    config = body.get("generationConfig") or {}
    _unknown(config, CONFIG_FIELDS, "generation_config")
    for content in body["contents"]:
        if content.get("role", "user") not in ("user", "model"):
            raise Invalid("Please use a valid role: user, model.")
        for part in content.get("parts") or []:
            _check_part(part)
    for tool in body.get("tools") or []:
        for declaration in tool.get("functionDeclarations") or []:
            _unknown(declaration, DECLARATION_FIELDS, "tools[0].function_declarations[0]")
    _check_thinking(model, config.get("thinkingConfig"))
    if model in LEVELS:
        _check_signatures(body["contents"])


def _check_part(part: dict) -> None:
    _unknown(part, PART_FIELDS, "contents[0].parts[0]")
    inline = part.get("inlineData")
    if inline is not None:
        try:
            base64.b64decode(inline.get("data", ""), validate=True)
        except binascii.Error as exc:
            raise Invalid("Base64 decoding failed for inline_data.data") from exc
        if "/" not in str(inline.get("mimeType", "")):
            raise Invalid("Unsupported MIME type: " + str(inline.get("mimeType")))


def _check_thinking(model: str, thinking: Any) -> None:
    if not thinking:
        return
    _unknown(thinking, {"thinkingBudget", "thinkingLevel", "includeThoughts"}, "thinking_config")
    level, budget = thinking.get("thinkingLevel"), thinking.get("thinkingBudget")
    if level is not None and budget is not None:
        raise Invalid("You can only set one of thinking budget and thinking level.")
    if level is not None:
        if model not in LEVELS:
            raise Invalid("Thinking level is not supported for this model.")
        if str(level).lower() not in LEVELS[model]:
            raise Invalid(f"Thinking level {level} is not supported for this model.")
    if budget is not None and model in BUDGETS:
        low, high = BUDGETS[model]
        if budget != -1 and not low <= budget <= high:
            if budget == 0:
                raise Invalid("Budget 0 is invalid. This model only works in thinking mode.")
            raise Invalid(f"The thinking budget {budget} is invalid: use {low} to {high}.")


def _check_signatures(contents: list[dict]) -> None:
    """Gemini 3: each function call step of the current turn (since the last user text) has
    its signature on its first functionCall part."""
    start = 0
    for index, content in enumerate(contents):
        if content.get("role", "user") == "user" and any(
            "text" in p for p in content.get("parts") or []
        ):
            start = index
    for index in range(start, len(contents)):
        calls = [p for p in contents[index].get("parts") or [] if "functionCall" in p]
        if calls and not calls[0].get("thoughtSignature"):
            raise Invalid(
                f"Function call is missing a thought_signature in functionCall parts. This is "
                f"required for tools to work correctly, and missing thought_signature may lead "
                f"to degraded model performance. Additional data, function call "
                f"`default_api:{calls[0]['functionCall'].get('name')}` , position {index + 1}."
            )


def _texts(content: Any) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    return " ".join(p["text"] for p in parts or [] if isinstance(p.get("text"), str))


def dialogue(contents: list[dict]) -> agentic.Dialogue:
    called: set[str] = set()
    for content in contents:
        for part in content.get("parts") or []:
            if "functionCall" in part:
                called.add(part["functionCall"].get("name", ""))
    results = []
    last = contents[-1]
    if last.get("role", "user") == "user":
        for part in last.get("parts") or []:
            response = part.get("functionResponse")
            if isinstance(response, dict):
                output = (response.get("response") or {}).get("output", response.get("response"))
                text = output if isinstance(output, str) else json.dumps(output)
                results.append((response.get("name", ""), text))
    users = [_texts(c) for c in contents if c.get("role", "user") == "user" and _texts(c).strip()]
    return agentic.Dialogue(users[-1] if users else "", tuple(results), frozenset(called))


def tools(body: dict) -> list[agentic.Tool]:
    found = []
    for tool in body.get("tools") or []:
        for d in tool.get("functionDeclarations") or []:
            schema = d.get("parametersJsonSchema", d.get("parameters"))
            found.append(agentic.Tool(d["name"], d.get("description", ""), schema))
    return found


def tool_choice(body: dict, offered: list[agentic.Tool]) -> str:
    config = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
    mode = config.get("mode", "AUTO")
    if mode == "NONE":
        return "none"
    if mode == "ANY":
        allowed = config.get("allowedFunctionNames") or []
        return allowed[0] if len(allowed) == 1 else "required"
    return "auto"


def response_format(config: dict) -> Any:
    schema = config.get("responseJsonSchema", config.get("responseSchema"))
    if isinstance(schema, dict):
        return schema
    if config.get("responseMimeType") == "application/json":
        return "json_object"
    return None


def prompt_tokens(body: dict) -> int:
    count = synth.count_tokens(_texts(body.get("systemInstruction")))
    for content in body["contents"]:
        for part in content.get("parts") or []:
            if isinstance(part.get("text"), str):
                count += synth.count_tokens(part["text"])
            elif "inlineData" in part:
                count += IMAGE_TOKENS_IN
            elif "functionResponse" in part:
                count += synth.count_tokens(json.dumps(part["functionResponse"]))
            elif "functionCall" in part:
                count += synth.count_tokens(json.dumps(part["functionCall"]))
    return count


# --- the answer ---------------------------------------------------------------------------------


def thinking_of(model: str, config: dict) -> tuple[bool, bool]:
    """(whether the model thinks on this request, whether it shows its thoughts)."""
    thinking = config.get("thinkingConfig") or {}
    thinks = model in THINKING_MODELS and thinking.get("thinkingBudget") != 0
    return thinks, thinks and bool(thinking.get("includeThoughts"))


def answer(
    model: str, body: dict, *, reply_text: str | None, parallel: bool, cached: int, block: str
) -> dict:
    """The `GenerateContentResponse` (raises `Invalid`, `agentic.UnknownTool`)."""
    body = normalize(body)
    check(model, body)
    config = body.get("generationConfig") or {}
    said = dialogue(body["contents"])
    offered = tools(body)
    choice = tool_choice(body, offered)
    prompt = prompt_tokens(body)
    envelope = {"modelVersion": model, "responseId": synth.random_id("", 22)}
    if synth.has_word(said.last_user, "forbidden"):
        return {**_blocked(block), "usageMetadata": _usage(prompt, 0, 0, 0), **envelope}
    action = agentic.decide(offered, choice, response_format(config), said, reply_text)
    parts, finish, out_tokens = _parts(model, action, offered, said, parallel, config)
    thinks, shown = thinking_of(model, config)
    thought = f"Thinking about: {said.last_user}" if thinks else ""
    if shown:
        parts.insert(0, {"text": thought, "thought": True})
    candidate = {"content": {"parts": parts, "role": "model"}, "finishReason": finish}
    count = config.get("candidateCount", 1)
    thoughts = synth.count_tokens(thought)
    usage = _usage(prompt, min(cached, prompt), out_tokens * count, thoughts * count)
    candidates = [{**candidate, "index": i} for i in range(count)]
    return {"candidates": candidates, "usageMetadata": usage, **envelope}


def _blocked(mode: str) -> dict:
    ratings = [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
    ]
    if mode == "prompt_blocked":
        return {"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": ratings}}
    return {"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": ratings}]}


def _parts(model, action, offered, said, parallel, config) -> tuple[list[dict], str, int]:
    if action.call is not None:
        calls = [action.call]
        if parallel:
            calls = [
                agentic.ToolCall(t.name, agentic.call_arguments(t, said.last_user)) for t in offered
            ]
        parts = []
        for index, call in enumerate(calls):
            function: dict[str, Any] = {"name": call.name, "args": json.loads(call.arguments)}
            if model in LEVELS:
                function["id"] = synth.random_id("", 8).lower()
            part: dict[str, Any] = {"functionCall": function}
            if index == 0 and model in THINKING_MODELS:
                part["thoughtSignature"] = signature(f"{model}|{call.name}|{said.last_user}")
            parts.append(part)
        tokens = sum(synth.count_tokens(c.arguments) for c in calls)
        return parts, "STOP", tokens
    text, finish = action.text, "STOP"
    for stop in config.get("stopSequences") or []:
        if stop in text:
            text = text[: text.index(stop)]
    limit = config.get("maxOutputTokens")
    if limit is not None and synth.count_tokens(text) > limit:
        text, finish = synth.truncate_words(text, limit), "MAX_TOKENS"
    return [{"text": text}], finish, synth.count_tokens(text)


def _usage(prompt: int, cached: int, candidates: int, thoughts: int) -> dict:
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    if cached:
        usage["cachedContentTokenCount"] = cached
    return usage


def stream_events(whole: dict) -> list[dict]:
    """The answer as Gemini streams it: the thought, text pieces, the calls, each a whole
    `GenerateContentResponse`; the last carries `finishReason` and the full usage."""
    envelope = {"modelVersion": whole["modelVersion"], "responseId": whole["responseId"]}
    usage = whole["usageMetadata"]
    early = {k: usage[k] for k in ("promptTokenCount", "totalTokenCount")}
    candidates = whole.get("candidates")
    if not candidates or "content" not in candidates[0]:
        return [whole]
    candidate = candidates[0]
    pieces: list[list[dict]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part and not part.get("thought"):
            pieces += [[{"text": piece}] for piece in synth.split_pieces(part["text"])]
        elif "functionCall" in part and pieces and "functionCall" in pieces[-1][0]:
            pieces[-1].append(part)  # parallel calls come together
        else:
            pieces.append([part])
    events = [
        {
            "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
            "usageMetadata": early,
            **envelope,
        }
        for parts in pieces or [[{"text": ""}]]
    ]
    events[-1]["candidates"][0]["finishReason"] = candidate["finishReason"]
    events[-1]["usageMetadata"] = usage
    return events
