"""`openai_compatible` end to end: a keyless vLLM-style server added by the operator commands
(add_provider, configure_connection without a key, sync_models with prices), then the openai SDK
through the live gateway: chat streamed and not, a tool loop, structured output, /v1/responses
translated to chat completions (the bridge) or the server's own (native, stateless), a server
that reports usage unasked (stream_usage: always), its errors; each row at usage x price."""

from __future__ import annotations

import json
from io import StringIO

import openai
import pytest
from django.core.management import call_command

from catalog.models import Model
from catalog.services import connection_configure
from core.localcache import clear_all
from inference.billing import Usage, credits_for
from inference.endpoints.responses import STATELESS_MESSAGE
from licensing.models import Transaction
from tests.kit import error, wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
HELLO = [{"role": "user", "content": "hello big world"}]
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["title", "year"],
    "additionalProperties": False,
}
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_book",
        "description": "Look up a book by its title",
        "parameters": {
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
    },
}


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def synced(campus_catalog):
    """The server's models in the catalog, priced once for all by sync_models."""
    out = run("sync_models", "campus", "--price-input", "0.2", "--price-output", "0.6")
    assert f"serving: {LLAMA}, mistral-small" in out
    clear_all()
    return campus_catalog["campus"]


def rows(count: int) -> list[Transaction]:
    wait_for_ledger(count)
    return list(Transaction.objects.order_by("id"))


def billed(row: Transaction) -> int:
    usage = Usage(prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens)
    return credits_for(Model.objects.get(model_id=row.billed_model).cost, usage)


def native(fake):
    fake.native_responses = True
    connection_configure(
        provider_slug="campus", base_url=fake.base_url, options={"responses_api": "native"}
    )
    clear_all()


def test_sync_models_then_chat_keyless(sdk, synced):
    answer = sdk.chat.completions.create(
        model=LLAMA, messages=HELLO, max_completion_tokens=50, user="u1", metadata={"k": "v"}
    )
    assert answer.choices[0].message.content == "Echo: hello big world"
    sent = synced.last
    assert sent.path == "/v1/chat/completions" and "authorization" not in sent.headers
    assert sent.json == {"model": LLAMA, "messages": HELLO, "max_tokens": 50}
    (row,) = rows(1)
    assert (row.provider, row.billed_model, row.status_code) == ("campus", LLAMA, 200)
    assert row.credits == billed(row) == answer.usage.model_extra["credits_used"] > 0


def test_stream_asks_for_usage_and_is_billed(sdk, synced):
    chunks = list(sdk.chat.completions.create(model="mistral-small", messages=HELLO, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello big world"
    assert synced.last.json["stream_options"] == {"include_usage": True}
    (row,) = rows(1)
    assert row.credits == billed(row) > 0
    assert row.completion_tokens == chunks[-1].usage.completion_tokens


def test_a_server_that_always_reports_usage_gets_no_stream_options(sdk, synced):
    connection_configure(
        provider_slug="campus", base_url=synced.base_url, options={"stream_usage": "always"}
    )
    clear_all()
    chunks = list(sdk.chat.completions.create(model=LLAMA, messages=HELLO, stream=True))
    assert "stream_options" not in synced.last.json
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (row,) = rows(1)
    assert row.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_tool_loop_and_structured_output(sdk, synced, stream):
    ask = [{"role": "user", "content": "Look up the book Dune"}]
    if stream:
        chunks = list(
            sdk.chat.completions.create(model=LLAMA, messages=ask, tools=[LOOKUP], stream=True)
        )
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        call_id, arguments = calls[0].id, "".join(tc.function.arguments or "" for tc in calls)
    else:
        first = sdk.chat.completions.create(model=LLAMA, messages=ask, tools=[LOOKUP])
        call = first.choices[0].message.tool_calls[0]
        call_id, arguments = call.id, call.function.arguments
    assert "title" in json.loads(arguments)
    assistant = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "lookup_book", "arguments": arguments},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": call_id, "content": "Frank Herbert, 1965"}
    final = sdk.chat.completions.create(
        model=LLAMA, messages=[*ask, assistant, result], tools=[LOOKUP]
    )
    assert final.choices[0].message.content == "The lookup_book tool returned: Frank Herbert, 1965"
    structured = sdk.chat.completions.create(
        model=LLAMA,
        messages=HELLO,
        response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": SCHEMA}},
    )
    assert set(json.loads(structured.choices[0].message.content)) == {"title", "year"}
    for row in rows(3):
        assert row.credits == billed(row)


def respond(sdk, stream: bool):
    """A /v1/responses answer, streamed (the final event's response) or not."""
    if not stream:
        return sdk.responses.create(model=LLAMA, input="hello big world")
    events = list(sdk.responses.create(model=LLAMA, input="hello big world", stream=True))
    assert events[-1].type == "response.completed"
    return events[-1].response


@pytest.mark.parametrize("stream", [False, True])
def test_responses_translated_to_chat(sdk, synced, stream):
    answer = respond(sdk, stream)
    assert answer.output_text == "Echo: hello big world"
    assert synced.last.path == "/v1/chat/completions"  # the server has no Responses API
    (row,) = rows(1)
    assert (row.service, row.credits) == ("responses", billed(row))


@pytest.mark.parametrize("stream", [False, True])
def test_responses_native_and_stateless(sdk, synced, stream):
    native(synced)
    answer = respond(sdk, stream)
    assert answer.output_text == "Echo: hello big world"
    assert synced.last.path == "/v1/responses" and synced.last.json["store"] is False
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.responses.create(model=LLAMA, input="again", previous_response_id=answer.id)
    assert raised.value.body["message"] == STATELESS_MESSAGE
    rows_ = rows(2)
    assert rows_[0].credits == billed(rows_[0]) > 0


def test_errors(client, auth, synced):
    body = {"model": LLAMA, "messages": HELLO}
    synced.fail_next(400, {"object": "error", "message": "max_tokens is too large", "code": 400})
    assert error(client.post("/v1/chat/completions", json=body, headers=auth), 400) == (
        "max_tokens is too large"
    )
    synced.fail_next(500)
    assert client.post("/v1/chat/completions", json=body, headers=auth).status_code == 503
    native(synced)
    synced.native_responses = False  # set native, but the server has none: its 404
    response = client.post("/v1/responses", json={"model": LLAMA, "input": "x"}, headers=auth)
    assert error(response, 404) == "Not Found"
    assert [r.credits for r in rows(3)] == [0, 0, 0]


def test_unpriced_models_are_listed_but_not_served(client, auth, campus_catalog):
    out = run("sync_models", "campus")
    assert "Listed without a price, inactive" in out
    clear_all()
    response = client.post(
        "/v1/chat/completions", json={"model": LLAMA, "messages": HELLO}, headers=auth
    )
    assert response.status_code == 400
    assert campus_catalog["campus"].last.path == "/v1/models"  # never called for a chat


ENDLESS = b"data: " + b"x" * (256 * 1024)  # an event that never ends
GARBAGE = b"data: {not json\n\n"  # and no [DONE]: the stream is broken


@pytest.mark.parametrize("kind", ["azure", "campus"])
@pytest.mark.parametrize("body", [ENDLESS, GARBAGE], ids=["endless", "garbage"])
def test_streams_are_bounded(client, auth, request, settings, kind, body):
    """Both kinds relay OpenAI's chunks as they come: the relay's bounds hold for them (an event
    over its cap, a stream without its end) and the row is the in-stream 503, not charged."""
    fakes = request.getfixturevalue("azure_catalog" if kind == "azure" else "synced")
    fake = fakes["azure"] if kind == "azure" else fakes
    caps = {**settings.GATEWAY["ANSWER_MAX_BYTES"], "event": 64 * 1024}
    settings.GATEWAY = {**settings.GATEWAY, "ANSWER_MAX_BYTES": caps}
    fake.fail_next(200, body, headers={"Content-Type": "text/event-stream"})
    model = "gpt-4o-mini" if kind == "azure" else LLAMA
    response = client.post(
        "/v1/chat/completions",
        json={"model": model, "messages": HELLO, "stream": True},
        headers={**auth, "X-Service-Provider": kind},
    )
    assert response.status_code == 200
    assert response.text.endswith(
        'data: {"error":{"message":"Service temporarily unavailable","type":"server_error"}}'
        "\n\ndata: [DONE]\n\n"
    )
    (row,) = rows(1)
    assert (row.status_code, row.credits, row.error_code) == (503, 0, "stream_failed")
