"""Chat completions and /v1/responses on `multimodal` (the Gemini API), end to end: the openai
SDK through the live gateway to the Gemini fake, and the ledger row of each call."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel

from fake_upstreams import gemini_chat as fake_chat
from licensing.models import Transaction
from tests.client_helpers import weather_tool
from tests.fixtures_gemini import GEMINI_3, WEATHER
from tests.kit import error, wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)
FLASH, PRO = "gemini-2.5-flash", "gemini-2.5-pro"
HELLO = [{"role": "user", "content": "hello big world"}]
PRICES = {  # USD per 1M tokens == micro-credits per token: (prompt, cached, completion)
    FLASH: (0.3, 0.03, 2.5),
    PRO: (1.25, 0.125, 10.0),
    GEMINI_3: (2.0, 0.2, 12.0),
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)


def credits(model: str, usage) -> int:
    prompt, cached, completion = PRICES[model]
    hit = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    total = (usage.prompt_tokens - hit) * prompt + hit * cached
    return math.ceil(round(total + usage.completion_tokens * completion, 9))


def rows() -> list[Transaction]:
    return list(Transaction.objects.order_by("id"))


def sent(fake) -> dict:
    return fake_chat.normalize(fake.last.json)


def stream_text(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# --- answers, usage and the ledger ----------------------------------------------------------------


def test_chat_answer_usage_and_ledger(sdk, gemini_chat):
    gemini_chat.cached_tokens = 2
    answer = sdk.chat.completions.create(
        model=FLASH, messages=[{"role": "system", "content": "Be brief."}, *HELLO], user="s-1"
    )
    assert answer.choices[0].message.content == "Echo: hello big world"
    assert answer.choices[0].finish_reason == "stop"
    usage = answer.usage
    # prompt: 2 + 3 words; completion: 4 words of answer + 5 of thought (billed as output).
    assert (usage.prompt_tokens, usage.completion_tokens) == (5, 9)
    assert usage.prompt_tokens_details.cached_tokens == 2
    assert usage.completion_tokens_details.reasoning_tokens == 5
    assert usage.model_extra["credits_used"] == credits(FLASH, usage)
    (row,) = rows()
    assert (row.service, row.provider, row.billed_model, row.status_code) == (
        "chat_completions",
        "multimodal",
        FLASH,
        200,
    )
    assert (row.prompt_tokens, row.completion_tokens, row.credits) == (5, 9, credits(FLASH, usage))
    body = sent(gemini_chat)
    assert gemini_chat.last.path == f"/v1beta/models/{FLASH}:generateContent"
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello big world"}]}]
    assert "user" not in json.dumps(body["generationConfig"])  # no end-user field at Gemini


def test_stream_is_billed_like_the_answer(sdk, gemini_chat):
    plain = sdk.chat.completions.create(model=PRO, messages=HELLO, max_tokens=50)
    chunks = list(
        sdk.chat.completions.create(model=PRO, messages=HELLO, max_tokens=50, stream=True)
    )
    assert stream_text(chunks) == plain.choices[0].message.content
    assert gemini_chat.last.path.endswith(f"{PRO}:streamGenerateContent")
    assert gemini_chat.last.query == {"alt": "sse"}
    usage = [c.usage for c in chunks if not c.choices]
    assert len(usage) == 1 and usage[0].prompt_tokens == plain.usage.prompt_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    wait_for_ledger(2)
    first, second = rows()
    assert first.credits == second.credits == credits(PRO, plain.usage) > 0
    assert second.status_code == 200


def test_length_and_generation_controls(sdk, gemini_chat):
    answer = sdk.chat.completions.create(
        model=FLASH,
        messages=HELLO,
        max_completion_tokens=2,
        temperature=0.3,
        top_p=0.5,
        stop=["END"],
        seed=3,
        presence_penalty=0.1,
        frequency_penalty=0.2,
    )
    assert answer.choices[0].finish_reason == "length"
    assert answer.choices[0].message.content == "Echo: hello"
    assert sent(gemini_chat)["generationConfig"] == {
        "maxOutputTokens": 2,
        "temperature": 0.3,
        "topP": 0.5,
        "stopSequences": ["END"],
        "seed": 3,
        "presencePenalty": 0.1,
        "frequencyPenalty": 0.2,
    }


# --- tools ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", [FLASH, GEMINI_3])
def test_parallel_tool_loop(sdk, gemini_chat, model, stream):
    """Calls -> results -> answer; on Gemini 3 the calls' thought signatures go back with them
    (the fake refuses a step without one, as Gemini 3 does)."""
    gemini_chat.parallel_calls = True
    messages = [{"role": "user", "content": "weather and time in Paris"}]
    tools = [WEATHER, CLOCK]
    calls = _turn(sdk, model, messages, tools, stream)
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    for call, output in zip(calls, ["sunny", "noon"], strict=True):
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    final = _turn(sdk, model, messages, tools, stream)
    assert final == "The get_weather tool returned: sunny The get_time tool returned: noon"
    model_turn = sent(gemini_chat)["contents"][1]["parts"]
    assert model_turn[0]["thoughtSignature"] and "thoughtSignature" not in model_turn[1]
    results = sent(gemini_chat)["contents"][2]["parts"]
    assert [p["functionResponse"]["response"] for p in results] == [
        {"output": "sunny"},
        {"output": "noon"},
    ]
    wait_for_ledger(2)
    assert [r.status_code for r in rows()] == [200, 200]


def _turn(sdk, model, messages, tools, stream):
    """The assistant's tool calls (as dicts), else its text."""
    if not stream:
        message = sdk.chat.completions.create(model=model, messages=messages, tools=tools)
        message = message.choices[0].message
        if message.tool_calls:
            return [c.model_dump(exclude_none=True) for c in message.tool_calls]
        return message.content
    chunks = list(
        sdk.chat.completions.create(model=model, messages=messages, tools=tools, stream=True)
    )
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(
                call.index,
                {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            entry["function"]["name"] += call.function.name or ""
            entry["function"]["arguments"] += call.function.arguments or ""
    return list(calls.values()) if calls else stream_text(chunks)


@pytest.mark.parametrize(
    "choice,mode",
    [
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "get_time"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_time"]},
        ),
    ],
)
def test_tool_choice(sdk, gemini_chat, choice, mode):
    answer = sdk.chat.completions.create(
        model=FLASH,
        messages=[{"role": "user", "content": "weather in Oslo"}],
        tools=[WEATHER, CLOCK],
        tool_choice=choice,
    )
    assert sent(gemini_chat)["toolConfig"] == {"functionCallingConfig": mode}
    calls = answer.choices[0].message.tool_calls
    if choice == "none":
        assert calls is None and answer.choices[0].finish_reason == "stop"
    else:
        expected = "get_time" if isinstance(choice, dict) else "get_weather"
        assert [c.function.name for c in calls] == [expected]
        assert answer.choices[0].finish_reason == "tool_calls"


def test_call_made_elsewhere_gets_the_stand_in_signature_on_gemini_3(sdk, gemini_chat):
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
    }
    messages = [
        {"role": "user", "content": "weather in Rome"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "rain"},
    ]
    answer = sdk.chat.completions.create(model=GEMINI_3, messages=messages, tools=[WEATHER])
    assert answer.choices[0].message.content == "The get_weather tool returned: rain"
    part = sent(gemini_chat)["contents"][1]["parts"][0]
    assert part["thoughtSignature"] == "skip_thought_signature_validator"


# --- structured output, reasoning, images --------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_structured_output(sdk, gemini_chat, stream):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema, "strict": True}}
    if stream:
        chunks = sdk.chat.completions.create(
            model=FLASH, messages=HELLO, response_format=fmt, stream=True
        )
        text = stream_text(list(chunks))
    else:
        text = sdk.chat.completions.create(model=FLASH, messages=HELLO, response_format=fmt)
        text = text.choices[0].message.content
    assert set(json.loads(text)) == {"city", "days"}
    config = sent(gemini_chat)["generationConfig"]
    assert config == {"responseMimeType": "application/json", "responseJsonSchema": schema}


@pytest.mark.parametrize(
    "model,fields,thinking",
    [
        (FLASH, {"reasoning_effort": "none"}, {"thinkingBudget": 0}),
        (PRO, {"reasoning_effort": "high"}, {"thinkingBudget": 24576, "includeThoughts": True}),
        (GEMINI_3, {"reasoning_effort": "low"}, {"thinkingLevel": "low", "includeThoughts": True}),
    ],
)
def test_reasoning_effort(client, auth, gemini_chat, model, fields, thinking):
    response = client.post(
        "/v1/chat/completions", json={"model": model, "messages": HELLO, **fields}, headers=auth
    )
    assert response.status_code == 200, response.text
    assert sent(gemini_chat)["generationConfig"]["thinkingConfig"] == thinking
    reasoning = response.json()["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert reasoning == (0 if fields.get("reasoning_effort") == "none" else 5)


@pytest.mark.parametrize(
    "fields,shown",
    [
        ({"reasoning": {"effort": "low"}}, True),
        ({"reasoning_effort": "medium"}, True),
        ({"reasoning": {"effort": "low", "exclude": True}}, False),
        ({}, False),  # Gemini's own default: it thinks, and shows nothing
    ],
)
def test_thought_summaries(client, auth, gemini_chat, fields, shown):
    body = {"model": FLASH, "messages": HELLO, **fields}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    message = response.json()["choices"][0]["message"]
    assert message.get("reasoning_content") == (
        "Thinking about: hello big world" if shown else None
    )
    thinking = sent(gemini_chat).get("generationConfig", {}).get("thinkingConfig", {})
    assert thinking.get("includeThoughts", False) is shown
    assert response.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5


def test_effort_the_model_lacks_is_the_spec_400(client, auth, gemini_chat):
    body = {"model": PRO, "messages": HELLO, "reasoning_effort": "none"}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert error(response, 400) == "Model does not support reasoning effort 'none'"
    assert gemini_chat.requests == []


def test_image_input(sdk, client, auth, gemini_chat):
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": PNG}},
    ]
    answer = sdk.chat.completions.create(
        model=FLASH, messages=[{"role": "user", "content": content}]
    )
    assert answer.choices[0].message.content == "Echo: what is this"
    assert answer.usage.prompt_tokens == 3 + 258  # an image counts 258 tokens at Gemini
    image = sent(gemini_chat)["contents"][0]["parts"][1]["inlineData"]
    assert image == {"mimeType": "image/png", "data": PNG.split(",", 1)[1]}
    content[1] = {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    body = {"model": FLASH, "messages": [{"role": "user", "content": content}]}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert "'image_url' must be a data: URL" in error(response, 400)
    assert len(gemini_chat.requests) == 1  # refused before any call


@pytest.mark.parametrize(
    "fields,name",
    [({"logprobs": True}, "logprobs"), ({"logit_bias": {"50256": -100}}, "logit_bias")],
)
def test_fields_without_a_counterpart_are_refused(client, auth, gemini_chat, fields, name):
    body = {"model": FLASH, "messages": HELLO, **fields}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert error(response, 400) == f"'{name}' is not supported by this provider"
    assert gemini_chat.requests == []


# --- refusals and content filters ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_safety_stop_is_a_charged_content_filter(sdk, gemini_chat, stream):
    messages = [{"role": "user", "content": "something forbidden here"}]
    if stream:
        chunks = list(sdk.chat.completions.create(model=FLASH, messages=messages, stream=True))
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert reasons[-1] == "content_filter" and stream_text(chunks) == ""
    else:
        answer = sdk.chat.completions.create(model=FLASH, messages=messages)
        assert answer.choices[0].finish_reason == "content_filter"
        assert answer.choices[0].message.content is None
    wait_for_ledger(1)
    (row,) = rows()
    assert (row.status_code, row.prompt_tokens) == (200, 3)
    assert row.credits == math.ceil(3 * 0.3)


def test_blocked_prompt_is_a_content_filter_with_a_refusal(sdk, gemini_chat):
    gemini_chat.chat_block_mode = "prompt_blocked"
    answer = sdk.chat.completions.create(
        model=FLASH, messages=[{"role": "user", "content": "forbidden"}]
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "content_filter"
    assert (
        choice.message.refusal == "The prompt was blocked by the provider's safety filter (SAFETY)."
    )


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status,expected,stream",
    [
        (400, 400, False),
        (404, 404, False),
        (401, 503, False),
        (403, 503, False),
        (429, 503, False),
        (500, 503, False),
        (503, 503, False),
        (409, 500, False),
        (400, 400, True),  # a stream's failure status: a JSON error before the stream opens
        (429, 503, True),
    ],
)
def test_provider_statuses(client, auth, gemini_chat, status, expected, stream):
    gemini_chat.fail_next(status)
    body = {"model": FLASH, "messages": HELLO, "stream": stream}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    message = error(response, expected)
    if expected == 400:
        assert message == "Request contains an invalid argument."
    if expected == 503:
        assert message == "Service temporarily unavailable"
    (row,) = [r for r in rows() if r.status_code == expected] or [None]
    assert row is not None and row.credits == 0


def test_provider_message_is_scrubbed(client, auth, gemini_chat):
    gemini_chat.fail_next(
        400,
        {
            "error": {
                "code": 400,
                "message": "Gemini cannot take this, see https://ai.google.dev",
                "status": "INVALID_ARGUMENT",
            }
        },
    )
    response = client.post(
        "/v1/chat/completions", json={"model": FLASH, "messages": HELLO}, headers=auth
    )
    assert error(response, 400) == "cannot take this, see"


def test_error_event_inside_the_stream(client, auth, gemini_chat):
    gemini_chat.stream_fail_after = 2
    gemini_chat.stream_fail_mode = "error_event"
    body = {"model": FLASH, "messages": HELLO, "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    events = [e for e in response.text.split("\n\n") if e]
    assert events[-2:] == [
        'data: {"error":{"message":"An internal error has occurred. Please retry or report in",'
        '"type":"server_error"}}',
        "data: [DONE]",
    ]
    wait_for_ledger(1)
    (row,) = rows()
    assert (row.status_code, row.credits) == (503, 0)


@pytest.mark.parametrize(
    "raw",
    [
        b"data: <html>oops</html>\n\n",  # garbage
        b'data: {"candidates":[{"content":{"parts":[{"text":"cut"}]},"index":0}]}\n\n',  # no end
        b"data: " + b"x" * (80 * 1024),  # an event that never ends
    ],
)
def test_broken_streams_end_with_the_in_stream_503(client, auth, gemini_chat, settings, raw):
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "event": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    gemini_chat.fail_next(200, raw, headers={"Content-Type": "text/event-stream"})
    body = {"model": FLASH, "messages": HELLO, "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    assert [e for e in response.text.split("\n\n") if e][-2:] == [
        'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}',
        "data: [DONE]",
    ]
    wait_for_ledger(1)
    (row,) = rows()
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")


def test_answer_over_its_cap_is_a_503(client, auth, gemini_chat, settings):
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "chat": 4 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    gemini_chat.bloat_next(8 * 1024)
    response = client.post(
        "/v1/chat/completions", json={"model": FLASH, "messages": HELLO}, headers=auth
    )
    assert error(response, 503) == "Service temporarily unavailable"
    (row,) = rows()
    assert (row.status_code, row.credits) == (503, 0)


# --- /v1/responses through the bridge ------------------------------------------------------------


def test_responses(sdk, gemini_chat):
    answer = sdk.responses.create(model=FLASH, input="hello big world")
    assert answer.output_text == "Echo: hello big world"
    streamed = list(sdk.responses.create(model=FLASH, input="hello big world", stream=True))
    completed = [e for e in streamed if e.type == "response.completed"]
    assert completed[0].response.output_text == "Echo: hello big world"
    wait_for_ledger(2)
    first, second = rows()
    assert first.credits == second.credits > 0


def test_responses_tool_loop_and_text_format(sdk, gemini_chat):
    tool = {"type": "function", **WEATHER["function"]}
    first = sdk.responses.create(model=GEMINI_3, input="weather in Paris", tools=[tool])
    call = next(item for item in first.output if item.type == "function_call")
    second = sdk.responses.create(
        model=GEMINI_3,
        input=[
            {"role": "user", "content": "weather in Paris"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
        tools=[tool],
    )
    assert second.output_text == "The get_weather tool returned: sunny"
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    shaped = sdk.responses.create(
        model=FLASH,
        input="name a city",
        text={"format": {"type": "json_schema", "name": "c", "schema": schema}},
    )
    assert set(json.loads(shaped.output_text)) == {"city"}


def test_responses_stream_parallel_calls_back_with_the_output(sdk, gemini_chat):
    """A streamed turn of parallel calls, its output items sent back as they came (the thought
    signature inside the first call's `call_id`), then the answer."""
    gemini_chat.parallel_calls = True
    tools = [{"type": "function", **t["function"]} for t in (WEATHER, CLOCK)]
    ask = [{"role": "user", "content": "weather and time in Paris"}]
    events = list(sdk.responses.create(model=GEMINI_3, input=ask, tools=tools, stream=True))
    output = next(e for e in events if e.type == "response.completed").response.output
    calls = [item for item in output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    results = [
        {"type": "function_call_output", "call_id": c.call_id, "output": out}
        for c, out in zip(calls, ["sunny", "noon"], strict=True)
    ]
    history = ask + [item.model_dump(exclude_none=True) for item in output] + results
    final = sdk.responses.create(model=GEMINI_3, input=history, tools=tools)
    assert final.output_text == (
        "The get_weather tool returned: sunny The get_time tool returned: noon"
    )
    assert sent(gemini_chat)["contents"][1]["parts"][0]["thoughtSignature"]


def test_responses_reasoning_and_image(sdk, gemini_chat):
    content = [
        {"type": "input_text", "text": "what is this"},
        {"type": "input_image", "image_url": PNG},
    ]
    answer = sdk.responses.create(
        model=FLASH, input=[{"role": "user", "content": content}], reasoning={"effort": "low"}
    )
    assert answer.output_text == "Echo: what is this"
    reasoning = next(item for item in answer.output if item.type == "reasoning")
    assert reasoning.content[0].text == "Thinking about: what is this"
    assert answer.usage.output_tokens_details.reasoning_tokens == 5
    body = sent(gemini_chat)
    assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 1024
    assert body["contents"][0]["parts"][1]["inlineData"]["mimeType"] == "image/png"


def test_responses_content_filter(sdk, gemini_chat):
    answer = sdk.responses.create(model=FLASH, input="something forbidden")
    assert answer.status == "incomplete"
    assert answer.incomplete_details.reason == "content_filter"
    (row,) = rows()
    assert (row.status_code, row.credits) == (200, math.ceil(2 * 0.3))


# --- the OpenAI Agents SDK ----------------------------------------------------------------------


class Trip(BaseModel):
    city: str
    days: int


def agent_run(
    gateway, api_key, model, question, *, responses=False, output_type=None, streamed=False
):
    """One agent run on `model` through the gateway (chat completions, or the Responses API),
    with a `get_weather` tool; the result and the cities the tool was called for."""
    cities: list[str] = []
    get_weather = weather_tool(cities, "sunny in {city}")
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner

    async def go():
        client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=api_key, max_retries=0)
        kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
        agent = Agent(
            name="assistant",
            instructions="Answer briefly; use the tools you have.",
            model=kind(model=model, openai_client=client),
            tools=[] if output_type else [get_weather],
            output_type=output_type,
        )
        try:
            if not streamed:
                return await Runner.run(agent, question)
            result = Runner.run_streamed(agent, question)
            async for _event in result.stream_events():
                pass
            return result
        finally:
            await client.close()

    return asyncio.run(go()), cities


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("model", [FLASH, GEMINI_3])
def test_agents_sdk_tool_loop_on_chat_completions(gateway, api_key, gemini_chat, model, streamed):
    result, cities = agent_run(
        gateway, api_key, model, "What is the weather in Paris?", streamed=streamed
    )
    assert cities == ["Paris"]
    assert result.final_output == "The get_weather tool returned: sunny in Paris"
    wait_for_ledger(2)
    assert [r.status_code for r in rows()] == [200, 200]
    assert all(r.credits > 0 for r in rows())


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_structured_output_on_chat_completions(gateway, api_key, gemini_chat, streamed):
    result, _ = agent_run(
        gateway, api_key, FLASH, "Plan a trip", output_type=Trip, streamed=streamed
    )
    assert isinstance(result.final_output, Trip)
    config = sent(gemini_chat)["generationConfig"]
    assert config["responseJsonSchema"]["required"] == ["city", "days"]


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_on_responses(gateway, api_key, gemini_chat, streamed):
    result, cities = agent_run(
        gateway,
        api_key,
        GEMINI_3,
        "What is the weather in Paris?",
        responses=True,
        streamed=streamed,
    )
    assert cities == ["Paris"]
    assert result.final_output == "The get_weather tool returned: sunny in Paris"
    shaped, _ = agent_run(
        gateway, api_key, FLASH, "Plan a trip", responses=True, output_type=Trip, streamed=streamed
    )
    assert isinstance(shaped.final_output, Trip)
