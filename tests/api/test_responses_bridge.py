"""POST /v1/responses through chat completions (providers/bridge.py), end to end: the openai SDK
and the OpenAI Agents SDK against the live gateway, a provider of kind `openai_compatible` on
the OpenAI fake's chat endpoint (tests/fixtures_bridge.py). Each answer is billed at the usage
the chat answer reported, at the catalog's prices; what the translation cannot carry is the
spec's 400 before any call."""

from __future__ import annotations

import json
import logging
import math

import openai
import pytest

from inference.endpoints.responses import STATELESS_MESSAGE
from inference.providers.events import ChatChunks, chat_completion, contract_usage
from licensing.models import Transaction
from tests.client_helpers import (
    WEATHER_SCHEMA,
    Forecast,
    agents_sdk,
    assert_charged,
    provider_calls,
    valid_weather_args,
    weather_report,
)
from tests.fixtures_bridge import BRIDGE_COST, BRIDGE_MODEL, BRIDGE_REASONER
from tests.kit import error, wait_for_ledger, wait_until
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
CHAT = "/v1/chat/completions"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": WEATHER_SCHEMA,
    "strict": True,
}


def credits(usage) -> int:
    """The usage the client was given, at the catalog's prices (cached reads at their own)."""
    cached = usage.input_tokens_details.cached_tokens
    return math.ceil(
        (usage.input_tokens - cached) * BRIDGE_COST["prompt"]
        + cached * BRIDGE_COST["cached_prompt"]
        + usage.output_tokens * BRIDGE_COST["completion"]
    )


def create(sdk, streamed: bool, **body):
    """`responses.create`, or `responses.stream` to its final response."""
    if not streamed:
        return sdk.responses.create(**body)
    with sdk.responses.stream(**body) as stream:
        kinds = [event.type for event in stream]
        response = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    return response


def charged_row(response, model: str = BRIDGE_MODEL) -> Transaction:
    """The ledger row of `response` (a stream's is written just after it ends), checked
    against the usage the client was given and the catalog's prices."""
    wait_until(lambda: Transaction.objects.filter(upstream_id=response.id).exists())
    row = Transaction.objects.get(upstream_id=response.id)
    assert (row.service, row.status_code, row.billed_model) == ("responses", 200, model)
    assert (row.prompt_tokens, row.completion_tokens) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )
    assert row.credits == credits(response.usage) > 0
    return row


@pytest.mark.parametrize("streamed", [False, True])
def test_text_answer_billed_at_the_reported_usage(sdk, bridged, streamed):
    bridged.cached_tokens = 3
    response = create(
        sdk,
        streamed,
        model=BRIDGE_MODEL,
        instructions="Be brief.",
        input="hello there",
        max_output_tokens=50,
        temperature=0.3,
    )
    assert response.output_text == "Echo: hello there" and response.status == "completed"
    assert response.id.startswith("resp_") and response.model == "gpt-4o-mini-2024-07-18"
    assert (response.instructions, response.temperature, response.store) == (
        "Be brief.",
        0.3,
        False,
    )
    assert response.usage.input_tokens_details.cached_tokens == 3
    (sent,) = provider_calls(bridged, CHAT)
    assert provider_calls(bridged, "/v1/responses") == []
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    # The limit as the adapter sends it (an OpenAI-compatible server may know only max_tokens).
    limit = sent.get("max_completion_tokens", sent.get("max_tokens"))
    assert (sent["model"], limit, sent["temperature"]) == ("gpt-4o-mini", 50, 0.3)
    if streamed:
        assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    charged_row(response)


@pytest.mark.parametrize("streamed", [False, True])
def test_tool_loop_with_the_output_sent_back(sdk, bridged, streamed):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = create(sdk, streamed, model=BRIDGE_MODEL, input=[question], tools=[WEATHER_TOOL])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    city = valid_weather_args(call.arguments)["city"]
    result = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": weather_report(city),
    }
    second = create(
        sdk,
        streamed,
        model=BRIDGE_MODEL,
        input=[question, *first.output, result],
        tools=[WEATHER_TOOL],
    )
    assert second.output_text == f"The get_weather tool returned: {weather_report(city)}"
    sent = provider_calls(bridged, CHAT)[-1]
    assert sent["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": weather_report(city)},
    ]
    assert sent["tools"] == [
        {"type": "function", "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"}}
    ]
    for response in (first, second):
        charged_row(response)


def test_parallel_calls_sent_back_are_one_assistant_message(sdk, bridged):
    calls = [
        {
            "type": "function_call",
            "call_id": f"call_{city}",
            "name": "get_weather",
            "arguments": json.dumps({"city": city}),
        }
        for city in ("Oslo", "Rome")
    ]
    outputs = [
        {"type": "function_call_output", "call_id": f"call_{city}", "output": weather_report(city)}
        for city in ("Oslo", "Rome")
    ]
    question = {"role": "user", "content": "Weather in Oslo and Rome?"}
    response = sdk.responses.create(
        model=BRIDGE_MODEL, input=[question, *calls, *outputs], tools=[WEATHER_TOOL]
    )
    assert response.output_text.startswith("The get_weather tool returned:")
    messages = provider_calls(bridged, CHAT)[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_Oslo", "call_Rome"]


def test_an_image_in_the_input(sdk, bridged):
    image = "data:image/png;base64,iVBORw0KGgo="
    content = [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": image, "detail": "low"},
    ]
    response = sdk.responses.create(
        model=BRIDGE_MODEL, input=[{"role": "user", "content": content}]
    )
    assert response.output_text == "Echo: What is in this picture?"
    (sent,) = provider_calls(bridged, CHAT)
    assert sent["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": image, "detail": "low"},
    }
    charged_row(response)


@pytest.mark.parametrize("streamed", [False, True])
def test_structured_output(sdk, bridged, streamed):
    body = {"model": BRIDGE_MODEL, "input": "The weather in Rome, please.", "text_format": Forecast}
    if streamed:
        with sdk.responses.stream(**body) as stream:
            response = stream.get_final_response()
    else:
        response = sdk.responses.parse(**body)
    assert isinstance(response.output_parsed, Forecast)
    sent = provider_calls(bridged, CHAT)[-1]
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "Forecast"
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert response.text.format.type == "json_schema"
    charged_row(response)


@pytest.mark.parametrize("streamed", [False, True])
def test_reasoning_effort_and_reasoning_tokens(sdk, bridged, streamed):
    bridged.reasoning_tokens = 7
    response = create(
        sdk, streamed, model=BRIDGE_REASONER, input="Think about it", reasoning={"effort": "low"}
    )
    assert response.reasoning.effort == "low"
    assert response.usage.output_tokens_details.reasoning_tokens == 7
    sent = provider_calls(bridged, CHAT)[-1]
    assert sent["reasoning_effort"] == "low" and "reasoning" not in sent
    charged_row(response, BRIDGE_REASONER)


def test_refusals_before_any_call(client, auth, sdk, bridged):
    """The endpoint's 400s and the translation's: refusal rows, nothing sent upstream."""
    cases = [
        ({"previous_response_id": "resp_1"}, STATELESS_MESSAGE),
        ({"reasoning": {"effort": "low"}}, "Model does not support reasoning effort 'low'"),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}
                ]
            },
            "'input_image' with 'file_id' is not supported by this provider",
        ),
    ]
    for extra, message in cases:
        body = {"model": BRIDGE_MODEL, "input": "hi", **extra}
        response = client.post("/v1/responses", json=body, headers=auth)
        assert error(response, 400) == message
    with pytest.raises(openai.BadRequestError):  # the SDK's own error for the 400
        sdk.responses.create(model=BRIDGE_MODEL, input="hi", previous_response_id="resp_x")
    assert bridged.requests == []
    wait_for_ledger(len(cases) + 1)
    assert len(refusal_codes()) == len(cases) + 1


def test_provider_statuses_as_the_spec_maps_them(client, auth, bridged):
    for status, expected in ((400, 400), (404, 404), (429, 503), (500, 503), (418, 500)):
        bridged.fail_next(status)
        response = client.post(
            "/v1/responses", json={"model": BRIDGE_MODEL, "input": "hi"}, headers=auth
        )
        assert response.status_code == expected, (status, response.text)
        assert "openai" not in response.text.lower()


def test_in_stream_error_event_and_a_dropped_stream(sdk, bridged):
    bridged.stream_fail_after = 2
    bridged.stream_fail_mode = "error_event"
    seen = list(sdk.responses.create(model=BRIDGE_MODEL, input="hello there", stream=True))
    assert [event.sequence_number for event in seen] == list(range(len(seen)))
    assert seen[-1].type == "error" and "response.completed" not in [e.type for e in seen]
    assert seen[-1].code == "server_error"
    bridged.stream_fail_mode = "drop"
    bridged.stream_fail_after = 3
    seen = list(sdk.responses.create(model=BRIDGE_MODEL, input="hello there", stream=True))
    assert seen[-1].type == "error" and seen[-1].message == "Service temporarily unavailable"
    wait_for_ledger(2)
    assert list(Transaction.objects.values_list("status_code", "credits")) == [(503, 0), (503, 0)]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_content_filter_refusal_is_an_incomplete_answer_charged_at_its_usage(
    client, auth, bridged, streamed
):
    """A provider's refusal (the contract's `finish_reason: content_filter` and `refusal`):
    200, `incomplete` with reason `content_filter`, the refusal as a `refusal` part."""
    usage = contract_usage(prompt=12, completion=6)
    refusal = "I can't help with that."
    if streamed:
        chunks = ChatChunks("chatcmpl-refused", "gpt-4o-mini")
        body = chunks.refusal(refusal) + chunks.finish("content_filter") + chunks.usage(usage)
        bridged.fail_next(200, body + chunks.done(), headers={"Content-Type": "text/event-stream"})
    else:
        message = {"refusal": refusal}
        answer = chat_completion(
            answer_id="chatcmpl-refused",
            model="gpt-4o-mini",
            created=1,
            message=message,
            finish_reason="content_filter",
            usage=usage,
        )
        bridged.fail_next(200, answer)
    request = {"model": BRIDGE_MODEL, "input": "something refused", "stream": streamed}
    response = client.post("/v1/responses", json=request, headers=auth)
    assert response.status_code == 200
    if streamed:
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1].startswith("event: response.incomplete\n")
        final = json.loads(events[-1].split("data: ", 1)[1])["response"]
    else:
        final = response.json()
    assert (final["status"], final["incomplete_details"]) == (
        "incomplete",
        {"reason": "content_filter"},
    )
    (item,) = final["output"]
    assert item["content"] == [{"type": "refusal", "refusal": refusal}]
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.prompt_tokens, row.completion_tokens) == (200, 12, 6)
    assert row.credits == math.ceil(12 * BRIDGE_COST["prompt"] + 6 * BRIDGE_COST["completion"])


def test_a_stream_without_usage_completes_and_is_recorded_at_zero(client, auth, bridged, caplog):
    logger = logging.getLogger("gateway")  # it does not propagate: caplog listens on it
    logger.addHandler(caplog.handler)
    try:
        _stream_without_usage(client, auth, bridged)
    finally:
        logger.removeHandler(caplog.handler)
    assert "ended without usage; recorded at zero cost" in caplog.text


def _stream_without_usage(client, auth, bridged):
    chunks = ChatChunks("chatcmpl-nousage", "gpt-4o-mini")
    body = chunks.text("Hi") + chunks.finish("stop") + chunks.done()
    bridged.fail_next(200, body, headers={"Content-Type": "text/event-stream"})
    request = {"model": BRIDGE_MODEL, "input": "hi", "stream": True}
    response = client.post("/v1/responses", json=request, headers=auth)
    final = json.loads([e for e in response.text.split("\n\n") if e][-1].split("data: ", 1)[1])
    assert (final["type"], final["response"]["usage"]) == ("response.completed", None)
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (200, 0)


@pytest.mark.parametrize(
    "stream",
    [
        b"data: not json\n\n",  # garbage
        b'data: {"choices": {"delta": 1}}\n\n',  # a wrong shape
        b"data: " + b"x" * (256 * 1024),  # an event that never ends, past the event cap
    ],
    ids=["garbage", "wrong-shape", "endless-event"],
)
def test_garbage_and_oversized_chat_streams_end_with_the_in_stream_error(
    client, auth, bridged, settings, stream
):
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "event": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    bridged.fail_next(200, stream, headers={"Content-Type": "text/event-stream"})
    body = {"model": BRIDGE_MODEL, "input": "hi", "stream": True}
    response = client.post("/v1/responses", json=body, headers=auth)
    assert response.status_code == 200
    (event,) = [e for e in response.text.split("\n\n") if e]
    assert event.startswith("event: error\ndata: ")
    assert json.loads(event.split("data: ", 1)[1])["message"] == "Service temporarily unavailable"
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")


# --- the OpenAI Agents SDK --------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_tool_loop(gateway, api_key, bridged, streamed):
    agents_sdk()
    from agents.items import ToolCallItem, ToolCallOutputItem

    from tests.clients.test_clients_agents import run as run_agent

    result, calls = run_agent(
        gateway,
        api_key,
        BRIDGE_MODEL,
        "What is the weather in Berlin?",
        tools=["get_weather"],
        streamed=streamed,
    )
    assert len(calls) == 1 and valid_weather_args(calls[0])
    kinds = [type(item) for item in result.new_items]
    assert ToolCallItem in kinds and ToolCallOutputItem in kinds
    assert "returned" in result.final_output
    sent = provider_calls(bridged, CHAT)
    assert len(sent) == 2 and sent[1]["messages"][-1]["role"] == "tool"
    ids = [raw.response_id for raw in result.raw_responses]
    assert_charged(2, "responses", answer_ids=ids, model=BRIDGE_MODEL)


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_structured_output(gateway, api_key, bridged, streamed):
    agents_sdk()
    from tests.clients.test_clients_agents import run as run_agent

    result, _ = run_agent(
        gateway,
        api_key,
        BRIDGE_MODEL,
        "The weather in Rome, please.",
        output_type=Forecast,
        streamed=streamed,
    )
    assert isinstance(result.final_output, Forecast)
    (sent,) = provider_calls(bridged, CHAT)
    assert sent["response_format"]["type"] == "json_schema"
    assert_charged(1, "responses", answer_ids=[result.raw_responses[0].response_id])
