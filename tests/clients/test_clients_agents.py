"""The OpenAI Agents SDK (`openai-agents`, the `clients` extra) on its default model, the
Responses API (`OpenAIResponsesModel`), against the live gateway and the OpenAI simulator: a
tool loop, a second turn from `result.to_input_list()`, a structured `output_type`, an o-series
model whose reasoning items go back in, and a streamed run. Tracing is off: nothing leaves
127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

# The `clients` extra: a `.[dev]` environment skips this module (and the tests elsewhere that
# import its helpers) instead of failing to collect tests/.
pytest.importorskip("agents")

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ReasoningItem, ToolCallItem, ToolCallOutputItem
from openai import AsyncOpenAI

from tests.client_helpers import (
    Forecast,
    assert_charged,
    provider_calls,
    valid_weather_args,
    weather_report,
)

pytestmark = pytest.mark.django_db(transaction=True)
set_tracing_disabled(True)


def run(gateway, api_key, model, question, *, tools=(), output_type=None, streamed=False):
    """One `Runner.run` (or `run_streamed`) of an agent on `model`, in a loop of its own (the
    SDK is async); `question` is a string or a whole input list. Returns the result and the
    arguments of every tool call the SDK executed."""
    calls: list[dict] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        calls.append({"city": city})
        return weather_report(city)

    async def go():
        client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=api_key, max_retries=0)
        agent = Agent(
            name="assistant",
            instructions="Answer briefly; use the tools you have.",
            model=OpenAIResponsesModel(model=model, openai_client=client),
            tools=[get_weather] if "get_weather" in tools else [],
            output_type=output_type,
            model_settings=ModelSettings(),
        )
        try:
            if not streamed:
                return await Runner.run(agent, question)
            result = Runner.run_streamed(agent, question)
            kinds = [event.type async for event in result.stream_events()]
            assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
            return result
        finally:
            await client.close()

    return asyncio.run(go()), calls


def answer_ids(*results) -> list[str]:
    return [raw.response_id for result in results for raw in result.raw_responses]


def test_tool_loop_then_second_turn_from_to_input_list(gateway, api_key, catalog):
    first, calls = run(
        gateway, api_key, "gpt-4o-mini", "What is the weather in Paris?", tools=["get_weather"]
    )
    # The model asked for the tool, the SDK ran it and sent its output back; the answer uses it.
    assert len(calls) == 1
    valid_weather_args(calls[0])
    kinds = [type(item) for item in first.new_items]
    assert ToolCallItem in kinds and ToolCallOutputItem in kinds
    assert isinstance(first.final_output, str) and first.final_output
    assert len(first.raw_responses) == 2

    # The stateless second turn: the whole first run as input items, plus a new question.
    history = first.to_input_list()
    assert {item.get("type") for item in history} >= {"function_call", "function_call_output"}
    second, _ = run(
        gateway,
        api_key,
        "gpt-4o-mini",
        history + [{"role": "user", "content": "And what should I wear there?"}],
        tools=["get_weather"],
    )
    assert isinstance(second.final_output, str) and second.final_output
    sent = provider_calls(catalog["direct"], "/v1/responses")
    assert len(sent) == len(first.raw_responses) + len(second.raw_responses)
    # What the gateway accepted and relayed: the first run's items, the assistant's message
    # (id, status, output_text with annotations and logprobs) included.
    relayed = sent[len(first.raw_responses)]["input"]
    assert any(
        item.get("type") == "message" and item.get("role") == "assistant" for item in relayed
    )
    assert_charged(
        len(sent), "responses", answer_ids=answer_ids(first, second), model="gpt-4o-mini"
    )


def test_structured_output_type(gateway, api_key, catalog):
    result, _ = run(
        gateway, api_key, "gpt-4o-mini", "The weather in Rome, please.", output_type=Forecast
    )
    assert isinstance(result.final_output, Forecast)
    (sent,) = provider_calls(catalog["direct"], "/v1/responses")
    assert sent["text"]["format"]["type"] == "json_schema"
    assert_charged(1, "responses", answer_ids=answer_ids(result))


def test_o_series_reasoning_items_go_back_in(gateway, api_key, catalog):
    first, calls = run(
        gateway, api_key, "o4-mini", "Is it warm in Lisbon today?", tools=["get_weather"]
    )
    assert calls and first.final_output
    assert any(isinstance(item, ReasoningItem) for item in first.new_items)
    history = first.to_input_list()
    assert any(item.get("type") == "reasoning" for item in history)

    second, _ = run(
        gateway, api_key, "o4-mini", history + [{"role": "user", "content": "And tomorrow?"}]
    )
    assert second.final_output
    sent = provider_calls(catalog["direct"], "/v1/responses")
    assert any(item.get("type") == "reasoning" for item in sent[-1]["input"])
    assert_charged(len(sent), "responses", answer_ids=answer_ids(first, second), model="o4-mini")


def test_streamed_tool_loop(gateway, api_key, catalog):
    result, calls = run(
        gateway,
        api_key,
        "gpt-4o-mini",
        "What is the weather in Berlin?",
        tools=["get_weather"],
        streamed=True,
    )
    assert len(calls) == 1 and isinstance(result.final_output, str) and result.final_output
    sent = provider_calls(catalog["direct"], "/v1/responses")
    assert len(sent) == 2 and all(body["stream"] is True for body in sent)
    assert_charged(2, "responses", answer_ids=answer_ids(result))
