"""The official openai SDK (the pinned `openai`, the `dev` extra) as an application drives it,
against the live gateway and the OpenAI simulator: the model list and `models.retrieve`, the
message the SDK shows for a 422, a multi-turn Responses conversation continued statelessly
from the answers' own output items, and structured output through the SDK's `parse` helpers.
The endpoints' contracts are tested in their own files; these are the flows."""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel

from licensing.models import Transaction
from tests.client_helpers import (
    WEATHER_SCHEMA,
    assert_charged,
    provider_calls,
    valid_weather_args,
    weather_report,
)

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
# The default catalog serves it through the aggregator only.
LLAMA = "meta-llama/llama-3.1-8b-instruct"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": WEATHER_SCHEMA,
    "strict": True,
}


class Answer(BaseModel):
    city: str
    temperature_c: int
    sunny: bool


# --- the model list --------------------------------------------------------------------------


def test_models_list_and_retrieve_show_only_what_the_caller_can_use(sdk, catalog):
    from catalog.services import connection_configure
    from core.localcache import clear_all

    # A fresh install: the aggregator's connection has no key, and no cloud connection exists.
    connection_configure(
        provider_slug="aggregator", base_url=catalog["aggregator"].base_url, api_key=""
    )
    clear_all()

    listed = {model.id: model for model in sdk.models.list()}
    assert {MINI, "o4-mini", "text-embedding-3-small", "gpt-image-1"} <= set(listed)
    assert LLAMA not in listed  # its only connection has no credentials
    assert "amazon.titan-embed-text-v2:0" not in listed  # no cloud connection at all

    model = sdk.models.retrieve(MINI)
    assert model.model_dump() == listed[MINI].model_dump()
    assert (model.id, model.object) == (MINI, "model")

    for unusable in (LLAMA, "no-such-model"):
        with pytest.raises(openai.NotFoundError) as raised:
            sdk.models.retrieve(unusable)
        assert raised.value.status_code == 404
        assert "Connection" not in str(raised.value)  # the operator's side is for the log
    assert not Transaction.objects.filter(credits__gt=0).exists()


def test_models_list_follows_the_license_policy(gateway, catalog, make_license, make_key):
    embeddings_only = make_license(
        name="embeddings-only", policy={"version": 1, "services": {"embeddings": {}}}
    )
    sdk = openai.OpenAI(
        api_key=make_key(embeddings_only), base_url=gateway.url + "/v1", max_retries=0
    )
    listed = {model.id: model for model in sdk.models.list()}
    assert "text-embedding-3-small" in listed
    assert not {MINI, "o4-mini", "gpt-image-1"} & set(listed)
    for model in listed.values():
        assert "embeddings" in model.model_extra["supported_features"], model
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve(MINI)


# --- the 422 the SDK shows ---------------------------------------------------------------------


def test_embeddings_default_call_says_what_to_do(sdk, catalog):
    # The SDK sends encoding_format="base64" unless told; the spec accepts only float.
    with pytest.raises(openai.UnprocessableEntityError) as raised:
        sdk.embeddings.create(model="text-embedding-3-small", input="hello")
    shown = str(raised.value)
    assert "encoding_format" in shown and 'encoding_format="float"' in shown, shown
    assert raised.value.code == "literal_error" and raised.value.param == "encoding_format"
    assert not provider_calls(catalog["direct"], "/v1/embeddings")
    assert not Transaction.objects.filter(credits__gt=0).exists()

    result = sdk.embeddings.create(
        model="text-embedding-3-small", input="hello", encoding_format="float"
    )
    assert len(result.data[0].embedding) == 1536
    assert_charged(1, "embeddings", model="text-embedding-3-small")


# --- a Responses conversation continued from its own output ------------------------------------


def _function_calls(response):
    return [item for item in response.output if item.type == "function_call"]


def test_responses_conversation_sends_the_answers_back_as_input(sdk, catalog):
    """The stateless way to continue: every turn sends the previous answers' `output` items
    (as the SDK parsed them, every key included) back in `input`, with `include` as the SDK
    lets a caller pass it."""
    history: list = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = sdk.responses.create(model=MINI, input=history, tools=[WEATHER_TOOL], include=[])
    calls = _function_calls(first)
    assert len(calls) == 1 and calls[0].name == "get_weather"
    city = valid_weather_args(calls[0].arguments)["city"]

    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append(
        {
            "type": "function_call_output",
            "call_id": calls[0].call_id,
            "output": weather_report(city),
        }
    )
    second = sdk.responses.create(model=MINI, input=history, tools=[WEATHER_TOOL])
    assert not _function_calls(second) and second.output_text

    # The text answer goes back too: a message item with its id, status and output_text parts
    # (annotations, logprobs), then a question the model answers without a tool.
    history += [item.model_dump() for item in second.output]
    history.append({"role": "user", "content": "Thanks. Say it in one word."})
    third = sdk.responses.create(model=MINI, input=history, include=None)
    assert third.output_text

    sent = provider_calls(catalog["direct"], "/v1/responses")
    assert len(sent) == 3 and sent[2]["input"][: len(sent[1]["input"])] == sent[1]["input"]
    assert_charged(3, "responses", answer_ids=[first.id, second.id, third.id], model=MINI)


def test_responses_stream_then_continue_from_its_final_answer(sdk, catalog):
    question = [{"role": "user", "content": "What is the weather in Oslo?"}]
    with sdk.responses.stream(model=MINI, input=question, tools=[WEATHER_TOOL]) as stream:
        events = [event.type for event in stream]
        first = stream.get_final_response()
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in events
    (call,) = _function_calls(first)
    city = valid_weather_args(call.arguments)["city"]

    # The SDK's own objects go back as they are (it serializes them: a streamed final answer's
    # items also carry SDK-side fields such as `parsed_arguments`, which are not the API's).
    history = question + list(first.output)
    history.append(
        {"type": "function_call_output", "call_id": call.call_id, "output": weather_report(city)}
    )
    second = sdk.responses.create(model=MINI, input=history, tools=[WEATHER_TOOL])
    assert second.output_text
    assert_charged(2, "responses", answer_ids=[first.id, second.id])


# --- structured output through the SDK's parse helpers ----------------------------------------


def test_chat_completions_parse_returns_the_model(sdk, catalog):
    completion = sdk.chat.completions.parse(
        model=MINI,
        messages=[{"role": "user", "content": "Weather in Rome as JSON."}],
        response_format=Answer,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Answer)
    sent = provider_calls(catalog["direct"], "/v1/chat/completions")[0]
    assert sent["response_format"]["type"] == "json_schema"
    assert_charged(1, "chat_completions", answer_ids=[completion.id])


def test_responses_parse_returns_the_model(sdk, catalog):
    response = sdk.responses.parse(
        model=MINI,
        input=[{"role": "user", "content": "Weather in Rome as JSON."}],
        text_format=Answer,
    )
    assert isinstance(response.output_parsed, Answer)
    assert_charged(1, "responses", answer_ids=[response.id])
