"""The `anthropic` adapter without a server: the contract's chat request as a Messages API body,
what it refuses before the call, the answer and the SSE stream back in the contract's shapes,
and the provider's errors through the spec's status table. End to end through the gateway:
tests/api/test_chat_anthropic.py; the fake against the vendor SDK:
tests/providers/test_vendor_sdk_anthropic.py."""

from __future__ import annotations

import httpx
import orjson
import pytest

from core.errors import PROVIDER_ERROR, BadRequest
from fake_upstreams.anthropic import anthropic_error
from inference.providers.anthropic import (
    CLAUDE_THINKING_BUDGETS,
    DEFAULT_MAX_TOKENS,
    JSON_TOOL,
    AnthropicTransport,
    MessagesEvents,
    Shape,
    chat_answer,
    check_messages,
    claude_thinking,
    messages_body,
)
from inference.providers.base import ProviderFailure
from inference.providers.events import (
    EventTooLarge,
    SSEFrames,
    StreamBroken,
    TranslatingDecoder,
    parse_event,
)
from tests.providers.test_adapters import BASE, ok, route, run, wired

MODEL = "claude-haiku-4-5-20251001"
HELLO = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def claude(options: dict | None = None):
    return route("anthropic", MODEL, options={"reasoning_efforts": [], **(options or {})})


def body(**payload) -> dict:
    return messages_body(claude(), {"model": MODEL, "messages": HELLO, **payload})


# --- the request ------------------------------------------------------------------------------


def test_a_plain_request():
    assert body() == {
        "model": MODEL,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }


@pytest.mark.parametrize(
    ("payload", "options", "expected"),
    [
        ({"max_completion_tokens": 50, "max_tokens": 70}, {}, 50),
        ({"max_tokens": 70}, {"max_output_tokens": 64000}, 70),
        ({}, {"max_output_tokens": 64000}, 64000),
        ({}, {}, DEFAULT_MAX_TOKENS),
    ],
)
def test_max_tokens_is_always_sent(payload, options, expected):
    sent = messages_body(claude(options), {"model": MODEL, "messages": HELLO, **payload})
    assert sent["max_tokens"] == expected


def test_sampling_stop_user_and_dropped_fields():
    sent = body(
        temperature=0.3,
        top_p=0.9,
        stop="END",
        user="student-7",
        seed=4,
        metadata={"tag": "x"},
        n=1,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert sent["temperature"] == 0.3 and sent["top_p"] == 0.9 and sent["stream"] is True
    assert sent["stop_sequences"] == ["END"]
    assert sent["metadata"] == {"user_id": "student-7"}  # OpenAI's metadata is dropped
    assert not {"seed", "n", "stream_options", "stop"} & set(sent)


@pytest.mark.parametrize("user", ["ada@example.org", "+41 79 123 45 67"])
def test_a_personal_user_is_not_sent(user):
    assert "metadata" not in body(user=user)
    opaque = "550e8400-e29b-41d4-a716-446655440000"
    assert body(user=opaque)["metadata"] == {"user_id": opaque}


def test_a_tool_loop_conversation():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "Rain"}]},
    ]
    sent = messages_body(claude(), {"model": MODEL, "messages": messages})
    assert sent["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "Use tools."},
    ]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {}},
    ]
    assert sent["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny"},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": [{"type": "text", "text": "Rain"}],
        },
    ]


def test_images_and_pdfs():
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.org/owl.jpg", "detail": "low"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
    ]
    sent = body(messages=[{"role": "user", "content": parts}])
    assert sent["messages"][0]["content"][1:] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.org/owl.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        },
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", False, {"type": "none"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
def test_tools_and_tool_choice(choice, parallel, expected):
    payload = {"tools": [TOOL]}
    if choice is not None:
        payload["tool_choice"] = choice
    if parallel is not None:
        payload["parallel_tool_calls"] = parallel
    sent = body(**payload)
    assert sent["tools"] == [
        {
            "name": "get_weather",
            "input_schema": TOOL["function"]["parameters"],
            "description": "Weather in a city",
        }
    ]
    assert sent.get("tool_choice") == expected


@pytest.mark.parametrize(
    ("effort", "max_tokens", "budget"),
    [
        ("low", 64000, 1024),
        ("medium", 64000, 4096),
        ("high", 64000, 16384),
        ("high", 5000, 4999),  # kept below max_tokens
        ("none", 64000, None),
        (None, 64000, None),
    ],
)
def test_reasoning_effort_is_a_thinking_budget(effort, max_tokens, budget):
    thinking = claude_thinking(effort, max_tokens)
    assert (thinking or {}).get("budget_tokens") == budget
    if budget is not None:
        assert thinking == {"type": "enabled", "budget_tokens": budget}
    assert set(CLAUDE_THINKING_BUDGETS) == {"low", "medium", "high"}


def test_a_budget_below_the_minimum_is_a_400():
    with pytest.raises(BadRequest, match="'max_tokens' must be more than 1024"):
        body(reasoning_effort="low", max_tokens=1024)


def test_effort_from_either_field():
    assert (
        body(reasoning={"effort": "medium"}, max_tokens=8000)["thinking"]["budget_tokens"] == 4096
    )
    assert body(reasoning_effort="medium")["thinking"]["budget_tokens"] == DEFAULT_MAX_TOKENS - 1
    assert body(reasoning_effort="low")["thinking"]["budget_tokens"] == 1024


def test_adaptive_models_take_the_effort_itself():
    adaptive = claude({"claude_thinking": "adaptive"})
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    payload = {
        "model": MODEL,
        "messages": HELLO,
        "reasoning_effort": "high",
        "max_tokens": 900,  # no budget to fit: the model shares it out itself
        "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}},
    }
    sent = messages_body(adaptive, payload)
    assert sent["thinking"] == {"type": "adaptive"}
    assert sent["output_config"] == {
        "effort": "high",
        "format": {"type": "json_schema", "schema": schema},
    }
    for effort in ("none", None):
        sent = messages_body(adaptive, {**payload, "reasoning_effort": effort})
        assert "thinking" not in sent and "effort" not in sent["output_config"]
    with pytest.raises(BadRequest, match="'temperature' cannot be set"):
        check_messages(adaptive, {**payload, "temperature": 0.5})


def test_thinking_stays_off_when_continuing_a_tool_call():
    messages = [
        *HELLO,
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "done"},
    ]
    assert "thinking" not in body(messages=messages, reasoning_effort="high", tools=[TOOL])
    after = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
    assert "thinking" in body(messages=after, reasoning_effort="high", tools=[TOOL])


def test_structured_output():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    sent = body(
        response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}
    )
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "tools" not in sent
    sent = body(response_format={"type": "json_object"})
    assert [t["name"] for t in sent["tools"]] == [JSON_TOOL]
    assert sent["tool_choice"] == {"type": "tool", "name": JSON_TOOL}
    assert "output_config" not in body(response_format={"type": "text"})


# --- refused before the call -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"n": 2}, "'n' is not supported by this provider"),
        ({"logprobs": True}, "'logprobs' is not supported"),
        ({"top_logprobs": 2}, "'top_logprobs' is not supported"),
        ({"logit_bias": {"50256": -100}}, "'logit_bias' is not supported"),
        ({"frequency_penalty": 0.5}, "'frequency_penalty' is not supported"),
        ({"presence_penalty": -1}, "'presence_penalty' is not supported"),
        ({"temperature": 1.5}, "'temperature' must be between 0 and 1"),
        ({"reasoning_effort": "low", "temperature": 0.2}, "'temperature' cannot be set"),
        ({"reasoning_effort": "low", "top_p": 0.5}, "'top_p' must be at least 0.95"),
        (
            {"reasoning_effort": "low", "tools": [TOOL], "tool_choice": "required"},
            "'tool_choice' cannot force a tool call",
        ),
        (
            {"response_format": {"type": "json_object"}, "tools": [TOOL]},
            "json_object cannot be combined",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}
                        ],
                    }
                ]
            },
            "'input_audio' content is not supported",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}
                ]
            },
            "Only PDF files",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "An image must be",
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
            "must be a JSON object",
        ),
    ],
)
def test_refused_before_the_call(payload, message):
    with pytest.raises(BadRequest, match=message.replace("(", r"\(")):
        check_messages(claude(), {"model": MODEL, "messages": HELLO, **payload})


def test_defaults_of_unsupported_fields_are_accepted():
    payload = {"n": 1, "logprobs": False, "frequency_penalty": 0, "logit_bias": {}}
    check_messages(claude(), {"model": MODEL, "messages": HELLO, **payload, "temperature": 1})
    check_messages(claude(), {"model": MODEL, "messages": HELLO, "reasoning_effort": "high"})


# --- the answer ------------------------------------------------------------------------------


def message(content, stop="end_turn", **fields) -> dict:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 20,
            "cache_creation_input_tokens": 30,
            "output_tokens": 7,
        },
        **fields,
    }


def test_answer_text_thinking_and_usage():
    blocks = [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
        {"type": "text", "text": "Hello"},
        {"type": "text", "text": " there"},
    ]
    answer = message(blocks)
    answer["usage"]["output_tokens_details"] = {"thinking_tokens": 3}
    completion = chat_answer(answer, Shape(), MODEL)
    assert completion["id"] == "msg_01" and completion["model"] == MODEL
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "Hello there"
    assert choice["message"]["reasoning_content"] == "Hmm."
    assert completion["usage"] == {
        "prompt_tokens": 60,
        "completion_tokens": 7,
        "total_tokens": 67,
        "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    hidden = chat_answer(message(blocks), Shape(show_reasoning=False), MODEL)
    assert "reasoning_content" not in hidden["choices"][0]["message"]


def test_answer_tool_calls():
    blocks = [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
    ]
    choice = chat_answer(message(blocks, "tool_use"), Shape(), MODEL)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        },
        {
            "id": "toolu_2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"},
        },
    ]


def test_the_json_tool_is_the_content():
    blocks = [{"type": "tool_use", "id": "t", "name": JSON_TOOL, "input": {"answer": 4}}]
    choice = chat_answer(message(blocks, "tool_use"), Shape(json_tool=True), MODEL)["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("stop", '{"answer":4}')
    assert "tool_calls" not in choice["message"]


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_stop_reasons(stop, finish):
    choice = chat_answer(message([{"type": "text", "text": "x"}], stop), Shape(), MODEL)
    assert choice["choices"][0]["finish_reason"] == finish


def test_a_refusal_says_why_without_provider_names():
    details = {"type": "refusal", "category": "cyber", "explanation": "Declined by Claude."}
    answer = message([], "refusal", stop_details=details)
    choice = chat_answer(answer, Shape(), MODEL)["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["refusal"] == "Declined by." and choice["message"]["content"] == ""
    plain = chat_answer(message([], "refusal"), Shape(), MODEL)["choices"][0]["message"]
    assert plain["refusal"] == "The model declined to answer this request."


@pytest.mark.parametrize(
    "answer",
    [[], {"content": "text"}, message([{"type": "text"}]), message([], usage={"input_tokens": -1})],
)
def test_malformed_answers_are_500(answer):
    with pytest.raises(ProviderFailure) as excinfo:
        chat_answer(answer, Shape(), MODEL)
    assert (excinfo.value.status, excinfo.value.message) == (500, PROVIDER_ERROR)


def test_the_call_and_its_headers():
    answer = message([{"type": "text", "text": "Hi"}])
    adapter, recorder = wired(AnthropicTransport, ok(answer))
    completion = run(adapter.chat(claude(), {"model": MODEL, "messages": HELLO}))
    assert completion["choices"][0]["message"]["content"] == "Hi"
    call = recorder.calls[0]
    assert (call.method, call.url) == ("POST", BASE + "/messages")
    assert call.headers["x-api-key"] == "sk-test"
    assert call.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in call.headers and "stream" not in call.body


# --- the stream ------------------------------------------------------------------------------


def sse(name: str, data) -> bytes:
    return f"event: {name}\ndata: {orjson.dumps(data).decode()}\n\n".encode()


START = sse(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_9",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 5, "cache_read_input_tokens": 4, "output_tokens": 1},
        },
    },
)


def block(index, content_block, *deltas) -> list[bytes]:
    start = {"type": "content_block_start", "index": index, "content_block": content_block}
    events = [sse("content_block_start", start)]
    for delta in deltas:
        events.append(
            sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
    return [*events, sse("content_block_stop", {"type": "content_block_stop", "index": index})]


def end(stop="end_turn", output=9, **delta) -> list[bytes]:
    body = {"type": "message_delta", "delta": {"stop_reason": stop, **delta}}
    body["usage"] = {"output_tokens": output}
    return [sse("message_delta", body), sse("message_stop", {"type": "message_stop"})]


def translate(events: list[bytes], shape: Shape = Shape(), max_event: int = 1 << 20):
    decoder = TranslatingDecoder(SSEFrames(max_event), MessagesEvents(MODEL, shape))
    raw = b"".join(events)
    out: list[bytes] = []
    for at in range(0, len(raw), 7):  # events split anywhere
        out += decoder.feed(raw[at : at + 7])
    out += decoder.flush()
    return [None if e == b"data: [DONE]\n\n" else orjson.loads(e[6:]) for e in out]


def deltas(chunks) -> list[dict]:
    return [c["choices"][0]["delta"] for c in chunks if c and c["choices"]]


def test_stream_text_thinking_and_usage():
    events = [
        START,
        sse("ping", {"type": "ping"}),
        *block(
            0,
            {"type": "thinking", "thinking": "", "signature": ""},
            {"type": "thinking_delta", "thinking": "Let me see."},
            {"type": "signature_delta", "signature": "sig"},
        ),
        *block(
            1,
            {"type": "text", "text": ""},
            {"type": "text_delta", "text": "Hello"},
            {"type": "text_delta", "text": " world"},
        ),
        sse("some_future_event", {"type": "some_future_event"}),
        *end(),
    ]
    chunks = translate(events)
    assert chunks[-1] is None  # [DONE]
    assert {c["id"] for c in chunks if c} == {"msg_9"}
    assert deltas(chunks) == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "Let me see."},
        {"content": "Hello"},
        {"content": " world"},
        {},
    ]
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["prompt_tokens"] == 9
    assert chunks[-2]["usage"]["completion_tokens"] == 9
    assert chunks[-2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 4}
    hidden = deltas(translate(events, Shape(show_reasoning=False)))
    assert {"reasoning_content": "Let me see."} not in hidden


def test_stream_parallel_tool_calls():
    events = [
        START,
        *block(
            0,
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}},
            {"type": "input_json_delta", "partial_json": ""},
            {"type": "input_json_delta", "partial_json": '{"city":'},
            {"type": "input_json_delta", "partial_json": '"Paris"}'},
        ),
        *block(1, {"type": "tool_use", "id": "toolu_b", "name": "now", "input": {}}),
        *end("tool_use"),
    ]
    chunks = translate(events)
    calls = [d["tool_calls"][0] for d in deltas(chunks) if "tool_calls" in d]
    assert calls == [
        {
            "index": 0,
            "id": "toolu_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {"index": 0, "function": {"arguments": '{"city":'}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
        {
            "index": 1,
            "id": "toolu_b",
            "type": "function",
            "function": {"name": "now", "arguments": ""},
        },
        {"index": 1, "function": {"arguments": "{}"}},  # a call without arguments
    ]
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_json_tool_and_refusal():
    json_events = [
        START,
        *block(
            0,
            {"type": "tool_use", "id": "t", "name": JSON_TOOL, "input": {}},
            {"type": "input_json_delta", "partial_json": '{"a":1}'},
        ),
        *end("tool_use"),
    ]
    chunks = translate(json_events, Shape(json_tool=True))
    assert {"content": '{"a":1}'} in deltas(chunks)
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    details = {"type": "refusal", "category": None, "explanation": None}
    chunks = translate([START, *end("refusal", stop_details=details)])
    assert {"refusal": "The model declined to answer this request."} in deltas(chunks)
    assert chunks[-3]["choices"][0]["finish_reason"] == "content_filter"


def test_stream_error_event_is_the_contract_s_error_chunk():
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks = translate([START, sse("error", error)])
    assert chunks[-1] == {"error": {"message": "Overloaded", "type": "server_error"}}


def test_a_stream_without_message_stop_has_no_done():
    chunks = translate([START, *block(0, {"type": "text", "text": "Hi"})])
    assert None not in chunks and deltas(chunks)[-1] == {"content": "Hi"}


@pytest.mark.parametrize(
    "events",
    [
        [b"event: message_start\ndata: not json\n\n"],
        [sse("message_start", ["a list"])],
        [sse("content_block_start", {"type": "content_block_start", "index": 0})],
        [
            START,
            sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 3,
                    "delta": {"type": "text_delta", "text": "x"},
                },
            ),
        ],
        [START, sse("message_delta", {"type": "message_delta", "delta": {}, "usage": [1]})],
    ],
)
def test_garbage_breaks_the_stream(events):
    with pytest.raises(StreamBroken):
        translate(events)


@pytest.mark.parametrize(
    ("block", "parsed"),
    [
        (b"event: a\ndata: x\n\n", (b"a", b"x")),
        (b"event: a\ndata: \n\n", (b"a", b"")),
        (b"event:a\ndata:x\n\n", (b"a", b"x")),
        (b"event: a\ndata: x\ndata: y\n\n", (b"a", b"x\ny")),
        (b"event: a\n: keep-alive\ndata: x\n\n", (b"a", b"x")),
        (b"event: a\ndata: x\nid: 3\n\n", (b"a", b"x")),
        (b"event: a\n\n", (b"a", None)),
        (b"event: ping\ndata: {}\n\n", (b"ping", b"{}")),
    ],
)
def test_named_events_parse_as_the_standard_reads_them(block, parsed):
    # Anthropic names every event: a name and one data line have a fast path of their own.
    assert parse_event(block) == parsed


def test_an_oversized_event_is_bounded():
    with pytest.raises(EventTooLarge):
        translate([START, b"data: " + b"x" * 5000], max_event=4096)


# --- errors (the status table, once per adapter: tests/providers/test_provider_status_mapping.py)


def test_provider_names_are_scrubbed():
    rendered = anthropic_error(400, "Claude cannot read this image (Anthropic).")
    response = httpx.Response(400, content=rendered.body)
    with pytest.raises(ProviderFailure) as excinfo:
        AnthropicTransport().raise_for_response(response)
    assert excinfo.value.message == "cannot read this image."
