"""POST /v1/chat/completions and POST /v1/responses, streamed and not."""

from __future__ import annotations

import json
import math
import time

import httpx
import openai
import pytest

from catalog.models import Connection
from licensing.models import Transaction, Wallet
from tests.kit import error, wait_for_ledger, wait_until
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
HELLO = [{"role": "user", "content": "hello big world"}]


def chat(client, auth, body, **headers):
    return client.post("/v1/chat/completions", json=body, headers={**auth, **headers})


def respond(client, auth, body, **headers):
    return client.post("/v1/responses", json=body, headers={**auth, **headers})


def mini_credits(prompt, completion, cached=0):
    return math.ceil((prompt - cached) * 0.15 + cached * 0.075 + completion * 0.6)


# --- chat completions ------------------------------------------------------------------------


def test_sdk_chat(sdk, catalog):
    result = sdk.chat.completions.create(model=MINI, messages=HELLO)
    assert result.choices[0].message.content == "Echo: hello big world"
    assert result.model == "gpt-4o-mini-2024-07-18"  # echoed from the provider
    usage = result.usage
    assert usage.model_extra["credits_used"] == mini_credits(
        usage.prompt_tokens, usage.completion_tokens
    )
    row = Transaction.objects.get()
    assert (row.service, row.billed_model, row.status_code) == ("chat_completions", MINI, 200)
    assert (row.prompt_tokens, row.completion_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    sent = catalog["direct"].last.json
    assert sent == {"model": MINI, "messages": HELLO}


def test_sdk_chat_stream_is_billed_like_non_stream(sdk, catalog):
    plain = sdk.chat.completions.create(model=MINI, messages=HELLO)
    chunks = list(sdk.chat.completions.create(model=MINI, messages=HELLO, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1 and usage_chunks[0].usage.prompt_tokens > 0
    sent = catalog["direct"].last.json
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    wait_for_ledger(2)  # a stream's row is written as the stream ends
    rows = list(Transaction.objects.order_by("created_at").values_list("credits", "status_code"))
    assert rows[0] == rows[1] and rows[1][1] == 200 and rows[1][0] > 0


def test_stream_with_client_usage_option(client, auth, catalog):
    body = {
        "model": MINI,
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = chat(client, auth, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")
    wait_for_ledger(1)


def test_chat_via_aggregator(client, auth, catalog):
    response = chat(
        client, auth, {"model": MINI, "messages": HELLO}, **{"X-Service-Provider": "aggregator"}
    )
    assert response.status_code == 200
    body = response.json()
    assert "provider" not in body  # the serving vendor's name is not passed on
    assert catalog["aggregator"].last.json["model"] == "openai/gpt-4o-mini"
    assert Transaction.objects.get().provider == "aggregator"


def test_aggregator_owned_model_routes_without_header(client, auth, catalog):
    response = chat(client, auth, {"model": "meta-llama/llama-3.1-8b-instruct", "messages": HELLO})
    assert response.status_code == 200
    assert catalog["aggregator"].last.json["model"] == "meta-llama/llama-3.1-8b-instruct"
    assert catalog["direct"].requests == []


def test_tool_formats_and_structured_output(client, auth, catalog):
    body = {
        "model": MINI,
        "messages": HELLO,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "d",
                    "parameters": {"type": "object"},
                },
            },
            {"name": "search", "description": "s", "input_schema": {"type": "object"}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object"}},
        },
    }
    assert chat(client, auth, body).status_code == 200
    sent = catalog["direct"].last.json
    assert sent["tools"][1] == {
        "type": "function",
        "function": {"name": "search", "parameters": {"type": "object"}, "description": "s"},
    }
    assert sent["response_format"]["json_schema"]["schema"] == {"type": "object"}
    for choice in ("auto", "required", "none"):
        assert chat(client, auth, {**body, "tool_choice": choice}).status_code == 200


@pytest.mark.parametrize(
    "patch,type_,loc",
    [
        ({"temperature": 2.5}, "less_than_equal", ["body", "temperature"]),
        ({"temperature": -0.1}, "greater_than_equal", ["body", "temperature"]),
        ({"top_p": 1.5}, "less_than_equal", ["body", "top_p"]),
        ({"frequency_penalty": -3}, "greater_than_equal", ["body", "frequency_penalty"]),
        ({"presence_penalty": 2.5}, "less_than_equal", ["body", "presence_penalty"]),
        ({"max_tokens": 0}, "greater_than_equal", ["body", "max_tokens"]),
        ({"max_completion_tokens": 0}, "greater_than_equal", ["body", "max_completion_tokens"]),
        ({"unknown": 1}, "extra_forbidden", ["body", "unknown"]),
        ({"stream": "yes"}, "bool_type", ["body", "stream"]),
        ({"tool_choice": "sometimes"}, None, None),
        ({"reasoning": {"effort": "extreme"}}, "literal_error", ["body", "reasoning", "effort"]),
        (
            {"reasoning": {"effort": "low", "extra": 1}},
            "extra_forbidden",
            ["body", "reasoning", "extra"],
        ),
        ({"response_format": {"type": "xml"}}, "union_tag_invalid", ["body", "response_format"]),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, None, None),
        ({"messages": []}, "too_short", ["body", "messages"]),
        (
            {"messages": [{"role": "robot", "content": "x"}]},
            "union_tag_invalid",
            ["body", "messages", 0],
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]},
            None,
            None,
        ),
    ],
)
def test_chat_validation(client, auth, catalog, patch, type_, loc):
    response = chat(client, auth, {"model": MINI, "messages": HELLO, **patch})
    assert response.status_code == 422, response.text
    items = response.json()["detail"]
    if type_ is not None:
        assert any(i["type"] == type_ and i["loc"][: len(loc)] == loc for i in items), items
    assert catalog["direct"].requests == []


def test_reasoning_and_reasoning_effort_are_exclusive(client, auth, catalog):
    body = {
        "model": "o4-mini",
        "messages": HELLO,
        "reasoning": {"effort": "low"},
        "reasoning_effort": "low",
    }
    item = chat(client, auth, body).json()["detail"][0]
    assert item["type"] == "value_error" and item["loc"] == ["body"]
    assert item["msg"].startswith("Value error, ")
    body = {
        "model": "o4-mini",
        "input": "hi",
        "reasoning": {"effort": "low"},
        "reasoning_effort": "low",
    }
    item = respond(client, auth, body).json()["detail"][0]
    assert item["type"] == "value_error" and item["msg"].startswith("Value error, ")


def test_reasoning_effort_per_model(client, auth, catalog):
    message = error(
        chat(client, auth, {"model": MINI, "messages": HELLO, "reasoning_effort": "low"}), 400
    )
    assert message == "Model does not support reasoning effort 'low'"
    assert catalog["direct"].requests == []
    ok = chat(
        client,
        auth,
        {"model": "o4-mini", "messages": HELLO, "reasoning": {"effort": "high", "exclude": True}},
    )
    assert ok.status_code == 200
    assert catalog["direct"].last.json["reasoning_effort"] == "high"
    assert "reasoning" not in catalog["direct"].last.json
    assert error(
        chat(client, auth, {"model": "o4-mini", "messages": HELLO, "reasoning_effort": "none"}), 400
    ) == ("Model does not support reasoning effort 'none'")


@pytest.mark.parametrize(
    "part,modality",
    [
        ({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}, "audio"),
        ({"type": "video_url", "video_url": {"url": "https://example.edu/v.mp4"}}, "video"),
        ({"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}}, "file"),
    ],
)
def test_modality_mismatch(client, auth, catalog, part, modality):
    body = {
        "model": MINI,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}],
    }
    assert error(chat(client, auth, body), 400) == (
        f"No available provider for model '{MINI}' supports {modality} input"
    )
    assert catalog["direct"].requests == []


def test_audio_input_on_an_audio_model(client, auth, catalog):
    part = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    body = {"model": "gpt-4o-audio-preview", "messages": [{"role": "user", "content": [part]}]}
    response = chat(client, auth, body)
    assert response.status_code != 400 or "supports" not in response.text
    assert catalog["direct"].last.json["messages"][0]["content"][0] == part


def test_image_input_is_accepted_on_vision_models(client, auth, catalog):
    part = {"type": "image_url", "image_url": {"url": "https://example.edu/cat.png"}}
    body = {
        "model": MINI,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what"}, part]}],
    }
    assert chat(client, auth, body).status_code == 200


# --- policy aliases and guardrails ---------------------------------------------------------


def test_policy_aliases(client, catalog, make_license, make_key):
    policy = {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {"max_tokens": {"max": 100}, "reasoning_effort": {"allowed": ["low"]}}
            },
            "responses": {"params": {"reasoning_effort": {"allowed": ["low"]}}},
        },
    }
    auth = {"Authorization": f"Bearer {make_key(make_license(name='aliases', policy=policy))}"}
    response = chat(
        client, auth, {"model": "o4-mini", "messages": HELLO, "max_completion_tokens": 500}
    )
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "'max_completion_tokens' must be <= 100",
        "code": "policy_denied",
        "param": "max_completion_tokens",
    }
    response = chat(client, auth, {"model": "o4-mini", "messages": HELLO, "max_tokens": 101})
    assert response.json()["error"]["param"] == "max_tokens"
    response = chat(
        client, auth, {"model": "o4-mini", "messages": HELLO, "reasoning": {"effort": "high"}}
    )
    assert response.json()["error"] == {
        "message": "'reasoning.effort' must be one of: [low]",
        "code": "policy_denied",
        "param": "reasoning.effort",
    }
    response = respond(
        client, auth, {"model": "o4-mini", "input": "x", "reasoning_effort": "medium"}
    )
    assert response.json()["error"]["param"] == "reasoning_effort"
    assert (
        chat(
            client,
            auth,
            {
                "model": "o4-mini",
                "messages": HELLO,
                "max_completion_tokens": 50,
                "reasoning_effort": "low",
            },
        ).status_code
        == 200
    )


def guarded(make_license, make_key, limit=None):
    license = make_license(name="guarded", limit=limit)
    license.license_type.guardrails = {"output": {"patterns": ["(?i)forbidden fruit"]}}
    license.license_type.save()
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def test_output_guardrail_blocks_and_charges(client, catalog, make_license, make_key):
    license, auth = guarded(make_license, make_key, limit=1_000_000)
    catalog["direct"].reply_text = "Here is the Forbidden Fruit recipe"
    response = chat(client, auth, {"model": MINI, "messages": HELLO})
    assert error(response, 400) == "Request blocked by guardrail"
    row = Transaction.objects.get()
    assert row.status_code == 400 and row.credits > 0
    assert Wallet.objects.get().spent == row.credits


def test_output_guardrail_never_blocks_a_stream(client, catalog, make_license, make_key):
    _, auth = guarded(make_license, make_key)
    catalog["direct"].reply_text = "Here is the Forbidden Fruit recipe"
    response = chat(client, auth, {"model": MINI, "messages": HELLO, "stream": True})
    assert response.status_code == 200 and "Forbidden" in response.text
    response = respond(client, auth, {"model": MINI, "input": "hi"})
    assert error(response, 400) == "Request blocked by guardrail"


# --- streaming failures ----------------------------------------------------------------------


def sse_events(text):
    return [block for block in text.split("\n\n") if block]


PIN_DIRECT = {"X-Service-Provider": "direct"}  # no failover to the aggregator's row


def test_failures_before_the_stream_are_json(client, auth, catalog):
    catalog["direct"].fail_next(status=429)
    response = chat(
        client, {**auth, **PIN_DIRECT}, {"model": MINI, "messages": HELLO, "stream": True}
    )
    assert response.headers["content-type"] == "application/json"
    assert error(response, 503) == "Service temporarily unavailable"
    catalog["direct"].fail_next(
        status=400, body={"error": {"message": "Bad messages.", "type": "x"}}
    )
    assert (
        error(chat(client, auth, {"model": MINI, "messages": HELLO, "stream": True}), 400)
        == "Bad messages."
    )
    assert list(Transaction.objects.values_list("status_code", "credits")) == [
        (503, 0),
        (400, 0),
    ] or (sorted(Transaction.objects.values_list("status_code", "credits")) == [(400, 0), (503, 0)])


def test_chat_stream_failing_midway(client, auth, catalog):
    catalog["direct"].stream_fail_after = 3
    response = chat(client, auth, {"model": MINI, "messages": HELLO, "stream": True})
    assert response.status_code == 200
    events = sse_events(response.text)
    assert len(events) == 5  # three relayed chunks, the error, [DONE]
    assert (
        events[-2]
        == 'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}'
    )
    assert events[-1] == "data: [DONE]"
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (503, 0)


def test_chat_stream_error_event_from_the_aggregator(client, auth, catalog):
    catalog["aggregator"].stream_fail_after = 2
    catalog["aggregator"].stream_fail_mode = "error_event"
    response = chat(
        client,
        auth,
        {"model": MINI, "messages": HELLO, "stream": True},
        **{"X-Service-Provider": "aggregator"},
    )
    events = sse_events(response.text)
    assert events[-1] == "data: [DONE]"
    assert '"error"' in events[-2] and "server_error" in events[-2]


def test_sdk_sees_the_mid_stream_error(sdk, catalog):
    catalog["direct"].stream_fail_after = 2
    with pytest.raises(openai.APIError) as excinfo:
        for _ in sdk.chat.completions.create(model=MINI, messages=HELLO, stream=True):
            pass
    assert excinfo.value.message == "Service temporarily unavailable"


def test_stalled_stream_times_out_inside_the_stream(client, auth, catalog):
    connection = Connection.objects.get(provider__slug="direct")
    connection.timeout = 0.5
    connection.save()
    catalog["direct"].stream_stall_after = 2
    catalog["direct"].stream_stall_seconds = 5
    started = time.monotonic()
    response = chat(client, auth, {"model": MINI, "messages": HELLO, "stream": True})
    assert time.monotonic() - started < 4
    assert sse_events(response.text)[-1] == "data: [DONE]"
    assert "Service temporarily unavailable" in response.text
    # The gateway hung up on the stalled stream (counted before the next test's reset).
    wait_until(lambda: catalog["direct"].streams_abandoned, timeout=5, what="no abandoned stream")
    assert catalog["direct"].streams_abandoned == 1


def test_client_disconnect_cancels_the_upstream(gateway, auth, catalog, settings):
    settings.GATEWAY = {**settings.GATEWAY, "STREAM_USAGE_GRACE": 0.2}
    catalog["direct"].chunk_delay = 0.3
    catalog["direct"].stream_pieces = 40
    catalog["direct"].reply_text = " ".join(["word"] * 40)
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": MINI, "messages": HELLO, "stream": True},
            headers=auth,
        ) as response:
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if b'"content":"word' in received:
                    break
    wait_for_ledger(1)
    row = Transaction.objects.get()
    # Billed for what the provider produced before the upstream was closed (test_stream_billing).
    assert row.status_code == 499 and 0 < row.completion_tokens < 40 and row.credits > 0
    wait_until(lambda: catalog["direct"].streams_abandoned, timeout=5, what="no abandoned stream")
    assert catalog["direct"].streams_abandoned == 1


def test_chunks_are_relayed_as_they_arrive(gateway, auth, catalog):
    catalog["direct"].chunk_delay = 0.4
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        started = time.monotonic()
        with http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": MINI, "messages": HELLO, "stream": True},
            headers=auth,
        ) as response:
            first_at = None
            for _ in response.iter_raw():
                first_at = first_at or time.monotonic() - started
            total = time.monotonic() - started
    assert first_at < total / 2  # the first chunk came long before the last


# --- responses -------------------------------------------------------------------------------


def test_sdk_responses(sdk, catalog):
    result = sdk.responses.create(model=MINI, input="hello there")
    assert result.output_text == "Echo: hello there"
    assert result.usage.model_extra["credits_used"] == mini_credits(
        result.usage.input_tokens, result.usage.output_tokens
    )
    follow = sdk.responses.create(model=MINI, input="and again", previous_response_id=result.id)
    assert follow.output_text == "Echo: and again"
    assert catalog["direct"].last.json["previous_response_id"] == result.id
    assert Transaction.objects.filter(service="responses", status_code=200).count() == 2


def test_sdk_responses_stream(sdk, catalog):
    events = list(sdk.responses.create(model=MINI, input="hello there", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Echo: hello there"
    wait_for_ledger(1)
    row = Transaction.objects.get()
    final = events[-1].response.usage
    assert (
        row.credits == mini_credits(final.input_tokens, final.output_tokens)
        and row.status_code == 200
    )


def responses_error_event(sequence_number):
    data = (
        '{"type":"error","code":"server_error","message":"Service temporarily unavailable",'
        f'"param":null,"sequence_number":{sequence_number}}}'
    )
    return "event: error\ndata: " + data


def test_responses_stream_failing_midway(client, auth, catalog, sdk):
    catalog["direct"].stream_fail_after = 3
    response = respond(client, auth, {"model": MINI, "input": "hi", "stream": True})
    events = sse_events(response.text)
    assert len(events) == 4  # three relayed events (0, 1, 2), the error
    assert events[-1] == responses_error_event(3)
    assert "[DONE]" not in response.text
    catalog["direct"].stream_fail_after = 3
    seen = list(sdk.responses.create(model=MINI, input="hi", stream=True))
    assert [event.sequence_number for event in seen] == [0, 1, 2, 3]
    error = seen[-1]
    assert (error.type, error.code, error.message, error.param, error.sequence_number) == (
        "error",
        "server_error",
        "Service temporarily unavailable",
        None,
        3,
    )
    wait_for_ledger(2)
    assert list(Transaction.objects.values_list("status_code", "credits")) == [(503, 0), (503, 0)]


def test_responses_stream_failing_before_any_event(client, auth, catalog):
    """Nothing reached the client yet: the stream has not started, so the failure is the
    JSON 503 (and, unpinned, a failover: tests/providers/test_failover.py)."""
    catalog["direct"].stream_fail_after = 0
    response = respond(
        client, {**auth, **PIN_DIRECT}, {"model": MINI, "input": "hi", "stream": True}
    )
    assert response.headers["content-type"] == "application/json"
    assert error(response, 503) == "Service temporarily unavailable"
    wait_for_ledger(1)
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "provider_unavailable")


def test_responses_stream_failing_after_several_events(client, auth, catalog):
    catalog["direct"].stream_fail_after = 6  # within the text deltas
    response = respond(client, auth, {"model": MINI, "input": "hi there", "stream": True})
    events = sse_events(response.text)
    relayed = [json.loads(event.split("data: ", 1)[1]) for event in events[:-1]]
    assert [event["sequence_number"] for event in relayed] == list(range(6))
    assert relayed[-1]["type"] == "response.output_text.delta"
    assert events[-1] == responses_error_event(6)


def test_responses_stream_error_event_from_the_upstream(client, auth, catalog):
    """The aggregator's own error event: replaced by the gateway's, numbered in sequence."""
    catalog["aggregator"].stream_fail_after = 5
    catalog["aggregator"].stream_fail_mode = "error_event"
    response = respond(
        client,
        auth,
        {"model": MINI, "input": "hi", "stream": True},
        **{"X-Service-Provider": "aggregator"},
    )
    events = sse_events(response.text)
    assert len(events) == 6 and events[-1].startswith("event: error\ndata: ")
    assert json.loads(events[-1].split("data: ", 1)[1]) == {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error while processing your request. Sorry about that!",
        "param": None,
        "sequence_number": 5,
    }
    wait_for_ledger(1)
    assert Transaction.objects.get().status_code == 503


def test_previous_response_id_on_a_stateless_provider(client, auth, catalog):
    body = {"model": MINI, "input": "hi", "previous_response_id": "resp_123"}
    assert error(respond(client, auth, body, **{"X-Service-Provider": "aggregator"}), 400) == (
        "previous_response_id is not supported by this provider; "
        "send the full conversation in `input`."
    )
    assert catalog["aggregator"].requests == [] and refusal_codes() == ["provider_selection"]
    ok = respond(
        client, auth, {"model": MINI, "input": "hi"}, **{"X-Service-Provider": "aggregator"}
    )
    assert ok.status_code == 200
    assert catalog["aggregator"].last.path == "/api/v1/responses"


def test_responses_validation(client, auth, catalog):
    bad = [
        {"model": MINI},
        {"model": MINI, "input": []},
        {"model": MINI, "input": "x", "max_output_tokens": 0},
        {"model": MINI, "input": "x", "temperature": 3},
        {"model": MINI, "input": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"model": MINI, "input": [{"type": "mystery"}]},
        # The hosted web_search is served (test_responses_web_search); its preview is not.
        {"model": MINI, "input": "x", "tools": [{"type": "web_search_preview"}]},
        {"model": MINI, "input": "x", "text": {"format": {"type": "json_schema"}}},
    ]
    for body in bad:
        assert respond(client, auth, body).status_code == 422, body
    assert catalog["direct"].requests == []


def test_responses_modality_and_tools(client, auth, catalog):
    body = {
        "model": "meta-llama/llama-3.1-8b-instruct",
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "https://x.edu/a.png"}],
            }
        ],
    }
    assert error(respond(client, auth, body), 400) == (
        "No available provider for model 'meta-llama/llama-3.1-8b-instruct' supports image input"
    )
    body = {
        "model": MINI,
        "input": "x",
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "function", "name": "search"},
    }
    assert respond(client, auth, body).status_code == 200
    assert catalog["direct"].last.json["tools"] == [
        {"type": "function", "name": "search", "parameters": {"type": "object"}}
    ]
