"""The simulator as a stand-in for agents (fake_upstreams/agentic.py): tool calls, answers that
use tool results, structured output and reasoning items, on Chat Completions and the Responses
API, streamed and not, read with a plain HTTP client and with the openai SDK's own helpers.
Requests that ask for none of it keep the `Echo:` answers
(tests/providers/test_fake_upstreams.py)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from fake_upstreams import OpenRouterFake, serve
from fake_upstreams.synth import count_tokens
from tests.kit import FAKE_OPENAI_KEY

from .test_fake_upstreams import sse_events

KEY = FAKE_OPENAI_KEY
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_time", "description": "The time in a zone", "parameters": TIME},
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city",
            "parameters": WEATHER,
        },
    },
]
RESPONSE_TOOLS = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
ASK = [{"role": "user", "content": "What is the weather in Paris this week?"}]
EVENT = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "participants": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "date", "participants"],
    "additionalProperties": False,
}


class Event(BaseModel):
    name: str
    date: str
    participants: list[str]


# `oai` (the fake OpenAI, reset), `oai_http` and `oai_sdk` come from the kit (tests/kit.py).
@pytest.fixture
def http(oai_http):
    return oai_http


@pytest.fixture
def sdk(oai_sdk):
    """The openai SDK against the fake itself (not the gateway's `sdk` of the kit)."""
    return oai_sdk


def chat(http, **body) -> dict:
    answer = http.post("/chat/completions", json={"model": "gpt-4o-mini", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def chat_stream(http, **body) -> list[dict]:
    body = {"model": "gpt-4o-mini", "stream": True, **body}
    events = sse_events(http.post("/chat/completions", json=body).text)
    assert events[-1]["data"] == "[DONE]"
    return [json.loads(e["data"]) for e in events[:-1]]


def respond(http, **body) -> dict:
    answer = http.post("/responses", json={"model": "gpt-4.1-mini", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def respond_stream(http, **body) -> list[dict]:
    body = {"model": "gpt-4.1-mini", "stream": True, **body}
    events = sse_events(http.post("/responses", json=body).text)
    datas = [json.loads(e["data"]) for e in events]
    assert [d["type"] for d in datas] == [e["event"] for e in events]
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    return datas


# --------------------------------------------------------------------------- chat completions


def test_chat_tool_call(http):
    answer = chat(http, messages=ASK, tools=CHAT_TOOLS)
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None and message["role"] == "assistant"
    [call] = message["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    # The tool sharing most words with the question, its arguments valid against its schema.
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, WEATHER)
    assert arguments == {"city": "Paris", "unit": "celsius", "days": 1}
    assert answer["usage"]["completion_tokens"] == count_tokens(call["function"]["arguments"])
    # Deterministic: the same request, the same call (apart from its id).
    again = chat(http, messages=ASK, tools=CHAT_TOOLS)["choices"][0]["message"]["tool_calls"]
    assert again[0]["function"] == call["function"] and again[0]["id"] != call["id"]


def test_chat_tool_choice(http):
    forced = {"type": "function", "function": {"name": "get_time"}}
    message = chat(http, messages=ASK, tools=CHAT_TOOLS, tool_choice=forced)["choices"][0]
    assert message["message"]["tool_calls"][0]["function"] == {
        "name": "get_time",
        "arguments": '{"zone":"Paris"}',
    }
    unrelated = [{"role": "user", "content": "hello there"}]
    first = chat(http, messages=unrelated, tools=CHAT_TOOLS, tool_choice="required")
    assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    plain = chat(http, messages=ASK, tools=CHAT_TOOLS, tool_choice="none")["choices"][0]
    assert plain["message"]["content"] == "Echo: What is the weather in Paris this week?"
    assert plain["finish_reason"] == "stop" and "tool_calls" not in plain["message"]

    missing = {"type": "function", "function": {"name": "get_news"}}
    refused = http.post(
        "/chat/completions",
        json={"model": "gpt-4o-mini", "messages": ASK, "tools": CHAT_TOOLS, "tool_choice": missing},
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "tool_choice"
    assert "get_news" in refused.json()["error"]["message"]


def test_chat_answers_with_the_tool_result(http):
    call = chat(http, messages=ASK, tools=CHAT_TOOLS)["choices"][0]["message"]
    history = [
        *ASK,
        call,
        {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "Sunny, 21 C"},
    ]
    answer = chat(http, messages=history, tools=CHAT_TOOLS)
    choice = answer["choices"][0]
    assert choice["message"]["content"] == "The get_weather tool returned: Sunny, 21 C"
    assert choice["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == 7
    # `required` forbids text: another call, of a tool not called yet.
    again = chat(http, messages=history, tools=CHAT_TOOLS, tool_choice="required")
    assert again["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    # A new question after the result: a new call.
    follow = [*history, {"role": "assistant", "content": "ok"}, *ASK]
    assert chat(http, messages=follow, tools=CHAT_TOOLS)["choices"][0]["message"]["tool_calls"]


def test_chat_tool_call_streamed_as_the_api_does(http, oai):
    oai.stream_pieces = 3
    whole = chat(http, messages=ASK, tools=CHAT_TOOLS)["choices"][0]["message"]["tool_calls"][0]
    chunks = chat_stream(
        http, messages=ASK, tools=CHAT_TOOLS, stream_options={"include_usage": True}
    )
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": deltas[0]["tool_calls"][0]["id"],
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ],
        "refusal": None,
    }
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:-1]]
    assert len(pieces) == 3 and "".join(pieces) == whole["function"]["arguments"]
    assert all(d["tool_calls"][0].keys() == {"index", "function"} for d in deltas[1:-1])
    assert deltas[-1] == {} and chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == count_tokens(whole["function"]["arguments"])


def test_chat_structured_output(http, oai):
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "event", "schema": EVENT, "strict": True},
    }
    ask = [{"role": "user", "content": "Alice and Bob go to the science fair on Friday."}]
    answer = chat(http, messages=ask, response_format=response_format)
    content = answer["choices"][0]["message"]["content"]
    document = json.loads(content)
    jsonschema.validate(document, EVENT)
    assert document == {
        "name": "Echo: Alice and Bob go to the science fair on Friday.",
        "date": "2024-01-15",
        "participants": ["sample participants"],
    }
    assert answer["usage"]["completion_tokens"] == count_tokens(content)
    chunks = chat_stream(http, messages=ask, response_format=response_format)
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]]
    assert len(pieces) > 1 and "".join(pieces) == content

    loose = chat(http, messages=ask, response_format={"type": "json_object"})
    assert json.loads(loose["choices"][0]["message"]["content"]) == {
        "answer": "Echo: Alice and Bob go to the science fair on Friday."
    }
    # The reply_text knob is what the model "says": it lands in the document.
    oai.reply_text = "fixed words"
    fixed = chat(http, messages=ask, response_format={"type": "json_object"})
    assert fixed["choices"][0]["message"]["content"] == '{"answer":"fixed words"}'


def test_chat_structured_output_after_a_tool_result(http):
    response_format = {"type": "json_object"}
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "Rain"}]},
    ]
    answer = chat(http, messages=history, tools=CHAT_TOOLS, response_format=response_format)
    assert json.loads(answer["choices"][0]["message"]["content"]) == {
        "answer": "The get_weather tool returned: Rain"
    }


def test_sdk_chat_helpers(sdk):
    parsed = sdk.chat.completions.parse(
        model="gpt-4o-mini", messages=ASK, response_format=Event
    ).choices[0]
    assert parsed.message.parsed == Event(
        name="Echo: What is the weather in Paris this week?",
        date="sample date",
        participants=["sample participants"],
    )
    with sdk.chat.completions.stream(
        model="gpt-4o-mini", messages=ASK, response_format=Event
    ) as stream:
        assert stream.get_final_completion().choices[0].message.parsed == parsed.message.parsed

    tool = openai.pydantic_function_tool(Event, name="save_event")
    called = sdk.chat.completions.parse(model="gpt-4o-mini", messages=ASK, tools=[tool])
    arguments = called.choices[0].message.tool_calls[0].function.parsed_arguments
    assert arguments == Event(
        name="Paris", date="sample date", participants=["sample participants"]
    )


# --------------------------------------------------------------------------- responses


def test_responses_function_call(http):
    answer = respond(http, input=ASK, tools=RESPONSE_TOOLS)
    [item] = answer["output"]
    assert item["type"] == "function_call" and item["status"] == "completed"
    assert item["id"].startswith("fc_") and item["call_id"].startswith("call_")
    assert item["name"] == "get_weather"
    jsonschema.validate(json.loads(item["arguments"]), WEATHER)
    assert answer["usage"]["output_tokens"] == count_tokens(item["arguments"])
    # The request's tools and choice, echoed as the API does (strict by default).
    assert answer["tools"][1] == {**RESPONSE_TOOLS[1], "strict": True}
    assert answer["tool_choice"] == "auto"

    forced = respond(
        http, input=ASK, tools=RESPONSE_TOOLS, tool_choice={"type": "function", "name": "get_time"}
    )
    assert forced["output"][0]["name"] == "get_time"
    assert forced["tool_choice"] == {"type": "function", "name": "get_time"}

    second = respond(
        http,
        input=[
            *ASK,
            {k: item[k] for k in ("type", "call_id", "name", "arguments")},
            {"type": "function_call_output", "call_id": item["call_id"], "output": "Sunny"},
        ],
        tools=RESPONSE_TOOLS,
    )
    assert second["output"][0]["content"][0]["text"] == "The get_weather tool returned: Sunny"

    # With previous_response_id, the call is found in the stored answer.
    chained = respond(
        http,
        previous_response_id=answer["id"],
        input=[
            {
                "type": "function_call_output",
                "call_id": item["call_id"],
                "output": [{"type": "input_text", "text": "Cloudy"}],
            }
        ],
        tools=RESPONSE_TOOLS,
    )
    assert chained["output"][0]["content"][0]["text"] == "The get_weather tool returned: Cloudy"


def test_responses_function_call_stream(http, oai):
    oai.stream_pieces = 2
    datas = respond_stream(http, input=ASK, tools=RESPONSE_TOOLS)
    assert [d["type"] for d in datas] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, done = datas[2]["item"], datas[6]["item"]
    assert added == {**done, "status": "in_progress", "arguments": ""}
    assert done == datas[-1]["response"]["output"][0]
    assert {d["item_id"] for d in datas[3:6]} == {done["id"]}
    assert datas[3]["delta"] + datas[4]["delta"] == datas[5]["arguments"] == done["arguments"]
    assert datas[0]["response"]["output"] == []


def test_responses_structured_output(http):
    text = {"format": {"type": "json_schema", "name": "event", "schema": EVENT, "strict": True}}
    answer = respond(http, input="Plan the fair", text=text)
    [message] = answer["output"]
    document = json.loads(message["content"][0]["text"])
    jsonschema.validate(document, EVENT)
    assert document["name"] == "Echo: Plan the fair"
    assert answer["text"]["format"] == text["format"]

    datas = respond_stream(http, input="Plan the fair", text=text)
    deltas = [d["delta"] for d in datas if d["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == message["content"][0]["text"]

    loose = respond(http, input="Plan the fair", text={"format": {"type": "json_object"}})
    assert json.loads(loose["output"][0]["content"][0]["text"]) == {"answer": "Echo: Plan the fair"}


def test_responses_reasoning_item(http, oai):
    oai.reasoning_tokens = 12
    answer = respond(http, model="o4-mini", input="hello big world")
    reasoning, message = answer["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["summary"] == [] and "encrypted_content" not in reasoning
    assert message["content"][0]["text"] == "Echo: hello big world"
    assert answer["usage"]["output_tokens_details"]["reasoning_tokens"] == 12
    assert answer["usage"]["output_tokens"] == 4 + 12

    detailed = respond(
        http,
        model="o4-mini",
        input=ASK,
        tools=RESPONSE_TOOLS,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low", "summary": "auto"},
    )
    reasoning, call = detailed["output"]
    assert reasoning["summary"] == [
        {
            "type": "summary_text",
            "text": "**Choosing a tool**\n\nThe request is best served by the get_weather tool.",
        }
    ]
    assert isinstance(reasoning["encrypted_content"], str) and call["type"] == "function_call"
    assert detailed["reasoning"] == {"effort": "low", "summary": "auto"}

    # Streamed: the reasoning item's events, then the message's.
    datas = respond_stream(
        http, model="o4-mini", input="hi", reasoning={"effort": "low", "summary": "auto"}
    )
    names = [d["type"] for d in datas]
    assert names[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    first_done = names.index("response.output_item.done")
    assert names[first_done - 2 : first_done + 2] == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    assert datas[first_done]["item"] == datas[-1]["response"]["output"][0]
    assert datas[first_done + 1]["output_index"] == 1

    # Models that do not reason answer without one.
    assert [i["type"] for i in respond(http, input="hi")["output"]] == ["message"]


def test_sdk_responses_helpers(sdk):
    parsed = sdk.responses.parse(model="gpt-4.1-mini", input="Plan the fair", text_format=Event)
    assert parsed.output_parsed == Event(
        name="Echo: Plan the fair", date="sample date", participants=["sample participants"]
    )
    with sdk.responses.stream(
        model="gpt-4.1-mini", input="Plan the fair", text_format=Event
    ) as stream:
        assert stream.get_final_response().output_parsed == parsed.output_parsed

    with sdk.responses.stream(
        model="o3",
        input=ASK,
        tools=RESPONSE_TOOLS,
        reasoning={"effort": "high", "summary": "detailed"},
    ) as stream:
        arguments = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    reasoning, call = final.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text.startswith("**Choosing")
    assert call.type == "function_call" and "".join(arguments) == call.arguments


# --------------------------------------------------------------------------- OpenRouter


def test_openrouter_shares_the_behaviour():
    with serve(OpenRouterFake(api_key=KEY)) as fake:
        client = openai.OpenAI(api_key=KEY, base_url=fake.base_url, max_retries=0, timeout=5)
        answer = client.chat.completions.create(
            model="openai/gpt-4o-mini", messages=ASK, tools=CHAT_TOOLS
        )
        assert answer.choices[0].message.tool_calls[0].function.name == "get_weather"
        chunks = list(
            client.chat.completions.create(
                model="openai/gpt-4o-mini", messages=ASK, tools=CHAT_TOOLS, stream=True
            )
        )
        assert chunks[-2].choices[0].finish_reason == "tool_calls"
        parsed = client.responses.parse(
            model="openai/gpt-5-mini", input="Plan the fair", text_format=Event
        )
        assert parsed.output_parsed.name == "Echo: Plan the fair"
        assert [i.type for i in parsed.output] == ["message"]  # no reasoning simulated here
