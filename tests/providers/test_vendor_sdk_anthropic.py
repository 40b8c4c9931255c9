"""The Anthropic fake checked against the vendor's own SDK (`anthropic`, pinned), without the
gateway: if the fake drifted from the real protocol (its paths, headers, bodies, SSE events,
error shapes), the SDK would fail to read it here."""

from __future__ import annotations

import json

import pytest

# The `vendors` extra: a `.[dev]` environment skips this module instead of failing to collect.
pytest.importorskip("anthropic")

import anthropic

from fake_upstreams import AnthropicFake, serve

KEY = "sk-ant-fake-test"
MODEL = "claude-haiku-4-5"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    with serve(AnthropicFake(api_key=KEY)) as fake:
        yield fake


@pytest.fixture
def fake(server):
    server.reset()
    return server


@pytest.fixture
def sdk(fake):
    return anthropic.Anthropic(api_key=KEY, base_url=fake.origin, max_retries=0)


def test_create_text(sdk, fake):
    message = sdk.messages.create(model=MODEL, max_tokens=100, messages=ASK)
    assert message.content[0].type == "text"
    assert message.content[0].text == "Echo: What is the weather in Paris?"
    assert message.stop_reason == "end_turn" and message.model == "claude-haiku-4-5-20251001"
    assert message.usage.input_tokens == 6 and message.usage.output_tokens == 7
    sent = fake.last
    assert sent.path == "/v1/messages"
    # The SDK sends its key as a bearer token and its own API version (the gateway sends
    # `x-api-key` and 2023-06-01): the fake takes both.
    assert sent.headers["authorization"] == f"Bearer {KEY}" and sent.headers["anthropic-version"]


def test_tool_loop(sdk):
    call = sdk.messages.create(model=MODEL, max_tokens=100, messages=ASK, tools=[WEATHER_TOOL])
    assert call.stop_reason == "tool_use"
    use = call.content[0]
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Paris"})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}
    history = [*ASK, {"role": "assistant", "content": call.content}]
    answer = sdk.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[*history, {"role": "user", "content": [result]}],
        tools=[WEATHER_TOOL],
    )
    assert answer.content[0].text == "The get_weather tool returned: Sunny"


def test_stream_with_tools_and_thinking(sdk):
    with sdk.messages.stream(
        model=MODEL,
        max_tokens=4096,
        messages=ASK,
        tools=[WEATHER_TOOL],
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [block.type for block in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking.startswith("The user asks:") and final.content[0].signature
    assert final.content[1].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens_details.thinking_tokens > 0


def test_adaptive_thinking(sdk):
    message = sdk.messages.create(
        model=MODEL,
        max_tokens=1000,
        messages=ASK,
        thinking={"type": "adaptive"},
        output_config={"effort": "medium"},
    )
    assert [block.type for block in message.content] == ["thinking", "text"]


def test_structured_output(sdk):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    message = sdk.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=ASK,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    document = json.loads(message.content[0].text)
    assert set(document) == {"city", "days"} and isinstance(document["days"], int)


def test_cache_usage_and_refusal(sdk, fake):
    fake.cache_read_tokens, fake.cache_write_tokens = 2, 3
    message = sdk.messages.create(model=MODEL, max_tokens=100, messages=ASK)
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (1, 2)
    assert usage.cache_creation_input_tokens == 3
    refused = sdk.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "forbidden-topic"}]
    )
    assert refused.stop_reason == "refusal" and refused.stop_details.type == "refusal"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, anthropic.BadRequestError),
        (401, anthropic.AuthenticationError),
        (429, anthropic.RateLimitError),
        (529, anthropic.OverloadedError),
    ],
)
def test_errors_are_the_sdk_s_exceptions(sdk, fake, status, error):
    fake.fail_next(status)
    with pytest.raises(error) as excinfo:
        sdk.messages.create(model=MODEL, max_tokens=100, messages=ASK)
    assert isinstance(excinfo.value, anthropic.APIStatusError)
    assert excinfo.value.status_code == status
    assert excinfo.value.body["type"] == "error"


def test_the_api_s_own_refusals(sdk, fake):
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(api_key="wrong", base_url=fake.origin, max_retries=0).messages.create(
            model=MODEL, max_tokens=100, messages=ASK
        )
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.create(model="claude-unknown", max_tokens=100, messages=ASK)
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        sdk.messages.create(
            model=MODEL,
            max_tokens=2000,
            messages=ASK,
            thinking={"type": "enabled", "budget_tokens": 512},
        )


def test_stream_error_event(sdk, fake):
    fake.stream_fail_after, fake.stream_fail_mode = 3, "error_event"
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with sdk.messages.stream(model=MODEL, max_tokens=100, messages=ASK) as stream:
            for _ in stream:
                pass
