"""The Converse translation without a server (providers/converse.py): the contract's chat request
to a Converse body, a Converse answer to the contract's completion, ConverseStream's binary event
stream (botocore's parser under the gateway's cap) to the contract's chunks, and Bedrock's error
bodies to the spec's statuses."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest

from core import clock
from core.errors import BadRequest
from fake_upstreams.converse import event_frame, exception_frame, frame
from inference.providers.anthropic import CLAUDE_THINKING_BUDGETS
from inference.providers.base import ProviderFailure
from inference.providers.bedrock import BedrockTransport, invoke_path
from inference.providers.converse import (
    JSON_TOOL,
    EventStreamFrames,
    Plan,
    StreamTranslator,
    chat_answer,
    check_converse,
    converse_request,
    converse_usage,
    is_claude,
)
from inference.providers.events import StreamBroken, TranslatingDecoder

PNG = "iVBORw0KGgo="
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER},
    }
]
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def chat(*messages, **fields) -> dict:
    return {"model": "m", "messages": list(messages), **fields}


def user(content) -> dict:
    return {"role": "user", "content": content}


# --- the request ------------------------------------------------------------------------------


def test_messages_system_and_inference_config():
    payload = chat(
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
        user("Hello"),
        {"role": "assistant", "content": "Bonjour"},
        user([{"type": "text", "text": "And"}, {"type": "text", "text": "now?"}]),
        max_completion_tokens=100,
        max_tokens=5,
        temperature=0.5,
        top_p=0.9,
        stop="END",
        seed=7,
        metadata={"tag": "x"},
        user="student-42",
        parallel_tool_calls=False,
    )
    body = converse_request(payload, claude=False).body
    assert body == {
        "system": [{"text": "Be brief."}, {"text": "Use French."}],
        "messages": [
            {"role": "user", "content": [{"text": "Hello"}]},
            {"role": "assistant", "content": [{"text": "Bonjour"}]},
            {"role": "user", "content": [{"text": "And"}, {"text": "now?"}]},
        ],
        "inferenceConfig": {
            "maxTokens": 100,
            "temperature": 0.5,
            "topP": 0.9,
            "stopSequences": ["END"],
        },
        "requestMetadata": {"user": "student-42"},
    }


def test_user_outside_the_metadata_pattern_is_not_sent():
    body = converse_request(chat(user("hi"), user="ünïcode\u2028"), claude=False).body
    assert "requestMetadata" not in body


def test_images_and_documents_from_data_urls():
    payload = chat(
        user(
            [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpg;base64,{PNG}"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": f"data:application/pdf;base64,{PNG}",
                        "filename": "my_notes.v2.pdf",
                    },
                },
            ]
        )
    )
    content = converse_request(payload, claude=False).body["messages"][0]["content"]
    assert content[1] == {"image": {"format": "jpeg", "source": {"bytes": PNG}}}
    assert content[2] == {
        "document": {"format": "pdf", "name": "my notes v2", "source": {"bytes": PNG}}
    }


@pytest.mark.parametrize(
    "part,message",
    [
        ({"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}, "data: URL"),
        ({"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}, "image/tiff"),
        ({"type": "file", "file": {"file_id": "file-1"}}, "not file_id"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "audio"),
        ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}, "video"),
    ],
)
def test_parts_converse_cannot_take_are_refused(part, message):
    with pytest.raises(BadRequest, match=message):
        check_converse(chat(user([{"type": "text", "text": "see"}, part])), claude=False)


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"n": 2}, "'n'"),
        ({"logprobs": True}, "'logprobs'"),
        ({"top_logprobs": 3}, "'top_logprobs'"),
        ({"logit_bias": {"42": 1.0}}, "'logit_bias'"),
        ({"frequency_penalty": 0.5}, "'frequency_penalty'"),
        ({"presence_penalty": -1}, "'presence_penalty'"),
        ({"temperature": 1.5}, "'temperature' above 1"),
        ({"reasoning_effort": "low"}, "reasoning effort 'low'"),
    ],
)
def test_fields_without_a_converse_control_are_refused(fields, field):
    with pytest.raises(BadRequest, match=field):
        check_converse(chat(user("hi"), **fields), claude=False)


def test_default_values_are_accepted():
    check_converse(
        chat(
            user("hi"),
            n=1,
            logprobs=False,
            logit_bias={},
            frequency_penalty=0,
            presence_penalty=0,
            temperature=1,
            reasoning_effort="none",
        ),
        claude=False,
    )
    check_converse(chat(user("hi"), reasoning={"effort": "high"}), claude=True)


def test_a_tool_loop_with_parallel_calls():
    payload = chat(
        user("Weather in Paris and Rome?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "Rain"}]},
        tools=TOOLS,
        tool_choice="auto",
    )
    body = converse_request(payload, claude=False).body
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": "c1", "name": "get_weather", "input": {"city": "Paris"}}},
                {"toolUse": {"toolUseId": "c2", "name": "get_weather", "input": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "c1",
                        "content": [{"text": "Sunny"}],
                        "status": "success",
                    }
                },
                {
                    "toolResult": {
                        "toolUseId": "c2",
                        "content": [{"text": "Rain"}],
                        "status": "success",
                    }
                },
            ],
        },
    ]
    spec = {"name": "get_weather", "inputSchema": {"json": WEATHER}, "description": "Weather"}
    assert body["toolConfig"] == {"tools": [{"toolSpec": spec}], "toolChoice": {"auto": {}}}


@pytest.mark.parametrize(
    "choice,expected",
    [
        ("required", {"any": {}}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"tool": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice(choice, expected):
    body = converse_request(chat(user("hi"), tools=TOOLS, tool_choice=choice), claude=False).body
    assert body["toolConfig"]["toolChoice"] == expected


def after_a_tool_call(**fields) -> dict:
    """A request answering the result of one get_weather call."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    return chat(
        user("hi"),
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        tools=TOOLS,
        **fields,
    )


def test_tool_choice_none_leaves_the_tools_out_unless_the_history_needs_them():
    body = converse_request(chat(user("hi"), tools=TOOLS, tool_choice="none"), claude=False).body
    assert "toolConfig" not in body
    body = converse_request(after_a_tool_call(tool_choice="none"), claude=False).body
    assert body["toolConfig"] == {"tools": [{"toolSpec": {**spec_of(TOOLS[0])}}]}
    undeclared = after_a_tool_call()
    del undeclared["tools"]
    body = converse_request(undeclared, claude=False).body
    empty = {"json": {"type": "object", "properties": {}}}
    assert body["toolConfig"] == {
        "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": empty}}]
    }


def spec_of(tool: dict) -> dict:
    function = tool["function"]
    return {
        "name": function["name"],
        "inputSchema": {"json": function["parameters"]},
        "description": function["description"],
    }


def test_tool_call_arguments_must_be_a_json_object():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
    with pytest.raises(BadRequest, match="JSON object"):
        check_converse(chat(user("hi"), {"role": "assistant", "tool_calls": [call]}), claude=False)


def test_json_schema_is_a_forced_tool_unless_the_model_has_native_output():
    response_format = {"type": "json_schema", "json_schema": {"name": "event", "schema": WEATHER}}
    plan = converse_request(chat(user("hi"), response_format=response_format), claude=False)
    assert plan.json_tool
    assert plan.body["toolConfig"]["toolChoice"] == {"tool": {"name": JSON_TOOL}}
    assert plan.body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {"json": WEATHER}
    native = converse_request(
        chat(user("hi"), response_format=response_format), claude=False, native_json=True
    )
    assert not native.json_tool and "toolConfig" not in native.body
    structure = native.body["outputConfig"]["textFormat"]
    assert structure["type"] == "json_schema"
    assert json.loads(structure["structure"]["jsonSchema"]["schema"]) == WEATHER
    assert structure["structure"]["jsonSchema"]["name"] == "event"


def test_json_object_beside_client_tools_asks_for_any_tool():
    plan = converse_request(
        chat(user("hi"), tools=TOOLS, response_format={"type": "json_object"}), claude=False
    )
    assert [t["toolSpec"]["name"] for t in plan.body["toolConfig"]["tools"]] == [
        "get_weather",
        JSON_TOOL,
    ]
    assert plan.body["toolConfig"]["toolChoice"] == {"any": {}}


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_claude_thinks_with_the_effort_budget(effort):
    budget = CLAUDE_THINKING_BUDGETS[effort]  # the anthropic adapter's table
    body = converse_request(chat(user("hi"), reasoning_effort=effort), claude=True).body
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": budget}
    }
    # A forced JSON tool is not allowed while Claude thinks: the tool is offered, not forced.
    body = converse_request(
        chat(user("hi"), reasoning={"effort": effort}, response_format={"type": "json_object"}),
        claude=True,
    ).body
    assert body["toolConfig"]["toolChoice"] == {"auto": {}}


def test_the_thinking_budget_stays_below_max_tokens():
    payload = chat(user("hi"), reasoning_effort="high", max_tokens=1500)
    thinking = converse_request(payload, claude=True).body["additionalModelRequestFields"]
    assert thinking == {"thinking": {"type": "enabled", "budget_tokens": 1499}}
    with pytest.raises(BadRequest, match="'max_tokens' must be more than 1024"):
        check_converse(chat(user("hi"), reasoning_effort="low", max_tokens=1000), claude=True)


def test_claude_does_not_think_when_answering_tool_results():
    payload = after_a_tool_call(reasoning_effort="high")
    assert "additionalModelRequestFields" not in converse_request(payload, claude=True).body


@pytest.mark.parametrize(
    "model,options,claude",
    [
        (CLAUDE, {}, True),
        (
            "arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-haiku-4-5-20251001-v1:0",
            {},
            True,
        ),
        (
            "arn:aws:bedrock:us-east-1:1:application-inference-profile/abc123",
            {"family": "claude"},
            True,
        ),
        ("us.meta.llama3-3-70b-instruct-v1:0", {}, False),
    ],
)
def test_claude_is_known_by_its_id_or_the_catalog(model, options, claude):
    assert is_claude(model, options) is claude


def test_model_ids_and_arns_are_encoded_in_the_path():
    arn = "arn:aws:bedrock:eu-west-1:123:inference-profile/eu.anthropic.claude-sonnet-4-5-v1:0"
    assert invoke_path(arn, "converse-stream") == (
        "/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123%3Ainference-profile%2F"
        "eu.anthropic.claude-sonnet-4-5-v1%3A0/converse-stream"
    )


# --- the answer -------------------------------------------------------------------------------


def answer(content, stop="end_turn", usage=None) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": usage or {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
    }


def test_usage_counts_cache_reads_and_writes_in_the_prompt():
    usage = {
        "inputTokens": 10,
        "outputTokens": 7,
        "totalTokens": 47,
        "cacheReadInputTokens": 20,
        "cacheWriteInputTokens": 10,
    }
    assert converse_usage(usage) == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 10},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    with pytest.raises(ValueError):
        converse_usage({"inputTokens": -1})


def test_text_reasoning_and_parallel_tool_calls():
    content = [
        {"reasoningContent": {"reasoningText": {"text": "Two cities.", "signature": "s"}}},
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}},
        {"toolUse": {"toolUseId": "t2", "name": "get_weather", "input": {"city": "Rome"}}},
    ]
    result = chat_answer(answer(content, "tool_use"), Plan({}), model="m", answer_id="chatcmpl-1")
    choice = result["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Checking."
    assert choice["message"]["reasoning_content"] == "Two cities."
    assert [c["function"]["arguments"] for c in choice["message"]["tool_calls"]] == [
        '{"city":"Paris"}',
        '{"city":"Rome"}',
    ]
    assert (result["id"], result["model"], result["usage"]["prompt_tokens"]) == (
        "chatcmpl-1",
        "m",
        3,
    )
    hidden = chat_answer(
        answer(content, "tool_use"), Plan({}, show_reasoning=False), model="m", answer_id="x"
    )
    assert "reasoning_content" not in hidden["choices"][0]["message"]


@pytest.mark.parametrize(
    "stop,finish",
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("malformed_model_output", "stop"),
    ],
)
def test_stop_reasons(stop, finish):
    result = chat_answer(answer([{"text": "x"}], stop), Plan({}), model="m", answer_id="x")
    assert result["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize("stop", ["guardrail_intervened", "content_filtered"])
def test_a_filtered_answer_is_a_refusal(stop):
    result = chat_answer(answer([{"text": "Sorry."}], stop), Plan({}), model="m", answer_id="x")
    choice = result["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert (choice["message"]["content"], choice["message"]["refusal"]) == (None, "Sorry.")


def test_the_json_tool_input_is_the_content():
    content = [{"toolUse": {"toolUseId": "t", "name": JSON_TOOL, "input": {"city": "Oslo"}}}]
    result = chat_answer(
        answer(content, "tool_use"), Plan({}, json_tool=True), model="m", answer_id="x"
    )
    choice = result["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("stop", '{"city":"Oslo"}')
    assert "tool_calls" not in choice["message"]


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"output": []},
        {"output": {"message": {"content": "text"}}},
        {"output": {"message": {"content": [1]}}},
        {"output": {"message": {"content": [{"toolUse": {"name": "f"}}]}}},
    ],
)
def test_unreadable_answers(bad):
    with pytest.raises((ValueError, KeyError)):  # the adapter's 500 (malformed)
        chat_answer(bad, Plan({}), model="m", answer_id="x")


# --- the event stream -------------------------------------------------------------------------


def events(blocks: list[bytes]) -> list:
    out = []
    for block in blocks:
        data = block.removeprefix(b"data: ").strip()
        out.append(data.decode() if data == b"[DONE]" else orjson.loads(data))
    return out


def decoder(plan: Plan | None = None, max_event: int = 65536) -> TranslatingDecoder:
    translator = StreamTranslator(plan or Plan({}), model="m", answer_id="chatcmpl-1")
    return TranslatingDecoder(EventStreamFrames(max_event), translator)


def delta(index: int, value: dict) -> bytes:
    return event_frame("contentBlockDelta", {"contentBlockIndex": index, "delta": value})


USAGE = {"inputTokens": 4, "outputTokens": 6, "totalTokens": 10}
STREAM = [
    event_frame("messageStart", {"role": "assistant"}),
    delta(0, {"reasoningContent": {"text": "Hmm."}}),
    delta(0, {"reasoningContent": {"signature": "sig"}}),
    event_frame("contentBlockStop", {"contentBlockIndex": 0}),
    delta(1, {"text": "Let me check."}),
    event_frame("contentBlockStop", {"contentBlockIndex": 1}),
    event_frame(
        "contentBlockStart",
        {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "get_weather"}}},
    ),
    delta(2, {"toolUse": {"input": '{"city":'}}),
    delta(2, {"toolUse": {"input": '"Paris"}'}}),
    event_frame("contentBlockStop", {"contentBlockIndex": 2}),
    event_frame(
        "contentBlockStart",
        {"contentBlockIndex": 3, "start": {"toolUse": {"toolUseId": "t2", "name": "get_weather"}}},
    ),
    delta(3, {"toolUse": {"input": '{"city":"Rome"}'}}),
    event_frame("messageStop", {"stopReason": "tool_use"}),
    event_frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 1}}),
]


def test_a_stream_with_thinking_text_and_parallel_tool_calls():
    out = events(decoder().feed(b"".join(STREAM)))
    deltas = [e["choices"][0]["delta"] for e in out[:-2]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"reasoning_content": "Hmm."}
    assert deltas[2] == {"content": "Let me check."}
    assert deltas[3]["tool_calls"] == [
        {
            "index": 0,
            "id": "t1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
    ]
    assert [d["tool_calls"][0]["function"]["arguments"] for d in deltas[4:6]] == [
        '{"city":',
        '"Paris"}',
    ]
    assert deltas[6]["tool_calls"][0]["index"] == 1
    assert deltas[7]["tool_calls"][0] == {"index": 1, "function": {"arguments": '{"city":"Rome"}'}}
    assert out[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert out[-2]["choices"] == [] and out[-2]["usage"]["prompt_tokens"] == 4
    assert out[-1] == "[DONE]"
    assert {e["id"] for e in out[:-1]} == {"chatcmpl-1"}


def test_excluded_reasoning_is_not_streamed():
    out = events(decoder(Plan({}, show_reasoning=False)).feed(b"".join(STREAM)))
    assert not any("reasoning_content" in e["choices"][0]["delta"] for e in out[:-2])


def test_frames_split_anywhere_across_chunks_make_the_same_events():
    with clock.frozen():  # every chunk's `created`: the same second for each split
        _frames_split_anywhere()


def _frames_split_anywhere():
    whole = b"".join(STREAM)
    expected = events(decoder().feed(whole))
    for size in (1, 7, 64):
        stream = decoder()
        out: list[bytes] = []
        for start in range(0, len(whole), size):
            out += stream.feed(whole[start : start + size])
        out += stream.flush()
        assert events(out) == expected


def test_the_json_tool_streams_as_content():
    frames = [
        event_frame("messageStart", {"role": "assistant"}),
        event_frame(
            "contentBlockStart",
            {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t", "name": JSON_TOOL}}},
        ),
        delta(0, {"toolUse": {"input": '{"a":'}}),
        delta(0, {"toolUse": {"input": "1}"}}),
        event_frame("messageStop", {"stopReason": "tool_use"}),
        event_frame("metadata", {"usage": USAGE}),
    ]
    out = events(decoder(Plan({}, json_tool=True)).feed(b"".join(frames)))
    assert [e["choices"][0]["delta"].get("content") for e in out[1:3]] == ['{"a":', "1}"]
    assert out[3]["choices"][0]["finish_reason"] == "stop"


def test_an_exception_frame_is_the_contracts_error_chunk():
    stream = decoder()
    out = events(stream.feed(STREAM[0] + exception_frame("throttlingException", "Too many tokens")))
    assert out[-1] == {"error": {"message": "Too many tokens", "type": "server_error"}}
    assert stream.feed(STREAM[1]) == []  # nothing after the error
    assert stream.flush() == []


def test_an_error_message_is_an_error_chunk_too():
    headers = {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"}
    out = events(decoder().feed(frame(headers, b"")))
    assert out == [{"error": {"message": "boom", "type": "server_error"}}]


def test_a_crc_mismatch_breaks_the_stream():
    broken = bytearray(STREAM[0])
    broken[-6] ^= 0xFF  # a payload byte: the message CRC no longer matches
    with pytest.raises(StreamBroken):
        decoder().feed(bytes(broken))
    prelude = bytearray(STREAM[0])
    prelude[9] ^= 0xFF  # the prelude CRC
    with pytest.raises(StreamBroken):
        decoder().feed(bytes(prelude))


def test_a_prelude_over_the_cap_is_refused_before_its_body_is_held():
    big = event_frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x" * 5000}})
    stream = decoder(max_event=4096)
    with pytest.raises(StreamBroken, match="bytes"):
        stream.feed(big[:12])  # the prelude alone announces it


def test_garbage_and_a_stream_cut_inside_a_message_break_it():
    with pytest.raises(StreamBroken):
        decoder().feed(b"data: {}\n\n" + b"\x00" * 20)
    stream = decoder()
    assert stream.feed(STREAM[0][:20]) == []
    with pytest.raises(StreamBroken):
        stream.flush()


@pytest.mark.parametrize(
    "bad",
    [
        event_frame("contentBlockDelta", {"delta": {"text": "no index"}}),
        delta(5, {"toolUse": {"input": "{}"}}),  # arguments of a tool call never started
        frame({":message-type": "event", ":event-type": "messageStart"}, b"not json"),
        event_frame("metadata", {"usage": {"inputTokens": "many"}}),
    ],
)
def test_events_of_the_wrong_shape_break_the_stream(bad):
    with pytest.raises(StreamBroken):
        decoder().feed(bad)


def test_unknown_events_are_skipped():
    assert decoder().feed(event_frame("someFutureEvent", {"x": 1})) == []


def test_a_stream_without_metadata_ends_without_done():
    stream = decoder()
    out = events(stream.feed(b"".join(STREAM[:-1])) + stream.flush())
    assert "[DONE]" not in out


# --- errors -----------------------------------------------------------------------------------


def error(status: int, error_type: str, message: str) -> httpx.Response:
    return httpx.Response(
        status, json={"message": message}, headers={"x-amzn-ErrorType": error_type}
    )


@pytest.mark.parametrize(
    "status,error_type,client",
    [
        (400, "ValidationException", 400),
        (403, "AccessDeniedException", 503),
        (404, "ResourceNotFoundException", 404),
        (424, "ModelErrorException", 500),
        (429, "ThrottlingException", 503),
        (429, "ModelNotReadyException", 503),
        (500, "InternalServerException", 503),
        (503, "ServiceUnavailableException", 503),
    ],
)
def test_bedrock_statuses_map_as_the_spec_says(status, error_type, client):
    with pytest.raises(ProviderFailure) as caught:
        BedrockTransport().raise_for_response(
            error(status, error_type, "The Bedrock model said no")
        )
    assert caught.value.status == client
    if client == 400:
        assert caught.value.message == "The model said no"  # provider names scrubbed
