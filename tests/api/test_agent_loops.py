"""A tool loop and structured output through the gateway with the openai SDK, on the simulator
(the first run's `direct` provider): chat completions and responses, streamed and not. Every
turn is billed from the usage the simulator reports."""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel

from licensing.models import Transaction
from tests.kit import wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": WEATHER,
        },
    }
]
RESPONSE_TOOLS = [{"type": "function", **CHAT_TOOLS[0]["function"]}]
QUESTION = "What is the weather in Paris?"


class Event(BaseModel):
    name: str
    date: str
    participants: list[str]


def get_weather(city: str, unit: str) -> str:
    return f"Sunny, 21 degrees {unit} in {city}"


def ledger(count: int, timeout: float = 5.0) -> list[tuple]:
    """The ledger's rows once `count` have landed (a stream's row is written as it ends)."""
    wait_for_ledger(count, timeout)
    return list(
        Transaction.objects.order_by("created_at", "id").values_list(
            "service", "status_code", "completion_tokens"
        )
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_tool_loop(sdk, catalog, stream):
    messages = [{"role": "user", "content": QUESTION}]

    def turn():
        if not stream:
            return sdk.chat.completions.create(model=MINI, messages=messages, tools=CHAT_TOOLS)
        with sdk.chat.completions.stream(model=MINI, messages=messages, tools=CHAT_TOOLS) as s:
            return s.get_final_completion()

    first = turn()
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER)
    # The call in the request's shape (the stream helper's objects carry `index` and
    # `parsed_arguments` besides, and the answer's message `annotations`: see the xfail below).
    sent_call = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": call.function.arguments},
    }
    messages.append({"role": "assistant", "content": None, "tool_calls": [sent_call]})
    messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)})
    second = turn()
    assert second.choices[0].message.content == (
        "The get_weather tool returned: Sunny, 21 degrees celsius in Paris"
    )
    sent = catalog["direct"].last.json
    assert sent["messages"][-1]["tool_call_id"] == call.id and sent["tools"] == CHAT_TOOLS
    assert ledger(2) == [
        ("chat_completions", 200, first.usage.completion_tokens),
        ("chat_completions", 200, second.usage.completion_tokens),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_chat_structured_output(sdk, catalog, stream):
    messages = [{"role": "user", "content": "Alice and Bob go to the science fair on Friday."}]
    if stream:
        with sdk.chat.completions.stream(model=MINI, messages=messages, response_format=Event) as s:
            completion = s.get_final_completion()
    else:
        completion = sdk.chat.completions.parse(
            model=MINI, messages=messages, response_format=Event
        )
    event = completion.choices[0].message.parsed
    assert isinstance(event, Event)
    assert event.name == "Echo: Alice and Bob go to the science fair on Friday."
    assert catalog["direct"].last.json["response_format"]["json_schema"]["strict"] is True
    assert ledger(1) == [("chat_completions", 200, completion.usage.completion_tokens)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_tool_loop(sdk, catalog, stream):
    def turn(items):
        if not stream:
            return sdk.responses.create(model=MINI, input=items, tools=RESPONSE_TOOLS)
        with sdk.responses.stream(model=MINI, input=items, tools=RESPONSE_TOOLS) as s:
            return s.get_final_response()

    items = [{"role": "user", "content": QUESTION}]
    first = turn(items)
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, WEATHER)
    # The second turn sends the call back in the shape the gateway's input schema takes today.
    items += [
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": get_weather(**arguments),
        },
    ]
    second = turn(items)
    assert second.output_text == (
        "The get_weather tool returned: Sunny, 21 degrees celsius in Paris"
    )
    assert ledger(2) == [
        ("responses", 200, first.usage.output_tokens),
        ("responses", 200, second.usage.output_tokens),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_responses_structured_output(sdk, catalog, stream):
    question = "Plan the science fair"
    if stream:
        with sdk.responses.stream(model=MINI, input=question, text_format=Event) as s:
            response = s.get_final_response()
    else:
        response = sdk.responses.parse(model=MINI, input=question, text_format=Event)
    assert response.output_parsed == Event(
        name="Echo: Plan the science fair",
        date="sample date",
        participants=["sample participants"],
    )
    assert catalog["direct"].last.json["text"]["format"]["type"] == "json_schema"
    assert ledger(1) == [("responses", 200, response.usage.output_tokens)]


def test_chat_tool_loop_sending_the_answer_message_back(sdk, catalog):
    """The openai docs' loop appends the answer's message object itself; the SDK sends it with
    `annotations: []` (and `refusal: null`), as the API returned it."""
    messages = [{"role": "user", "content": QUESTION}]
    first = sdk.chat.completions.create(model=MINI, messages=messages, tools=CHAT_TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny"},
    ]
    second = sdk.chat.completions.create(model=MINI, messages=messages, tools=CHAT_TOOLS)
    assert second.choices[0].message.content == "The get_weather tool returned: Sunny"
    sent = catalog["direct"].last.json["messages"][1]
    assert sent["role"] == "assistant" and sent["annotations"] == []  # forwarded as given
    assert [row[:2] for row in ledger(2)] == [("chat_completions", 200)] * 2


CITATION = {
    "type": "url_citation",
    "url_citation": {"start_index": 0, "end_index": 5, "title": "Paris", "url": "https://a.b/"},
}


def test_chat_answer_message_with_citations_and_audio_goes_back(sdk, catalog):
    answer = {
        "role": "assistant",
        "content": "Paris is sunny.",
        "refusal": None,
        "annotations": [CITATION],
        "audio": {"id": "audio_abc"},
        "function_call": None,
    }
    messages = [{"role": "user", "content": QUESTION}, answer, {"role": "user", "content": "Ok"}]
    sdk.chat.completions.create(model=MINI, messages=messages)
    assert catalog["direct"].last.json["messages"][1] == answer


@pytest.mark.parametrize(
    "answer, loc",
    [
        (
            {"annotations": [{**CITATION, "extra": 1}]},
            ["body", "messages", 1, "assistant", "annotations", 0, "extra"],
        ),
        (
            {"annotations": [{**CITATION, "url_citation": {**CITATION["url_citation"], "x": 1}}]},
            ["body", "messages", 1, "assistant", "annotations", 0, "url_citation", "x"],
        ),
        (
            {"audio": {"id": "a", "data": "x"}},
            ["body", "messages", 1, "assistant", "audio", "data"],
        ),
        ({"parsed": None}, ["body", "messages", 1, "assistant", "parsed"]),
    ],
)
def test_chat_answer_message_keys_stay_closed(gateway, api_key, catalog, answer, loc):
    import httpx

    body = {
        "model": MINI,
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", **answer}],
    }
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc
    assert response.json()["detail"][0]["type"] == "extra_forbidden"
    assert catalog["direct"].requests == [] and Transaction.objects.count() == 0
