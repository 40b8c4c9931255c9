"""The Gemini fake's chat models checked with Google's own SDK (`google-genai`) pointed at it,
without the gateway: so that the fake cannot drift from the real protocol."""

from __future__ import annotations

import pytest

# The `vendors` extra: a `.[dev]` environment skips this module instead of failing to collect.
pytest.importorskip("google.genai")

from google import genai
from google.genai import errors, types

from fake_upstreams.gemini_chat import normalize
from tests.conftest import UPSTREAM_KEY

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
CLOCK = types.FunctionDeclaration(
    name="get_time", description="The time in a city", parameters_json_schema={"type": "object"}
)


@pytest.fixture
def fake(gemini_upstream):
    """The session's Gemini fake (tests/conftest.py), reset."""
    gemini_upstream.reset()
    return gemini_upstream


@pytest.fixture
def gemini(fake):
    return genai.Client(
        api_key=UPSTREAM_KEY,
        http_options=types.HttpOptions(base_url=fake.origin, api_version="v1beta"),
    )


def test_generate_content_text_and_usage(gemini, fake):
    fake.cached_tokens = 2
    answer = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="hello big world",
        config=types.GenerateContentConfig(
            system_instruction="Be brief.",
            thinking_config=types.ThinkingConfig(thinking_budget=1024, include_thoughts=True),
            max_output_tokens=100,
        ),
    )
    assert answer.text == "Echo: hello big world"
    parts = answer.candidates[0].content.parts
    assert parts[0].thought and parts[0].text == "Thinking about: hello big world"
    usage = answer.usage_metadata
    assert (usage.prompt_token_count, usage.candidates_token_count) == (5, 4)
    assert (usage.thoughts_token_count, usage.cached_content_token_count) == (5, 2)
    assert answer.candidates[0].finish_reason == types.FinishReason.STOP
    sent = fake.last
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    # The SDK spells some nested names in snake_case; the API (and the fake) take both.
    assert normalize(sent.json)["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": 1024,
        "includeThoughts": True,
    }


def test_function_calling_loop_with_thought_signatures(gemini, fake):
    model = "gemini-3-pro-preview"
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        thinking_config=types.ThinkingConfig(thinking_level=types.ThinkingLevel.LOW),
    )
    ask = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])
    first = gemini.models.generate_content(model=model, contents=[ask], config=config)
    call = first.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    called = first.candidates[0].content
    assert called.parts[0].thought_signature  # bytes in the SDK, base64 on the wire
    result = types.Part.from_function_response(name="get_weather", response={"output": "sunny"})
    history = [ask, called, types.Content(role="user", parts=[result])]
    second = gemini.models.generate_content(model=model, contents=history, config=config)
    assert second.text == "The get_weather tool returned: sunny"
    # The same history without the signature: the 400 Gemini 3 answers.
    unsigned = types.Content(
        role="model", parts=[types.Part(function_call=called.parts[0].function_call)]
    )
    with pytest.raises(errors.ClientError) as refused:
        gemini.models.generate_content(
            model=model, contents=[ask, unsigned, history[2]], config=config
        )
    assert refused.value.code == 400 and "thought_signature" in refused.value.message


def test_parallel_calls_and_forced_function(gemini, fake):
    fake.parallel_calls = True
    tools = [types.Tool(function_declarations=[WEATHER, CLOCK])]
    answer = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="weather and time in Rome",
        config=types.GenerateContentConfig(tools=tools),
    )
    assert [c.name for c in answer.function_calls] == ["get_weather", "get_time"]
    fake.parallel_calls = False
    forced = gemini.models.generate_content(
        model="gemini-2.5-flash",
        contents="weather in Rome",
        config=types.GenerateContentConfig(
            tools=tools,
            tool_config=types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_time"]
                )
            ),
        ),
    )
    assert [c.name for c in forced.function_calls] == ["get_time"]


def test_structured_output(gemini):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    answer = gemini.models.generate_content(
        model="gemini-2.5-pro",
        contents="Name a city",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=schema
        ),
    )
    assert set(answer.parsed) == {"city"}


def test_stream(gemini, fake):
    chunks = list(
        gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="hello big world")
    )
    assert "".join(c.text or "" for c in chunks) == "Echo: hello big world"
    assert len(chunks) > 1
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == 4
    assert fake.last.query == {"alt": "sse"}
    fake.parallel_calls = True
    calls = [
        call
        for chunk in gemini.models.generate_content_stream(
            model="gemini-3-pro-preview",
            contents="weather and time in Oslo",
            config=types.GenerateContentConfig(
                tools=[types.Tool(function_declarations=[WEATHER, CLOCK])]
            ),
        )
        for call in chunk.function_calls or []
    ]
    assert [(c.name, c.args) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {}),
    ]
    assert all(c.id for c in calls)  # Gemini 3 names its calls


def test_safety_block(gemini, fake):
    answer = gemini.models.generate_content(model="gemini-2.5-flash", contents="forbidden thing")
    assert answer.candidates[0].finish_reason == types.FinishReason.SAFETY
    assert answer.text is None
    fake.chat_block_mode = "prompt_blocked"
    blocked = gemini.models.generate_content(model="gemini-2.5-flash", contents="forbidden thing")
    assert blocked.prompt_feedback.block_reason == types.BlockedReason.SAFETY
    assert not blocked.candidates


@pytest.mark.parametrize(
    "status,kind,state",
    [
        (429, errors.ClientError, "RESOURCE_EXHAUSTED"),
        (404, errors.ClientError, "NOT_FOUND"),
        (500, errors.ServerError, "INTERNAL"),
        (503, errors.ServerError, "UNAVAILABLE"),
    ],
)
def test_errors(gemini, fake, status, kind, state):
    fake.fail_next(status)
    with pytest.raises(kind) as failed:
        gemini.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (failed.value.code, failed.value.status) == (status, state)


def test_invalid_argument_and_unknown_model(gemini):
    with pytest.raises(errors.ClientError) as refused:
        gemini.models.generate_content(
            model="gemini-2.5-flash",
            contents="hi",
            config=types.GenerateContentConfig(
                thinking_config=types.ThinkingConfig(thinking_level=types.ThinkingLevel.LOW)
            ),
        )
    assert refused.value.status == "INVALID_ARGUMENT"
    with pytest.raises(errors.ClientError) as missing:
        gemini.models.generate_content(model="gemini-0-nope", contents="hi")
    assert missing.value.code == 404


def test_error_inside_the_stream(gemini, fake):
    fake.stream_fail_after = 1
    fake.stream_fail_mode = "error_event"
    with pytest.raises(errors.APIError) as failed:
        for _chunk in gemini.models.generate_content_stream(
            model="gemini-2.5-flash", contents="hello big world"
        ):
            pass
    assert failed.value.code == 500
