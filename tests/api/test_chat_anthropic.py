"""Claude through the gateway: POST /v1/chat/completions (and /v1/responses, through the bridge)
on the `anthropic` provider, against the Anthropic fake, with the openai SDK and the OpenAI
Agents SDK: text, streams, a tool loop with parallel calls, structured output, reasoning
effort, images, a refusal, the provider's errors and in-stream failures. Every ledger row's
credits are the provider's reported usage at the catalog's prices (cache reads and writes at
their own prices)."""

from __future__ import annotations

import asyncio
import json
import math
from fractions import Fraction

import jsonschema
import openai
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel

from core.errors import PROVIDER_ERROR, SERVICE_UNAVAILABLE
from licensing.models import Transaction
from tests.client_helpers import weather_tool
from tests.fixtures_anthropic import ANTHROPIC_KEY
from tests.kit import wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)

HAIKU = "claude-haiku-4-5"
HAIKU_ID = "claude-haiku-4-5-20251001"
# USD per 1M tokens == micro-credits per token: input, cache read, cache write, output.
PRICES = {"prompt": 1, "cached": Fraction(1, 10), "written": Fraction(5, 4), "completion": 5}
QUESTION = "What is the weather in Paris today?"
ASK = [{"role": "user", "content": QUESTION}]
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def tool(name: str, description: str) -> dict:
    function = {"name": name, "description": description, "parameters": WEATHER}
    return {"type": "function", "function": function}


WEATHER_TOOL = tool("get_weather", "Current weather in a city")
TIME_TOOL = tool("get_time", "Local time in a city")


def expected_credits(usage) -> int:
    """The usage the gateway relayed (the provider's, in the contract's shape) at list prices."""
    details = usage.prompt_tokens_details
    cached = details.cached_tokens or 0
    written = details.cache_write_tokens or 0
    fresh = usage.prompt_tokens - cached - written
    total = (
        fresh * PRICES["prompt"]
        + cached * PRICES["cached"]
        + written * PRICES["written"]
        + usage.completion_tokens * PRICES["completion"]
    )
    return math.ceil(total)


def rows(count: int) -> list[Transaction]:
    wait_for_ledger(count)
    return list(Transaction.objects.order_by("created_at", "id"))


def collect(stream) -> tuple[str, list, dict, object]:
    """(text, tool calls by index, the last finish reason, the usage) of a chat stream."""
    text, calls, finish, usage = "", {}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or ():
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    return text, [calls[i] for i in sorted(calls)], finish, usage


# --- text, billing --------------------------------------------------------------------------------


def test_chat_is_billed_at_cache_aware_prices(sdk, claude_catalog):
    fake = claude_catalog["anthropic"]
    fake.cache_read_tokens, fake.cache_write_tokens = 3, 2
    result = sdk.chat.completions.create(model=HAIKU, messages=ASK)
    assert result.choices[0].message.content == f"Echo: {QUESTION}"
    assert result.choices[0].finish_reason == "stop" and result.model == HAIKU_ID
    usage = result.usage
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (7, 3)
    assert usage.prompt_tokens_details.cache_write_tokens == 2
    assert usage.completion_tokens == 8
    row = rows(1)[0]
    assert row.credits == expected_credits(usage) == usage.model_extra["credits_used"]
    assert (row.provider, row.billed_model, row.status_code) == ("anthropic", HAIKU, 200)
    sent = fake.last
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json == {
        "model": HAIKU_ID,
        "max_tokens": 64000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    }


def test_stream_is_billed_like_the_answer(sdk, claude_catalog):
    claude_catalog["anthropic"].cache_read_tokens = 4
    plain = sdk.chat.completions.create(model=HAIKU, messages=ASK)
    text, _, finish, usage = collect(
        sdk.chat.completions.create(model=HAIKU, messages=ASK, stream=True)
    )
    assert (text, finish) == (plain.choices[0].message.content, "stop")
    assert usage.prompt_tokens == plain.usage.prompt_tokens
    assert usage.completion_tokens == plain.usage.completion_tokens
    first, second = rows(2)
    assert first.credits == second.credits == expected_credits(plain.usage) > 0
    assert claude_catalog["anthropic"].last.json["stream"] is True


# --- tools --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_tool_loop_with_parallel_calls(sdk, claude_catalog, stream):
    fake = claude_catalog["anthropic"]
    fake.parallel_tools = True
    tools = [WEATHER_TOOL, TIME_TOOL]
    first = sdk.chat.completions.create(model=HAIKU, messages=ASK, tools=tools, stream=stream)
    if stream:
        _, calls, finish, _ = collect(first)
    else:
        finish = first.choices[0].finish_reason
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in first.choices[0].message.tool_calls
        ]
    assert finish == "tool_calls"
    assert [c["name"] for c in calls] == ["get_weather", "get_time"]
    assert all(json.loads(c["arguments"]) == {"city": "Paris"} for c in calls)
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "Sunny"},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "Noon"},
    ]
    answer = sdk.chat.completions.create(
        model=HAIKU, messages=[*ASK, assistant, *results], tools=tools
    )
    assert answer.choices[0].message.content == (
        "The get_weather tool returned: Sunny The get_time tool returned: Noon"
    )
    sent = fake.last.json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "tool_result"]
    assert all(row.credits > 0 for row in rows(2))


def test_parallel_calls_can_be_turned_off(sdk, claude_catalog):
    fake = claude_catalog["anthropic"]
    fake.parallel_tools = True
    result = sdk.chat.completions.create(
        model=HAIKU,
        messages=ASK,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    assert [c.function.name for c in result.choices[0].message.tool_calls] == ["get_time"]
    assert fake.last.json["tool_choice"] == {
        "type": "tool",
        "name": "get_time",
        "disable_parallel_tool_use": True,
    }


# --- structured output, reasoning, images -------------------------------------------------------


class Forecast(BaseModel):
    city: str
    temperature_c: int
    sunny: bool


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_structured_output(sdk, claude_catalog, stream):
    schema = Forecast.model_json_schema() | {"additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": schema}}
    result = sdk.chat.completions.create(
        model=HAIKU, messages=ASK, response_format=response_format, stream=stream
    )
    text = collect(result)[0] if stream else result.choices[0].message.content
    jsonschema.validate(json.loads(text), schema)
    assert claude_catalog["anthropic"].last.json["output_config"] == {
        "format": {"type": "json_schema", "schema": schema}
    }


def test_json_object(sdk, claude_catalog):
    result = sdk.chat.completions.create(
        model=HAIKU, messages=ASK, response_format={"type": "json_object"}
    )
    assert json.loads(result.choices[0].message.content) == {"answer": f"Echo: {QUESTION}"}
    assert result.choices[0].finish_reason == "stop"


def test_reasoning_effort_is_claude_s_thinking(sdk, claude_catalog):
    fake = claude_catalog["anthropic"]
    result = sdk.chat.completions.create(model=HAIKU, messages=ASK, reasoning_effort="medium")
    message = result.choices[0].message
    assert message.content == f"Echo: {QUESTION}"
    assert message.model_extra["reasoning_content"].startswith("The user asks:")
    thinking = fake.last.json["thinking"]
    assert thinking == {"type": "enabled", "budget_tokens": 4096}
    assert result.usage.completion_tokens_details.reasoning_tokens > 0
    assert result.usage.completion_tokens > result.usage.completion_tokens_details.reasoning_tokens
    assert rows(1)[0].credits == expected_credits(result.usage)
    # The tool loop's next turn: the call's thinking block cannot go back, so thinking is off.
    first = sdk.chat.completions.create(
        model=HAIKU, messages=ASK, tools=[WEATHER_TOOL], reasoning_effort="low"
    )
    call = first.choices[0].message.tool_calls[0]
    result = {"role": "tool", "tool_call_id": call.id, "content": "Sunny"}
    assistant = first.choices[0].message.model_dump(
        exclude_none=True, include={"role", "content", "tool_calls"}
    )
    answer = sdk.chat.completions.create(
        model=HAIKU,
        messages=[*ASK, assistant, result],
        tools=[WEATHER_TOOL],
        reasoning_effort="low",
    )
    assert answer.choices[0].message.content == "The get_weather tool returned: Sunny"
    assert "thinking" not in fake.last.json


def test_an_adaptive_model_thinks_at_the_effort(sdk, claude_catalog):
    from catalog.models import Model
    from core.localcache import clear_all

    model = Model.objects.get(model_id=HAIKU)
    model.options = {**model.options, "claude_thinking": "adaptive"}
    model.save()
    clear_all()
    result = sdk.chat.completions.create(model=HAIKU, messages=ASK, reasoning_effort="high")
    assert result.choices[0].message.model_extra["reasoning_content"].startswith("The user asks")
    sent = claude_catalog["anthropic"].last.json
    assert (sent["thinking"], sent["output_config"]) == ({"type": "adaptive"}, {"effort": "high"})


def test_unknown_effort_is_the_spec_s_400(client, auth, claude_catalog):
    body = {"model": HAIKU, "messages": ASK, "reasoning_effort": "none"}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Model does not support reasoning effort 'none'"


def test_images(sdk, claude_catalog):
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    result = sdk.chat.completions.create(model=HAIKU, messages=[{"role": "user", "content": parts}])
    assert result.choices[0].message.content == "Echo: What is in this picture?"
    image = claude_catalog["anthropic"].last.json["messages"][0]["content"][1]
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


# --- refusals and errors ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_a_refusal_is_a_content_filter_answer_and_charged(sdk, claude_catalog, stream):
    messages = [{"role": "user", "content": "Tell me about forbidden-topic"}]
    result = sdk.chat.completions.create(model=HAIKU, messages=messages, stream=stream)
    if stream:
        chunks = list(result)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        refusal = "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices)
    else:
        finish, refusal = result.choices[0].finish_reason, result.choices[0].message.refusal
    assert finish == "content_filter"
    assert refusal == "This request was declined by the usage policy's classifiers."
    row = rows(1)[0]
    assert (row.status_code, row.completion_tokens) == (200, 1) and row.credits > 0


def test_refused_before_the_call(client, auth, claude_catalog):
    body = {"model": HAIKU, "messages": ASK, "n": 2}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "'n' is not supported by this provider"
    assert claude_catalog["anthropic"].requests == []


STATUSES = [
    (400, 400, "messages: text content blocks must be non-empty"),
    (404, 404, "model: x"),
    (401, 503, SERVICE_UNAVAILABLE),
    (429, 503, SERVICE_UNAVAILABLE),
    (500, 503, SERVICE_UNAVAILABLE),
    (529, 503, SERVICE_UNAVAILABLE),
    (413, 500, PROVIDER_ERROR),
]


def test_provider_statuses(client, auth, claude_catalog):
    """Each status Anthropic answers, in its own error body, as the spec's table maps it (one
    test for all: the catalog's set-up is most of a case's time)."""
    fake = claude_catalog["anthropic"]
    body = {"model": HAIKU, "messages": ASK}
    for status, client_status, message in STATUSES:
        said = message if client_status < 500 else None
        fake.fail_next(status, body=json.loads(fake.error(status, said).body))
        response = client.post("/v1/chat/completions", json=body, headers=auth)
        assert response.status_code == client_status, status
        assert response.json()["error"]["message"] == message
    recorded = [(row.status_code, row.credits) for row in rows(len(STATUSES))]
    assert recorded == [(client_status, 0) for _, client_status, _ in STATUSES]


IN_STREAM_ERROR = 'data: {"error":{"message":"%s","type":"server_error"}}'
ENDLESS = b"event: message_start\ndata: " + b"x" * (256 * 1024)  # an event that never ends
GARBAGE = b"event: message_start\ndata: not json\n\n"


def test_in_stream_failures(client, auth, claude_catalog, settings):
    """Anthropic's `error` event, a dropped connection, an endless event and garbage: each the
    contract's in-stream error then `[DONE]`, a 503 row, not charged."""
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "event": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    fake = claude_catalog["anthropic"]
    body = {"model": HAIKU, "messages": ASK, "stream": True}
    cases = [("error_event", "Overloaded"), ("drop", SERVICE_UNAVAILABLE)]
    cases += [(ENDLESS, SERVICE_UNAVAILABLE), (GARBAGE, SERVICE_UNAVAILABLE)]
    for case, message in cases:
        if isinstance(case, str):
            fake.stream_fail_after, fake.stream_fail_mode = 4, case
        else:
            fake.stream_fail_after = None
            fake.fail_next(200, case, headers={"Content-Type": "text/event-stream"})
        response = client.post("/v1/chat/completions", json=body, headers=auth)
        assert response.status_code == 200
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-2:] == [IN_STREAM_ERROR % message, "data: [DONE]"], case
        if not isinstance(case, str):
            assert len(events) == 2  # nothing of the broken stream was relayed
    recorded = [(r.status_code, r.credits, r.error_code) for r in rows(len(cases))]
    assert recorded == [(503, 0, "stream_failed")] * len(cases)


# --- failover across kinds ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_claude_fails_over_from_anthropic_to_bedrock(sdk, claude_catalog, bedrock_upstream, stream):
    """The same Claude model on `anthropic` and on `cloud`: Anthropic overloaded (529) before
    the first byte, Bedrock answers; one ledger row, the answering attempt's, charged at its
    usage."""
    from catalog.models import ProviderModel
    from core.localcache import clear_all
    from tests.conftest import connect_cloud

    bedrock_upstream.reset()
    connect_cloud(bedrock_upstream)
    ProviderModel.objects.filter(model__model_id=HAIKU, provider__slug="cloud").update(active=True)
    clear_all()
    claude_catalog["anthropic"].fail_next(529)
    result = sdk.chat.completions.create(model=HAIKU, messages=ASK, stream=stream)
    text = collect(result)[0] if stream else result.choices[0].message.content
    assert text == f"Echo: {QUESTION}"
    assert len(claude_catalog["anthropic"].requests) == 1
    called = bedrock_upstream.last
    assert "eu.anthropic.claude-haiku-4-5-20251001-v1:0" in called.path
    row = rows(1)[0]
    assert (row.provider, row.status_code, row.attempts) == ("cloud", 200, 2)
    assert row.failovers
    usage = bedrock_upstream.usage_reported[-1]  # Bedrock's own TokenUsage
    total = (
        usage["inputTokens"] * PRICES["prompt"]
        + usage.get("cacheReadInputTokens", 0) * PRICES["cached"]
        + usage.get("cacheWriteInputTokens", 0) * PRICES["written"]
        + usage["outputTokens"] * PRICES["completion"]
    )
    assert row.credits == math.ceil(total) > 0
    bedrock_upstream.reset()


# --- the OpenAI Agents SDK ---------------------------------------------------------------------


def test_agents_sdk_tool_loop_and_output_type(gateway, api_key, claude_catalog):
    """The Agents SDK on both of its models: chat completions, and its default, the Responses
    API (through the bridge), a tool loop run and streamed, and a structured output type."""
    calls: list[str] = []
    get_weather = weather_tool(calls, "Sunny in {city}")
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner

    async def go(model_class):
        client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=api_key, max_retries=0)
        model = model_class(model=HAIKU, openai_client=client)
        try:
            agent = Agent(name="a", instructions="Be brief.", model=model, tools=[get_weather])
            looped = await Runner.run(agent, QUESTION)
            streamed = Runner.run_streamed(agent, QUESTION)
            _ = [event async for event in streamed.stream_events()]
            typed = Agent(name="t", instructions="Be brief.", model=model, output_type=Forecast)
            return looped, streamed, await Runner.run(typed, QUESTION)
        finally:
            await client.close()

    for model_class in (OpenAIChatCompletionsModel, OpenAIResponsesModel):
        calls.clear()
        looped, streamed, typed = asyncio.run(go(model_class))
        assert calls == ["Paris", "Paris"], model_class
        for result in (looped, streamed):
            assert result.final_output == "The get_weather tool returned: Sunny in Paris"
        assert isinstance(typed.final_output, Forecast)
    recorded = rows(10)
    assert [r.service for r in recorded] == ["chat_completions"] * 5 + ["responses"] * 5
    assert all(row.credits > 0 and row.status_code == 200 for row in recorded)


# --- /v1/responses, through the bridge ------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_responses_text_and_tools(sdk, claude_catalog, stream):
    tools = [{"type": "function", **WEATHER_TOOL["function"]}]
    if not stream:
        response = sdk.responses.create(model=HAIKU, input=QUESTION, tools=tools)
        calls = [item for item in response.output if item.type == "function_call"]
    else:
        with sdk.responses.stream(model=HAIKU, input=QUESTION, tools=tools) as events:
            response = events.get_final_response()
        calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    follow = sdk.responses.create(
        model=HAIKU,
        input=[
            {"role": "user", "content": QUESTION},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny"},
        ],
        tools=tools,
    )
    assert follow.output_text == "The get_weather tool returned: Sunny"
    assert all(row.credits > 0 for row in rows(2))


def test_responses_structured_output(sdk, claude_catalog):
    schema = Forecast.model_json_schema() | {"additionalProperties": False}
    response = sdk.responses.create(
        model=HAIKU,
        input=QUESTION,
        text={"format": {"type": "json_schema", "name": "forecast", "schema": schema}},
    )
    jsonschema.validate(json.loads(response.output_text), schema)


def test_responses_previous_response_id_is_the_spec_s_400(sdk, claude_catalog):
    with pytest.raises(openai.BadRequestError, match="previous_response_id is not supported"):
        sdk.responses.create(model=HAIKU, input="hi", previous_response_id="resp_1")
