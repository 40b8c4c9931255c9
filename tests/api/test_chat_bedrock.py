"""Chat on `cloud` (AWS Bedrock's Converse and ConverseStream) end to end through the live
gateway with the openai SDK: text, a tool loop with parallel calls, structured output, reasoning
effort, images, prompt caching, streamed and not; /v1/responses through the bridge; each ledger
row's credits the usage the fake reports at the catalog's prices; the provider's statuses, an
exception frame mid-stream, broken and oversized event streams, a content filter."""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal

import jsonschema
import openai
import pytest

from catalog.models import Model
from fake_upstreams import converse as fake_converse
from inference.providers.anthropic import CLAUDE_THINKING_BUDGETS
from licensing.models import Transaction
from tests.client_helpers import WEATHER_SCHEMA, ledger_rows, weather_report
from tests.fixtures_bedrock import BEDROCK_CLAUDE

pytestmark = pytest.mark.django_db(transaction=True)
LLAMA = "llama-3.3-70b-instruct"
LLAMA_UPSTREAM = "us.meta.llama3-3-70b-instruct-v1:0"
PIXTRAL = "pixtral-large-2502"
NOVA = "nova-pro"
QUESTION = "What is the weather in Paris and the time there?"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": WEATHER_SCHEMA,
        },
    }
    for name, description in (
        ("get_weather", "Current weather in a city"),
        ("get_time", "Local time in a city"),
    )
]
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
    "rkJggg=="
)
STREAM_ERROR = 'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}'


@pytest.fixture
def fake(bedrock_chat):
    return bedrock_chat["cloud"]


def converse_calls(fake) -> list[dict]:
    return [r.json for r in fake.requests if r.path.endswith(("/converse", "/converse-stream"))]


def reported(fake, index: int = -1) -> dict:
    """The usage the fake reported for a Converse call (the last by default): Bedrock's own
    `TokenUsage`."""
    return fake.usage_reported[index]


def list_price(model_id: str, usage: dict) -> int:
    """Bedrock's usage at the catalog's prices: input not cached at the prompt price, cache
    reads and writes at theirs, output (thinking included) at the completion price."""
    cost = {
        k: Decimal(str(v))
        for k, v in Model.objects.get(model_id=model_id).cost.items()
        if k != "type"
    }
    total = (
        usage["inputTokens"] * cost["prompt"]
        + usage.get("cacheReadInputTokens", 0) * cost.get("cached_prompt", cost["prompt"])
        + usage.get("cacheWriteInputTokens", 0) * cost.get("cache_write_prompt", cost["prompt"])
        + usage["outputTokens"] * cost["completion"]
    )
    return math.ceil(total)


def assert_billed(row: Transaction, model_id: str, usage: dict) -> None:
    prompt = (
        usage["inputTokens"]
        + usage.get("cacheReadInputTokens", 0)
        + usage.get("cacheWriteInputTokens", 0)
    )
    assert (row.status_code, row.billed_model, row.provider) == (200, model_id, "cloud")
    assert (row.prompt_tokens, row.completion_tokens) == (prompt, usage["outputTokens"])
    assert row.credits == list_price(model_id, usage) > 0


# --- text -------------------------------------------------------------------------------------


def test_chat_is_converse_signed_and_billed(sdk, fake):
    result = sdk.chat.completions.create(
        model=LLAMA,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello big world"},
        ],
        max_tokens=50,
        temperature=0.3,
        stop=["###"],
        user="student-7",
    )
    assert result.choices[0].message.content == "Echo: hello big world"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == LLAMA_UPSTREAM and result.id.startswith("chatcmpl-")
    request = fake.last
    assert request.raw_path == "/model/us.meta.llama3-3-70b-instruct-v1%3A0/converse"
    assert fake.last_signature_valid is True
    assert request.json == {
        "messages": [{"role": "user", "content": [{"text": "hello big world"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 50, "temperature": 0.3, "stopSequences": ["###"]},
        "requestMetadata": {"user": "student-7"},
    }
    (row,) = ledger_rows(1)
    assert_billed(row, LLAMA, reported(fake))
    assert result.usage.model_extra["credits_used"] == row.credits
    assert row.upstream_id == result.id


def test_a_stream_is_billed_like_the_same_request_unstreamed(sdk, fake):
    messages = [{"role": "user", "content": "tell me about the big blue sea"}]
    plain = sdk.chat.completions.create(model=PIXTRAL, messages=messages)
    chunks = list(sdk.chat.completions.create(model=PIXTRAL, messages=messages, stream=True))
    assert fake.last.path.endswith("/converse-stream")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    first, second = ledger_rows(2)
    assert first.credits == second.credits == list_price(PIXTRAL, reported(fake))


# --- tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_tool_loop_with_parallel_calls(sdk, fake, stream):
    fake.parallel_calls = True
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    first = complete(sdk, stream, model=BEDROCK_CLAUDE, messages=messages, tools=TOOLS)
    assert first["finish_reason"] == "tool_calls"
    calls = first["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    for call in calls:
        city = json.loads(call["function"]["arguments"])["city"]
        messages.append(
            {"role": "tool", "tool_call_id": call["id"], "content": weather_report(city)}
        )
    second = complete(sdk, stream, model=BEDROCK_CLAUDE, messages=messages, tools=TOOLS)
    assert second["finish_reason"] == "stop"
    assert second["content"] == (
        "The get_weather tool returned: Sunny and 21 degrees in Paris. "
        "The get_time tool returned: Sunny and 21 degrees in Paris."
    )
    sent = converse_calls(fake)
    assert [
        len(block["toolResult"]["content"]) for block in sent[1]["messages"][-1]["content"]
    ] == [1, 1]
    rows = ledger_rows(2)
    for index, row in enumerate(rows):
        assert_billed(row, BEDROCK_CLAUDE, reported(fake, index))


def complete(sdk, stream: bool, **request) -> dict:
    """The assistant's turn, from a plain answer or put together from a stream's chunks."""
    if not stream:
        choice = sdk.chat.completions.create(**request).choices[0]
        message = choice.message.model_dump(exclude_none=True)
        return {**message, "finish_reason": choice.finish_reason}
    content, reasoning, calls, finish = "", "", {}, None
    for chunk in sdk.chat.completions.create(stream=True, **request):
        if not chunk.choices:
            continue
        delta, finish = chunk.choices[0].delta, chunk.choices[0].finish_reason or finish
        content += delta.content or ""
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        for call in delta.tool_calls or ():
            entry = calls.setdefault(
                call.index,
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": ""},
                },
            )
            entry["function"]["arguments"] += call.function.arguments or ""
    turn: dict = {"content": content, "finish_reason": finish}
    if calls:
        turn["tool_calls"] = [calls[i] for i in sorted(calls)]
    if reasoning:
        turn["reasoning_content"] = reasoning
    return turn


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_structured_output_through_a_forced_tool(sdk, fake, stream):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "participants"],
        "additionalProperties": False,
    }
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "event", "schema": schema, "strict": True},
    }
    messages = [{"role": "user", "content": "Alice and Bob go to the science fair"}]
    turn = complete(sdk, stream, model=NOVA, messages=messages, response_format=response_format)
    jsonschema.validate(json.loads(turn["content"]), schema)
    assert turn["finish_reason"] == "stop" and "tool_calls" not in turn
    assert fake.last.json["toolConfig"]["toolChoice"] == {"tool": {"name": "json_tool_call"}}
    (row,) = ledger_rows(1)
    assert_billed(row, NOVA, reported(fake))


# --- reasoning, images, caching ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reasoning_effort_is_claudes_thinking_budget(sdk, fake, stream):
    turn = complete(
        sdk,
        stream,
        model=BEDROCK_CLAUDE,
        messages=[{"role": "user", "content": "why is the sky blue"}],
        reasoning_effort="medium",
        max_tokens=4000,
    )
    budget = min(CLAUDE_THINKING_BUDGETS["medium"], 4000 - 1)
    assert fake.last.json["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": budget}
    }
    assert turn["reasoning_content"] == "The user asks: why is the sky blue"
    assert turn["content"] == "Echo: why is the sky blue"
    usage = reported(fake)
    assert usage["outputTokens"] == 6 + 8  # the text and the thinking
    (row,) = ledger_rows(1)
    assert_billed(row, BEDROCK_CLAUDE, usage)


def test_a_model_without_efforts_refuses_one_before_the_call(client, auth, fake):
    body = {
        "model": LLAMA,
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "low",
    }
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Model does not support reasoning effort 'low'"
    assert converse_calls(fake) == []


def test_an_image_goes_as_bytes(sdk, fake, client, auth):
    content = [
        {"type": "text", "text": "what is in this picture"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    result = sdk.chat.completions.create(
        model=NOVA, messages=[{"role": "user", "content": content}]
    )
    assert result.choices[0].message.content == "Echo: what is in this picture"
    assert fake.last.json["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": PNG}}
    }
    content[1] = {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    body = {"model": NOVA, "messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400
    assert "data: URL" in response.json()["error"]["message"]
    assert len(converse_calls(fake)) == 1


@pytest.mark.parametrize("model", [BEDROCK_CLAUDE, NOVA])
def test_cache_reads_and_writes_are_billed_at_their_prices(sdk, fake, model):
    fake.cache_read_tokens, fake.cache_write_tokens = 4, 2
    messages = [{"role": "user", "content": "a long shared prompt about the history of rome"}]
    result = sdk.chat.completions.create(model=model, messages=messages)
    details = result.usage.to_dict()["prompt_tokens_details"]
    assert details == {"cached_tokens": 4, "cache_write_tokens": 2}
    assert result.usage.prompt_tokens == 9
    (row,) = ledger_rows(1)
    assert_billed(row, model, reported(fake))


def test_novas_system_prompt_is_cached_by_a_cache_point(sdk, fake):
    """The catalog's `prompt_cache` option: a cache point after the system prompt, written at the
    first call and read at the next (Nova bills no premium for the write)."""
    system = {"role": "system", "content": "You are a patient tutor of Roman history for pupils"}
    for question in ("who was Augustus", "who was Nero"):
        sdk.chat.completions.create(
            model=NOVA, messages=[system, {"role": "user", "content": question}]
        )
    assert fake.last.json["system"][-1] == {"cachePoint": {"type": "default"}}
    first, second = reported(fake, 0), reported(fake, 1)
    assert (first["cacheWriteInputTokens"], second["cacheReadInputTokens"]) == (10, 10)
    for index, row in enumerate(ledger_rows(2)):
        assert_billed(row, NOVA, reported(fake, index))


# --- refusals, errors and broken streams --------------------------------------------------------


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"n": 2}, "'n' is not supported by this provider"),
        ({"logprobs": True}, "'logprobs' is not supported by this provider"),
        ({"frequency_penalty": 0.5}, "'frequency_penalty' is not supported by this provider"),
    ],
)
def test_what_converse_cannot_take_is_refused_before_the_call(client, auth, fake, fields, message):
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], **fields}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400 and response.json()["error"]["message"] == message
    assert converse_calls(fake) == []


@pytest.mark.parametrize(
    "status,error_type,client_status,stream",
    [
        (400, "ValidationException", 400, False),
        (400, "ValidationException", 400, True),
        (403, "AccessDeniedException", 503, False),
        (404, "ResourceNotFoundException", 404, True),
        (424, "ModelErrorException", 500, False),
        (429, "ThrottlingException", 503, True),
        (500, "InternalServerException", 503, False),
        (503, "ServiceUnavailableException", 503, True),
    ],
)
def test_provider_statuses(client, auth, fake, status, error_type, client_status, stream):
    fake.fail_next(
        status,
        {"message": "Amazon Bedrock says: the input is invalid"},
        headers={"x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/coral/"},
    )
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == client_status, response.text
    if client_status in (400, 404):
        assert response.json()["error"]["message"] == "says: the input is invalid"
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits) == (client_status, 0)


def test_an_unreadable_converse_answer_is_a_500_not_charged(client, auth, fake):
    fake.fail_next(200, {"output": [], "stopReason": "end_turn"})
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "An error occurred"
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits) == (500, 0)


def test_an_exception_frame_mid_stream_is_the_in_stream_error(client, auth, fake):
    fake.stream_fail_after, fake.stream_fail_mode = 3, "error_event"
    body = {
        "model": LLAMA,
        "messages": [{"role": "user", "content": "one two three four"}],
        "stream": True,
    }
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    first = json.loads(events[1].removeprefix("data: "))
    assert first["choices"][0]["delta"]["content"].startswith("Echo: ")
    assert events[-2:] == [
        'data: {"error":{"message":"The model encountered an error processing your request.",'
        '"type":"server_error"}}',
        "data: [DONE]",
    ]
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits) == (503, 0)


def prelude(total: int, headers: int = 0) -> bytes:
    import binascii

    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", binascii.crc32(head))


@pytest.mark.parametrize(
    "body",
    [
        b"this is not an event stream at all, just text" * 4,
        prelude(16 * 1024 * 1024) + b"x" * 65536,  # a message announced past the event cap
        fake_converse.event_frame("messageStart", {"role": "assistant"})[:-1] + b"\x00",  # CRC
    ],
    ids=["garbage", "oversized", "crc"],
)
def test_broken_event_streams_end_with_the_in_stream_503(client, auth, fake, body):
    fake.fail_next(200, body, headers={"Content-Type": "application/vnd.amazon.eventstream"})
    request = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = client.post("/v1/chat/completions", json=request, headers=auth)
    assert response.status_code == 200
    assert [e for e in response.text.split("\n\n") if e][-2:] == [STREAM_ERROR, "data: [DONE]"]
    (row,) = ledger_rows(1)
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_content_filter_is_a_charged_refusal(sdk, fake, stream):
    messages = [{"role": "user", "content": "tell me the forbidden thing"}]
    turn = complete(sdk, stream, model=LLAMA, messages=messages)
    assert turn["finish_reason"] == "content_filter"
    if stream:  # the text went out before the finish reason said what it was
        assert turn["content"] == fake_converse.FILTERED_TEXT
    else:
        assert (turn.get("content"), turn["refusal"]) == (None, fake_converse.FILTERED_TEXT)
    (row,) = ledger_rows(1)
    assert_billed(row, LLAMA, reported(fake))


def test_an_unknown_model_id_is_the_providers_400(client, auth, fake):
    from catalog.models import ProviderModel

    ProviderModel.objects.filter(model__model_id=LLAMA).update(upstream_model_id="meta.llama9-v1:0")
    from core.localcache import clear_all

    clear_all()
    body = {"model": LLAMA, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "The provided model identifier is invalid."


# --- /v1/responses through the bridge ---------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_with_a_tool_loop_and_structured_output(sdk, fake, stream):
    tools = [{"type": "function", **TOOLS[0]["function"]}]
    if stream:
        with sdk.responses.stream(
            model=BEDROCK_CLAUDE, input="Weather in Paris?", tools=tools
        ) as events:
            first = events.get_final_response()
    else:
        first = sdk.responses.create(model=BEDROCK_CLAUDE, input="Weather in Paris?", tools=tools)
    (call,) = [item for item in first.output if item.type == "function_call"]
    follow_up = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"},
    ]
    second = sdk.responses.create(model=BEDROCK_CLAUDE, input=follow_up, tools=tools)
    assert second.output_text == "The get_weather tool returned: Sunny"
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    structured = sdk.responses.create(
        model=LLAMA,
        input="Paris",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(structured.output_text), schema)
    rows = ledger_rows(3)
    models = [BEDROCK_CLAUDE, BEDROCK_CLAUDE, LLAMA]
    for index, (row, model) in enumerate(zip(rows, models, strict=True)):
        assert row.service == "responses"
        assert_billed(row, model, reported(fake, index))


def test_the_openai_sdk_sees_the_in_stream_error(sdk, fake):
    fake.stream_fail_after, fake.stream_fail_mode = 2, "error_event"
    with pytest.raises(openai.APIError):
        list(
            sdk.chat.completions.create(
                model=LLAMA, messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_the_agents_sdk_runs_a_tool_loop_and_structured_output(gateway, api_key, fake, streamed):
    """The OpenAI Agents SDK on its default model (the Responses API), through the bridge and
    Converse: Claude calls the tool and answers with its output; Llama fills a Pydantic
    output type through the forced JSON tool."""
    from tests.clients.test_clients_agents import Forecast, run

    result, calls = run(
        gateway, api_key, BEDROCK_CLAUDE, QUESTION, tools=["get_weather"], streamed=streamed
    )
    assert calls == [{"city": "Paris"}]
    assert result.final_output == "The get_weather tool returned: Sunny and 21 degrees in Paris."
    forecast, _ = run(
        gateway, api_key, LLAMA, "Forecast for Oslo", output_type=Forecast, streamed=streamed
    )
    assert isinstance(forecast.final_output, Forecast)
    tool = fake.requests[-1].json["toolConfig"]
    assert tool["toolChoice"] == {"tool": {"name": "json_tool_call"}}
    models = [BEDROCK_CLAUDE, BEDROCK_CLAUDE, LLAMA]
    for index, (row, model) in enumerate(zip(ledger_rows(3), models, strict=True)):
        assert row.service == "responses"
        assert_billed(row, model, reported(fake, index))
