"""Gemini chat's translation, without a server: the contract's chat request as a
GenerateContentRequest, Gemini's answers and SSE events as the contract's answer and chunks."""

from __future__ import annotations

import json

import orjson
import pytest

from core.errors import BadRequest
from inference.providers import gemini_chat as gc
from inference.providers.base import ProviderFailure
from inference.providers.events import EventTooLarge, SSEFrames, StreamBroken, TranslatingDecoder
from tests.fixtures_gemini import WEATHER

FLASH, PRO3 = "gemini-2.5-flash", "gemini-3-pro-preview"
PNG = "data:image/png;base64,iVBORw0KGgo="


def request(**fields) -> dict:
    return {"model": FLASH, "messages": [{"role": "user", "content": "hi"}], **fields}


# --- the request ----------------------------------------------------------------------------------


def test_conversation_maps_to_contents_and_system_instruction():
    signed = gc.tool_call_id("fc_abc", "c2ln+/=")
    payload = request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": ""},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": signed,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": ""},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": signed, "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "9"}]},
            {"role": "user", "content": "Thanks"},
        ]
    )
    body = gc.gemini_request(payload)
    assert body["systemInstruction"] == {
        "parts": [{"text": "Be brief."}, {"text": "Use metric units."}]
    }
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Weather here?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Oslo"}, "id": "abc"},
                    "thoughtSignature": "c2ln+/=",
                },
                {"functionCall": {"name": "get_time", "args": {}}},
            ],
        },
        {
            "role": "user",  # the tool results and the next user text: one turn
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"output": "sunny"},
                        "id": "abc",
                    }
                },
                {"functionResponse": {"name": "get_time", "response": {"output": "9"}}},
                {"text": "Thanks"},
            ],
        },
    ]
    assert "generationConfig" not in body and "tools" not in body


def test_gemini_3_call_from_another_model_gets_the_documented_stand_in_signature():
    call = {"id": "call_x", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [call, {**call, "id": "call_y"}]},
    ]
    parts = gc.gemini_request(request(model=PRO3, messages=messages))["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == [gc.SKIP_SIGNATURE, None]
    parts = gc.gemini_request(request(messages=messages))["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts] == [None, None]  # 2.5: not required


def test_generation_config_and_tools():
    payload = request(
        max_tokens=50,
        max_completion_tokens=40,
        temperature=0.2,
        top_p=0.9,
        n=2,
        stop="END",
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        tools=[WEATHER],
        tool_choice="required",
        user="student-1",
        metadata={"k": "v"},
        parallel_tool_calls=True,
        logprobs=False,
        logit_bias={},
    )
    body = gc.gemini_request(payload)
    assert body["generationConfig"] == {
        "maxOutputTokens": 40,
        "temperature": 0.2,
        "topP": 0.9,
        "candidateCount": 2,
        "stopSequences": ["END"],
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
    }
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "parametersJsonSchema": WEATHER["function"]["parameters"],
                }
            ]
        }
    ]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert set(body) == {"contents", "generationConfig", "tools", "toolConfig"}
    gc.check_request(payload)  # the defaults asked for are accepted


@pytest.mark.parametrize(
    "choice,config",
    [
        (None, {"mode": "AUTO"}),
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_tool_choice(choice, config):
    fields = {"tools": [WEATHER]} | ({"tool_choice": choice} if choice else {})
    assert gc.gemini_request(request(**fields))["toolConfig"]["functionCallingConfig"] == config


@pytest.mark.parametrize(
    "response_format,config",
    [
        ({"type": "text"}, {}),
        ({"type": "json_object"}, {"responseMimeType": "application/json"}),
        (
            {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}},
            {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}},
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "o"}},
            {"responseMimeType": "application/json"},
        ),
    ],
)
def test_response_format(response_format, config):
    body = gc.gemini_request(request(response_format=response_format))
    assert body.get("generationConfig", {}) == config


@pytest.mark.parametrize(
    "model,fields,thinking",
    [
        (FLASH, {"reasoning_effort": "none"}, {"thinkingBudget": 0}),
        (FLASH, {"reasoning_effort": "low"}, {"thinkingBudget": 1024, "includeThoughts": True}),
        (FLASH, {"reasoning_effort": "high"}, {"thinkingBudget": 24576, "includeThoughts": True}),
        (
            FLASH,
            {"reasoning": {"effort": "medium"}},
            {"thinkingBudget": 8192, "includeThoughts": True},
        ),
        (FLASH, {"reasoning": {"effort": "medium", "exclude": True}}, {"thinkingBudget": 8192}),
        (PRO3, {"reasoning_effort": "low"}, {"thinkingLevel": "low", "includeThoughts": True}),
        (
            PRO3,
            {"reasoning": {"effort": "high"}},
            {"thinkingLevel": "high", "includeThoughts": True},
        ),
        (FLASH, {}, None),
    ],
)
def test_reasoning_effort(model, fields, thinking):
    config = gc.gemini_request(request(model=model, **fields)).get("generationConfig", {})
    assert config.get("thinkingConfig") == thinking


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"logprobs": True}, "'logprobs' is not supported"),
        ({"top_logprobs": 2}, "'top_logprobs' is not supported"),
        ({"logit_bias": {"42": 1.0}}, "'logit_bias' is not supported"),
        ({"n": 2, "stream": True}, "'n' greater than 1 is not supported with 'stream'"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
                        ],
                    }
                ]
            },
            "'image_url' must be a data: URL",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}
                ]
            },
            "file parts need 'file_data'",
        ),
        (
            {"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
            "tool message 'call_9' answers no earlier tool call",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    }
                ]
            },
            "tool call arguments must be a JSON object",
        ),
    ],
)
def test_refused_before_the_call(fields, message):
    with pytest.raises(BadRequest) as refused:
        gc.check_request(request(**fields))
    assert message in refused.value.message


def test_audio_and_file_data_are_inline():
    parts = gc.gemini_request(
        request(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE"}},
                    ],
                }
            ]
        )
    )["contents"][0]["parts"]
    assert parts == [
        {"inlineData": {"mimeType": "audio/wav", "data": "UklG"}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
    ]


# --- the answer -----------------------------------------------------------------------------------

USAGE = {
    "promptTokenCount": 100,
    "toolUsePromptTokenCount": 5,
    "cachedContentTokenCount": 40,
    "candidatesTokenCount": 20,
    "thoughtsTokenCount": 30,
    "totalTokenCount": 155,
}
CONTRACT_USAGE = {
    "prompt_tokens": 105,
    "completion_tokens": 50,
    "total_tokens": 155,
    "prompt_tokens_details": {"cached_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 30},
}


def answer(parts, finish="STOP", **extra) -> dict:
    candidate = {"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}
    return {
        "candidates": [candidate],
        "usageMetadata": USAGE,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp1",
        **extra,
    }


def test_answer_text_thoughts_and_usage():
    parts = [{"text": "Let me think.", "thought": True}, {"text": "Hello "}, {"text": "there"}]
    result = gc.chat_answer(answer(parts), request())
    assert result["id"] == "chatcmpl-resp1" and result["model"] == FLASH
    assert result["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there",
                "refusal": None,
                "reasoning_content": "Let me think.",
            },
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert result["usage"] == CONTRACT_USAGE


def test_answer_tool_calls_carry_id_and_signature():
    parts = [
        {"functionCall": {"name": "a", "args": {"x": 1}, "id": "g1"}, "thoughtSignature": "U0lH"},
        {"functionCall": {"name": "b", "args": {}}},
    ]
    message = gc.chat_answer(answer(parts), request())["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    calls = message["message"]["tool_calls"]
    assert calls[0] == {
        "id": "fc_g1~U0lH",
        "type": "function",
        "function": {"name": "a", "arguments": '{"x":1}'},
    }
    assert calls[1]["id"] == gc.stable_call_id("resp1", 1)  # stable: the same for the same answer
    assert message["message"]["content"] is None
    assert gc.split_call_id(calls[0]["id"]) == ("g1", "U0lH")
    assert gc.split_call_id(calls[1]["id"]) == (None, None)
    single = gc.chat_answer(answer(parts), request(parallel_tool_calls=False))
    assert len(single["choices"][0]["message"]["tool_calls"]) == 1


@pytest.mark.parametrize(
    "finish,reason",
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("OTHER", "stop"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
    ],
)
def test_finish_reasons(finish, reason):
    result = gc.chat_answer(answer([{"text": "x"}], finish), request())
    assert result["choices"][0]["finish_reason"] == reason


def test_safety_candidate_without_content():
    blocked = {"candidates": [{"finishReason": "SAFETY", "index": 0}], "usageMetadata": USAGE}
    choice = gc.chat_answer(blocked, request())["choices"][0]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] is None


def test_blocked_prompt_is_a_content_filter_answer():
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": USAGE}
    result = gc.chat_answer(blocked, request())
    choice = result["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"] is None
    assert choice["message"]["refusal"] == (
        "The prompt was blocked by the provider's safety filter (PROHIBITED_CONTENT)."
    )
    assert result["usage"]["prompt_tokens"] == 105


@pytest.mark.parametrize(
    "answer_body",
    [
        {"candidates": {"0": {}}},
        {"candidates": ["x"]},
        {"usageMetadata": USAGE},  # no candidates, no block reason
    ],
)
def test_unreadable_answers_are_malformed(answer_body):
    with pytest.raises(ProviderFailure) as failed:
        gc.chat_answer(answer_body, request())
    assert (failed.value.status, failed.value.upstream_kind) == (500, "malformed")


def test_candidates_are_choices():
    two = answer([{"text": "one"}])
    two["candidates"].append({**two["candidates"][0], "index": 1, "finishReason": "MAX_TOKENS"})
    two["candidates"][1]["content"] = {"parts": [{"text": "two"}], "role": "model"}
    choices = gc.chat_answer(two, request(n=2))["choices"]
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in choices] == [
        (0, "one", "stop"),
        (1, "two", "length"),
    ]


# --- the stream -----------------------------------------------------------------------------------


def sse(*frames) -> bytes:
    return b"".join(b"data: " + orjson.dumps(f) + b"\r\n\r\n" for f in frames)


def decode(raw: bytes, payload=None, max_event=10_000) -> list:
    decoder = TranslatingDecoder(SSEFrames(max_event), gc.GeminiChatEvents(payload or request()))
    events = []
    for i in range(0, len(raw), 7):  # split anywhere, as the network does
        events += decoder.feed(raw[i : i + 7])
    events += decoder.flush()
    return [e[6:-2] if e == b"data: [DONE]\n\n" else json.loads(e[6:]) for e in events]


def event(parts, finish=None, usage=None) -> dict:
    candidate: dict = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": usage or {"promptTokenCount": 100},
        "responseId": "r9",
        "modelVersion": FLASH,
    }


def deltas(events) -> list:
    return [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]


def test_stream_text_thoughts_finish_usage_done():
    raw = sse(
        event([{"text": "hmm", "thought": True}]),
        event([{"text": "Hel"}]),
        event([{"text": "lo"}], "STOP", USAGE),
    )
    events = decode(raw)
    assert deltas(events) == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "hmm"},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert events[-3]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["choices"] == [] and events[-2]["usage"] == CONTRACT_USAGE
    assert events[-1] == b"[DONE]"
    assert {e["id"] for e in events[:-1]} == {"chatcmpl-r9"}


def test_stream_parallel_calls():
    calls = [
        {"functionCall": {"name": "a", "args": {"q": "x"}}, "thoughtSignature": "U0k="},
        {"functionCall": {"name": "b", "args": {}}},
    ]
    events = decode(sse(event(calls, "STOP", USAGE)))
    tool_deltas = [d["tool_calls"][0] for d in deltas(events) if "tool_calls" in d]
    assert tool_deltas == [
        {
            "index": 0,
            "id": gc.stable_call_id("r9", 0) + "~U0k=",
            "type": "function",
            "function": {"name": "a", "arguments": '{"q":"x"}'},
        },
        {
            "index": 1,
            "id": gc.stable_call_id("r9", 1),
            "type": "function",
            "function": {"name": "b", "arguments": "{}"},
        },
    ]
    assert events[-3]["choices"][0]["finish_reason"] == "tool_calls"
    single = decode(sse(event(calls, "STOP", USAGE)), request(parallel_tool_calls=False))
    assert len([d for d in deltas(single) if "tool_calls" in d]) == 1


def test_stream_error_event_becomes_the_contract_error():
    error = {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}
    events = decode(sse(event([{"text": "Hi"}]), error, event([{"text": "late"}], "STOP")))
    assert events[-1] == {"error": {"message": "Internal error", "type": "server_error"}}
    assert not any(e == b"[DONE]" for e in events)


def test_stream_blocked_prompt():
    frame = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}
    events = decode(sse(frame))
    assert deltas(events)[0]["refusal"].startswith("The prompt was blocked")
    assert events[-3]["choices"][0]["finish_reason"] == "content_filter"
    assert events[-2]["usage"]["prompt_tokens"] == 4 and events[-1] == b"[DONE]"


@pytest.mark.parametrize(
    "raw",
    [
        b"data: not json\n\n",
        b"data: [1, 2]\n\n",
        sse({"candidates": ["x"]}),
        sse(event([{"text": "cut short"}])),  # ended without a finish reason
        b"",
    ],
)
def test_broken_streams(raw):
    with pytest.raises(StreamBroken):
        decode(raw)


def test_oversized_event_is_bounded():
    with pytest.raises(EventTooLarge):
        decode(sse(event([{"text": "x" * 5000}])), max_event=1000)
