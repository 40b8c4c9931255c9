"""`/v1/responses` through chat completions (providers/bridge.py), without a server: the chat
request a Responses request becomes (every input item kind, what is refused), the Responses
object a chat answer becomes, and the Responses events a stream of chat chunks becomes, read
back by the openai SDK itself (its `Response` model, and its stream accumulator over an
in-memory transport) and by the relay's `ResponsesSSE` (the usage it bills)."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response

from core.errors import BadRequest
from inference.providers.base import ProviderFailure
from inference.providers.bridge import (
    ChatToResponsesEvents,
    DecodedFrames,
    chat_to_response,
    responses_to_chat,
)
from inference.providers.events import (
    ChatChunks,
    SSEDecoder,
    StreamBroken,
    TranslatingDecoder,
    chat_completion,
    contract_usage,
    parse_event,
)
from inference.schemas.chat import ChatCompletionRequest
from inference.schemas.responses import ResponseRequest
from inference.streaming import ResponsesSSE, StreamOutcome

MODEL = "served-model"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def tool_call(call_id: str, city: str) -> dict:
    """A chat tool call of the weather function."""
    arguments = orjson.dumps({"city": city}).decode()
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "weather", "arguments": arguments},
    }


def contract(body: dict) -> dict:
    """The payload the endpoint hands an adapter: the validated body, dumped as it dumps it."""
    payload = ResponseRequest.model_validate({"model": "m", **body}).model_dump(
        exclude_unset=True, by_alias=True
    )
    payload["model"] = MODEL
    return payload


def chat_of(body: dict) -> dict:
    """The chat request for `body`, checked to be a valid contract chat request."""
    chat = responses_to_chat(contract(body))
    ChatCompletionRequest.model_validate(chat)
    return chat


# --- the request ------------------------------------------------------------------------------


def test_settings_map_to_their_chat_fields_and_the_rest_is_dropped():
    chat = chat_of(
        {
            "instructions": "Be brief.",
            "input": "Hello",
            "max_output_tokens": 300,
            "temperature": 0.2,
            "top_p": 0.9,
            "parallel_tool_calls": False,
            "user": "student-7",
            "metadata": {"course": "bio"},
            "store": True,
            "truncation": "auto",
            "include": ["reasoning.encrypted_content"],
            "text": {"format": {"type": "text"}, "verbosity": "low"},
            "reasoning": {"effort": "low", "summary": "auto"},
        }
    )
    assert chat == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        "max_completion_tokens": 300,
        "temperature": 0.2,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "student-7",
        "metadata": {"course": "bio"},
        "response_format": {"type": "text"},
        "reasoning_effort": "low",
    }


def test_every_input_item_kind():
    items = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Look:"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AAAA",
                    "detail": "original",
                },
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,JVBE",
                    "filename": "a.pdf",
                },
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Let me check. ", "annotations": []},
                {"type": "refusal", "refusal": "Not that part."},
            ],
        },
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "weather",
            "arguments": '{"city":"Oslo"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "weather",
            "arguments": '{"city":"Rome"}',
            "async_": False,
        },
        {"type": "function_call_output", "call_id": "call_a", "output": "rain"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "sun"}],
        },
        {"type": "function_call", "call_id": "call_c", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_c", "output": "?"},
        {"role": "system", "content": "Answer now."},
    ]
    assert chat_of({"input": items})["messages"] == [
        {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"},
                },
                {
                    "type": "file",
                    "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
                },
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
            ],
        },
        # The reasoning item is dropped; the calls after the assistant's text join its message.
        {
            "role": "assistant",
            "content": "Let me check. Not that part.",
            "tool_calls": [
                tool_call("call_a", "Oslo"),
                tool_call("call_b", "Rome"),
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "sun"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_c",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "?"},
        {"role": "system", "content": "Answer now."},
    ]


def test_tools_tool_choice_formats_effort_and_stream():
    tools = [
        {
            "type": "function",
            "name": "weather",
            "description": "Weather",
            "parameters": WEATHER,
            "strict": True,
        }
    ]
    chat = chat_of(
        {
            "input": "Oslo?",
            "tools": tools,
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {
                "format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}
            },
            "reasoning_effort": "high",
            "stream": True,
        }
    )
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather",
                "parameters": WEATHER,
                "strict": True,
            },
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": WEATHER, "strict": True},
    }
    assert chat["reasoning_effort"] == "high"
    assert (chat["stream"], chat["stream_options"]) == (True, {"include_usage": True})
    plain = chat_of(
        {"input": "x", "tool_choice": "required", "text": {"format": {"type": "json_object"}}}
    )
    assert (plain["tool_choice"], plain["response_format"]) == ("required", {"type": "json_object"})
    assert "stream" not in plain and "reasoning_effort" not in plain


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]},
            "'input_image' with 'file_id' is not supported by this provider",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "input_file", "file_url": "https://x.test/a.pdf"}],
            },
            "'input_file' with 'file_url' is not supported by this provider",
        ),
        (
            {
                "role": "system",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}],
            },
            "'input_image' in a system message is not supported by this provider",
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}],
            },
            "'input_image' in a 'function_call_output' is not supported by this provider",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "filename": "a.pdf"}]},
            "'input_file' needs 'file_data' or 'file_id'",
        ),
        (
            {"type": "item_reference", "id": "msg_1"},
            "input item 'item_reference' is not supported by this provider",
        ),
    ],
)
def test_what_a_chat_request_cannot_carry_is_refused(item, message):
    with pytest.raises(BadRequest) as refused:
        responses_to_chat(contract({"input": [item]}))
    assert refused.value.message == message


# --- the answer -------------------------------------------------------------------------------


def answer(message: dict, finish="stop", usage=None, answer_id="chatcmpl-1") -> dict:
    return chat_completion(
        answer_id=answer_id,
        model="served-model-2025",
        created=1_700_000_000,
        message=message,
        finish_reason=finish,
        usage=usage or contract_usage(prompt=10, completion=5),
    )


def test_a_text_answer_with_its_usage_and_echoed_settings():
    request = contract(
        {
            "instructions": "Be brief.",
            "input": "Hi",
            "temperature": 0.5,
            "max_output_tokens": 64,
            "metadata": {"k": "v"},
            "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}],
            "reasoning": {"effort": "low"},
        }
    )
    usage = contract_usage(prompt=120, completion=40, cached=100, cache_write=15, reasoning=12)
    body = chat_to_response(answer({"content": "Hello!"}, usage=usage), request)
    parsed = Response.model_validate(body)
    assert parsed.output_text == "Hello!"
    assert (parsed.status, parsed.model, parsed.created_at) == (
        "completed",
        "served-model-2025",
        1_700_000_000,
    )
    assert (
        body["id"].startswith("resp_")
        and body["id"] == chat_to_response(answer({"content": "x"}), request)["id"]
    )
    assert (
        body["id"]
        != chat_to_response(answer({"content": "x"}, answer_id="chatcmpl-2"), request)["id"]
    )
    assert body["usage"] == {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 15},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 160,
    }
    assert (parsed.instructions, parsed.temperature, parsed.max_output_tokens) == (
        "Be brief.",
        0.5,
        64,
    )
    assert parsed.metadata == {"k": "v"} and parsed.reasoning.effort == "low"
    assert [tool.name for tool in parsed.tools] == ["weather"] and parsed.tool_choice == "auto"
    assert parsed.store is False and parsed.previous_response_id is None


def test_reasoning_and_parallel_tool_calls_become_items_in_order():
    calls = [
        tool_call("call_1", "Oslo"),
        tool_call("call_2", "Rome"),
    ]
    message = {"content": None, "reasoning_content": "Two cities.", "tool_calls": calls}
    parsed = Response.model_validate(
        chat_to_response(answer(message, "tool_calls"), contract({"input": "x"}))
    )
    assert [item.type for item in parsed.output] == ["reasoning", "function_call", "function_call"]
    assert parsed.output[0].content[0].text == "Two cities." and parsed.output[0].summary == []
    assert [(item.call_id, item.arguments) for item in parsed.output[1:]] == [
        ("call_1", '{"city":"Oslo"}'),
        ("call_2", '{"city":"Rome"}'),
    ]
    assert len({item.id for item in parsed.output}) == 3
    excluded = contract({"input": "x", "reasoning": {"effort": "low", "exclude": True}})
    assert [item["type"] for item in chat_to_response(answer(message), excluded)["output"]] == [
        "function_call",
        "function_call",
    ]


@pytest.mark.parametrize(
    ("message", "finish", "reason", "part"),
    [
        (
            {"content": "Cut sho"},
            "length",
            "max_output_tokens",
            {"type": "output_text", "text": "Cut sho"},
        ),
        (
            {"refusal": "I can't help with that."},
            "content_filter",
            "content_filter",
            {"type": "refusal", "refusal": "I can't help with that."},
        ),
        (
            {"content": None},
            "content_filter",
            "content_filter",
            {"type": "output_text", "text": ""},
        ),
    ],
)
def test_length_and_content_filter_are_incomplete(message, finish, reason, part):
    body = chat_to_response(answer(message, finish), contract({"input": "x"}))
    parsed = Response.model_validate(body)
    assert (parsed.status, parsed.incomplete_details.reason) == ("incomplete", reason)
    (item,) = body["output"]
    assert item["status"] == "incomplete"
    assert [
        {k: v for k, v in p.items() if k in ("type", "text", "refusal")} for p in item["content"]
    ] == [part]


def test_an_answer_without_usage_reads_as_zeros_and_a_broken_one_is_malformed():
    bare = {
        "id": "x",
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    body = chat_to_response(bare, contract({"input": "x"}))
    assert (body["usage"]["input_tokens"], body["usage"]["output_tokens"], body["model"]) == (
        0,
        0,
        MODEL,
    )
    for broken in ({"choices": []}, {"choices": [{"message": "hi"}]}, {}):
        with pytest.raises(ProviderFailure) as failure:
            chat_to_response(broken, contract({"input": "x"}))
        assert failure.value.status == 500


# --- the stream -------------------------------------------------------------------------------


def translate(chunks: list[bytes], request: dict | None = None, split: int = 7) -> list[bytes]:
    """The Responses events of chat chunks, fed in small pieces as a connection delivers them."""
    decoder = TranslatingDecoder(
        DecodedFrames(SSEDecoder(1 << 20)),
        ChatToResponsesEvents(request or contract({"input": "x"})),
    )
    raw = b"".join(chunks)
    events: list[bytes] = []
    for start in range(0, len(raw), split):
        events += decoder.feed(raw[start : start + split])
    return events + decoder.flush()


def data_of(events: list[bytes]) -> list[dict]:
    out = []
    for block in events:
        name, data = parse_event(block)
        body = orjson.loads(data)
        assert name.decode() == body["type"]
        out.append(body)
    return out


def sdk_stream(events: list[bytes]):
    """The openai SDK's own reading of the events: (events, final response) of
    `responses.stream`, over an in-memory transport."""

    def handler(request):
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"".join(events)
        )

    client = openai.OpenAI(
        api_key="k",
        base_url="http://bridge.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.responses.stream(model=MODEL, input="x") as stream:
        seen = list(stream)
        return seen, stream.get_final_response()


def billed(events: list[bytes]):
    """What the relay reads from the events (inference.streaming.ResponsesSSE)."""
    protocol, outcome = ResponsesSSE({"input": "x"}, model=MODEL), StreamOutcome()
    for block in events:
        assert protocol.inspect(block, outcome) is not None
    return outcome


def text_chunks(usage=True, finish="stop") -> list[bytes]:
    chunks = ChatChunks("chatcmpl-9", "served-model-2025", created=1_700_000_000)
    out = [
        chunks.role(),
        chunks.reasoning("Think"),
        chunks.reasoning("ing."),
        chunks.text("Hel"),
        chunks.text("lo!"),
    ]
    out.append(chunks.finish(finish))
    if usage:
        out.append(chunks.usage(contract_usage(prompt=30, completion=9, cached=20, reasoning=3)))
    return out + [chunks.done()]


def test_a_text_stream_with_reasoning_reads_as_the_sdk_and_the_relay_expect():
    events = translate(text_chunks())
    bodies = data_of(events)
    assert [b["sequence_number"] for b in bodies] == list(range(len(bodies)))
    assert [b["type"] for b in bodies] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    seen, final = sdk_stream(events)
    assert final.output_text == "Hello!" and final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Thinking."
    assert "".join(e.delta for e in seen if e.type == "response.output_text.delta") == "Hello!"
    assert (
        final.usage.input_tokens == 30 and final.usage.output_tokens_details.reasoning_tokens == 3
    )
    outcome = billed(events)
    assert outcome.completed and outcome.upstream_id == final.id
    assert (
        outcome.usage.prompt_tokens,
        outcome.usage.completion_tokens,
        outcome.usage.cached_tokens,
    ) == (30, 9, 20)
    # The same answer not streamed has the same ids.
    message = {"content": "Hello!", "reasoning_content": "Thinking."}
    whole = chat_to_response(answer(message, answer_id="chatcmpl-9"), contract({"input": "x"}))
    assert [item["id"] for item in whole["output"]] == [item.id for item in final.output]
    assert whole["id"] == final.id


def test_interleaved_parallel_tool_calls_are_separate_items_in_order():
    chunks = ChatChunks("chatcmpl-p", MODEL)
    stream = [
        chunks.text("Checking."),
        chunks.tool_call(0, "call_a", "weather"),
        chunks.tool_call(1, "call_b", "weather", '{"ci'),
        chunks.tool_arguments(0, '{"city":'),
        chunks.tool_arguments(1, 'ty":"Rome"}'),
        chunks.tool_arguments(0, '"Oslo"}'),
        chunks.finish("tool_calls"),
        chunks.usage(contract_usage(prompt=5, completion=20)),
        chunks.done(),
    ]
    events = translate(stream)
    _, final = sdk_stream(events)
    assert [item.type for item in final.output] == ["message", "function_call", "function_call"]
    assert [(item.call_id, item.name, item.arguments) for item in final.output[1:]] == [
        ("call_a", "weather", '{"city":"Oslo"}'),
        ("call_b", "weather", '{"city":"Rome"}'),
    ]
    bodies = data_of(events)
    deltas = [
        (b["output_index"], b["delta"]) for b in bodies if b["type"].endswith("arguments.delta")
    ]
    assert deltas == [(2, '{"ci'), (1, '{"city":'), (2, 'ty":"Rome"}'), (1, '"Oslo"}')]


def test_an_error_chunk_is_an_error_event_and_nothing_follows():
    chunks = ChatChunks("chatcmpl-e", MODEL)
    events = translate(
        [chunks.text("Hal"), ChatChunks.error("overloaded"), chunks.text("f"), chunks.done()]
    )
    bodies = data_of(events)
    assert bodies[-1] == {
        "type": "error",
        "sequence_number": len(bodies) - 1,
        "code": "server_error",
        "message": "overloaded",
        "param": None,
    }
    assert [b["type"] for b in bodies].count("error") == 1
    outcome = StreamOutcome()
    protocol = ResponsesSSE({}, model=MODEL)
    assert [protocol.inspect(block, outcome) is None for block in events][-1]
    assert outcome.failure == "overloaded" and not outcome.completed


def test_an_error_first_still_opens_the_response():
    error = b'data: {"error": {"message": "busy", "code": "overloaded", "param": "model"}}\n\n'
    bodies = data_of(translate([error]))
    assert [b["type"] for b in bodies] == ["response.created", "response.in_progress", "error"]
    assert (bodies[-1]["code"], bodies[-1]["param"], bodies[-1]["sequence_number"]) == (
        "overloaded",
        "model",
        2,
    )


def test_calls_of_a_server_that_numbers_none():
    """Each id is a call; a piece without id or index belongs to the call opened last (its
    name too, when it comes after the id)."""

    def chunk(call):
        return (
            b"data: "
            + orjson.dumps({"id": "c", "choices": [{"delta": {"tool_calls": [call]}}]})
            + b"\n\n"
        )

    stream = [
        chunk({"id": "call_x", "function": {"arguments": ""}}),
        chunk({"function": {"name": "weather", "arguments": '{"city":'}}),
        chunk({"function": {"arguments": '"Oslo"}'}}),
        chunk({"id": "call_y", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}}),
        ChatChunks.done(),
    ]
    _, final = sdk_stream(translate(stream))
    assert [(item.call_id, item.name, item.arguments) for item in final.output] == [
        ("call_x", "weather", '{"city":"Oslo"}'),
        ("call_y", "weather", '{"city":"Rome"}'),
    ]


def test_content_given_as_text_parts():
    message = {"content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}
    body = chat_to_response(answer(message), contract({"input": "x"}))
    assert Response.model_validate(body).output_text == "Hello"


def test_done_without_usage_still_completes_without_usage():
    """The relay then records the stream at zero cost and logs that it had no usage."""
    events = translate(text_chunks(usage=False))
    final = data_of(events)[-1]
    assert final["type"] == "response.completed" and final["response"]["usage"] is None
    _, response = sdk_stream(events)
    assert response.output_text == "Hello!" and response.usage is None
    outcome = billed(events)
    assert outcome.completed and outcome.usage is None


def test_a_stream_cut_by_length_is_incomplete():
    events = translate(text_chunks(finish="length"))
    with pytest.raises(RuntimeError, match="response.completed"):  # the SDK's own rule
        sdk_stream(events)
    last = data_of(events)[-1]
    assert last["type"] == "response.incomplete" and billed(events).completed
    final = Response.model_validate(last["response"])
    assert (final.status, final.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert final.output_text == "Hello!" and final.usage.output_tokens == 9


def test_an_empty_stream_is_one_empty_message_and_a_cut_one_has_no_end():
    _, final = sdk_stream(translate([ChatChunks.done()]))
    assert final.output_text == "" and final.status == "completed"
    cut = data_of(translate(text_chunks()[:-1]))
    assert cut[-1]["type"] == "response.output_text.delta"  # the relay's in-stream error follows


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"choices": {}}',
        b'{"choices": ["x"]}',
        b'{"choices": [{"delta": []}]}',
        b'{"choices": [{"delta": {"tool_calls": [1]}}]}',
    ],
)
def test_garbage_is_a_broken_stream(data):
    translator = ChatToResponsesEvents(contract({"input": "x"}))
    with pytest.raises(StreamBroken):
        translator.event(None, data)


# --- the fields of the full Responses reference (issue 35) ------------------------------------

CODEX_FUNCTION = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


def test_advisory_fields_are_dropped():
    """What Codex and the reference add that only advises the provider (caching, safety,
    analytics, stream padding, compaction) has no chat counterpart: dropped, the answer is the
    same one."""
    chat = chat_of(
        {
            "input": "Hello",
            "prompt_cache_key": "thread-1",
            "prompt_cache_retention": "24h",
            "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
            "safety_identifier": "user-hash",
            "client_metadata": {"thread_id": "t1"},
            "stream_options": {"include_obfuscation": False},
            "context_management": [{"type": "compaction", "compact_threshold": 1000}],
            "image": {"context_compression": "auto"},
            "access_programs": {"cyber": "standard"},
            "service_tier": "auto",
            "background": False,
            "top_logprobs": 0,
            "reasoning": {"summary": "auto", "context": "auto", "generate_summary": "auto"},
            "tools": [CODEX_FUNCTION],
        }
    )
    assert chat == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hello"}],
        "tools": [
            {
                "type": "function",
                "function": {k: v for k, v in CODEX_FUNCTION.items() if k != "type"},
            }
        ],
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"conversation": "conv_1"}, "'conversation' is not supported by this provider"),
        ({"prompt": {"id": "pmpt_1"}}, "'prompt' is not supported by this provider"),
        ({"background": True}, "'background' is not supported by this provider"),
        ({"top_logprobs": 3}, "'top_logprobs' is not supported by this provider"),
        ({"max_tool_calls": 2}, "'max_tool_calls' is not supported by this provider"),
        ({"service_tier": "priority"}, "'service_tier' is not supported by this provider"),
        ({"moderation": {"model": "omni"}}, "'moderation' is not supported by this provider"),
        ({"reasoning": {"mode": "pro"}}, "'reasoning.mode' is not supported by this provider"),
        (
            {"tools": [{"type": "web_search", "external_web_access": False}]},
            "the 'web_search' tool is not supported by this provider",
        ),
        (
            {
                "tools": [
                    {
                        "type": "namespace",
                        "name": "agents",
                        "description": "d",
                        "tools": [CODEX_FUNCTION],
                    }
                ]
            },
            "the 'namespace' tool is not supported by this provider",
        ),
        (
            {"tools": [{"type": "custom", "name": "apply_patch"}]},
            "the 'custom' tool is not supported by this provider",
        ),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}},
            "tool_choice 'allowed_tools' is not supported by this provider",
        ),
    ],
)
def test_what_only_the_responses_api_can_do_is_refused(body, message):
    with pytest.raises(BadRequest) as refused:
        responses_to_chat(contract({"input": "Hello", **body}))
    assert refused.value.message == message
