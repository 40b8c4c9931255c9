"""`azure_openai` end to end: the openai SDK through the live gateway to the Azure fake, on both
URL styles: chat and /v1/responses, streamed and not, a tool loop, structured output, reasoning
effort, embeddings, an `eu`-tagged connection for a residency rule, failover from `direct`,
Azure's content filter (the prompt's 400, an answer cut short) and its errors; each ledger row
at the reported usage times the catalog's prices."""

from __future__ import annotations

import json

import openai
import pytest

from catalog.models import Model, Provider, ProviderModel
from catalog.services import connection_configure
from core.localcache import clear_all
from inference.billing import Usage, credits_for
from inference.providers import usage as usage_formats
from inference.providers.azure import CONTENT_FILTERED
from licensing.models import Transaction
from tests.fixtures_compat import AZURE_API_VERSION, AZURE_KEY, HELLO, WEATHER
from tests.kit import error, wait_for_ledger

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
AZURE = {"X-Service-Provider": "azure"}
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["title", "year"],
    "additionalProperties": False,
}


@pytest.fixture
def pinned(gateway, api_key):
    """The openai SDK through the gateway, every request pinned to `azure`."""
    return openai.OpenAI(
        api_key=api_key, base_url=gateway.url + "/v1", max_retries=0, default_headers=AZURE
    )


def billed(row: Transaction, cached: int = 0) -> int:
    """What the row should cost: its usage (the provider's report; `cached` of its prompt
    tokens read from the cache) at the catalog's prices of its model."""
    usage = Usage(
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        cached_tokens=cached,
    )
    return credits_for(Model.objects.get(model_id=row.billed_model).cost, usage)


def rows(count: int) -> list[Transaction]:
    wait_for_ledger(count)
    return list(Transaction.objects.order_by("id"))


def use_v1(fake):
    """The connection on the v1 API path (no api version)."""
    connection_configure(provider_slug="azure", base_url=fake.origin, options={"api_version": None})
    clear_all()


# --- chat completions ------------------------------------------------------------------------


def test_chat_on_the_classic_path(pinned, azure_catalog):
    answer = pinned.chat.completions.create(model=MINI, messages=HELLO, user="student-7")
    assert answer.choices[0].message.content == "Echo: hello big world"
    # Azure's filter annotations reach the client as Azure sends them (docs/providers.md).
    assert answer.model_extra["prompt_filter_results"][0]["content_filter_results"]
    sent = azure_catalog["azure"].last
    assert sent.path == "/openai/deployments/gpt-4o-mini/chat/completions"
    assert sent.query == {"api-version": AZURE_API_VERSION}
    assert sent.headers["api-key"] == AZURE_KEY and "authorization" not in sent.headers
    assert sent.json == {"model": MINI, "messages": HELLO, "user": "student-7"}
    (row,) = rows(1)
    assert (row.provider, row.connection, row.status_code) == ("azure", "default", 200)
    assert row.prompt_tokens == answer.usage.prompt_tokens > 0
    assert row.credits == billed(row) == answer.usage.model_extra["credits_used"]
    assert azure_catalog["direct"].requests == []


def test_stream_passes_the_prompt_filter_chunk_and_is_billed(pinned, azure_catalog):
    azure_catalog["azure"].cached_tokens = 2
    chunks = list(pinned.chat.completions.create(model=MINI, messages=HELLO, stream=True))
    assert chunks[0].choices == [] and chunks[0].model_extra["prompt_filter_results"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello big world"
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens == 2
    (row,) = rows(1)
    assert (row.provider, row.status_code) == ("azure", 200)
    assert row.upstream_id == chunks[1].id and row.upstream_id.startswith("chatcmpl-")
    assert row.credits == billed(row, cached=2) > 0
    assert row.completion_tokens == usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_tool_loop_with_parallel_results(pinned, azure_catalog, stream):
    use_v1(azure_catalog["azure"])
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    if stream:
        chunks = list(
            pinned.chat.completions.create(model=MINI, messages=ask, tools=[WEATHER], stream=True)
        )
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
        call_id, name = calls[0].id, calls[0].function.name
        arguments = "".join(tc.function.arguments or "" for tc in calls)
    else:
        first = pinned.chat.completions.create(model=MINI, messages=ask, tools=[WEATHER])
        assert first.choices[0].finish_reason == "tool_calls"
        call = first.choices[0].message.tool_calls[0]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert name == "get_weather" and "city" in json.loads(arguments)
    assert azure_catalog["azure"].last.path == "/openai/v1/chat/completions"
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}},
            {"id": "call_2", "type": "function", "function": {"name": name, "arguments": "{}"}},
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": call_id, "content": "18 degrees"},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny"},
    ]
    final = pinned.chat.completions.create(
        model=MINI, messages=ask + [assistant, *results], tools=[WEATHER]
    )
    assert final.choices[0].message.content.startswith("The get_weather tool returned:")
    for row in rows(2):
        assert row.credits == billed(row) and row.provider == "azure"


def test_structured_output_and_reasoning_effort(pinned, azure_catalog):
    answer = pinned.chat.completions.create(
        model=MINI,
        messages=HELLO,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "book", "schema": SCHEMA, "strict": True},
        },
    )
    document = json.loads(answer.choices[0].message.content)
    assert set(document) == {"title", "year"} and isinstance(document["year"], int)
    reasoning = pinned.chat.completions.create(
        model="o4-mini", messages=HELLO, reasoning_effort="high"
    )
    assert reasoning.choices[0].message.content == "Echo: hello big world"
    sent = azure_catalog["azure"].last
    assert sent.path == "/openai/deployments/o4-mini/chat/completions"
    assert sent.json["reasoning_effort"] == "high"
    for row in rows(2):
        assert row.credits == billed(row)


def test_images_in_the_input(pinned, azure_catalog):
    image = "data:image/png;base64,iVBORw0KGgo="
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    answer = pinned.chat.completions.create(
        model=MINI, messages=[{"role": "user", "content": content}]
    )
    assert answer.choices[0].message.content == "Echo: what is this"
    assert azure_catalog["azure"].last.json["messages"][0]["content"][1]["type"] == "image_url"


# --- /v1/responses and embeddings -------------------------------------------------------------


@pytest.mark.parametrize("v1", [False, True], ids=["classic", "v1"])
def test_responses_streamed_and_not(pinned, azure_catalog, v1):
    if v1:
        use_v1(azure_catalog["azure"])
    answer = pinned.responses.create(
        model=MINI,
        input="hello big world",
        text={"format": {"type": "json_schema", "name": "book", "schema": SCHEMA}},
    )
    assert set(json.loads(answer.output_text)) == {"title", "year"}
    path = "/openai/v1/responses" if v1 else "/openai/responses"
    assert azure_catalog["azure"].last.path == path
    assert azure_catalog["azure"].last.json["model"] == MINI
    events = list(pinned.responses.create(model=MINI, input="hello big world", stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Echo: hello big world"
    for row in rows(2):
        assert (row.service, row.provider) == ("responses", "azure")
        assert row.credits == billed(row) > 0


def test_embeddings(pinned, azure_catalog):
    vectors = pinned.embeddings.create(
        model="text-embedding-3-small", input=["a b", "c"], encoding_format="float"
    )
    assert len(vectors.data) == 2
    sent = azure_catalog["azure"].last
    assert sent.path == "/openai/deployments/text-embedding-3-small/embeddings"
    (row,) = rows(1)
    assert (row.service, row.provider, row.prompt_tokens) == ("embeddings", "azure", 3)


# --- the deployment, residency, failover --------------------------------------------------------


def test_deployment_map(pinned, azure_catalog):
    fake = azure_catalog["azure"]
    fake.deployments["mini-eu"] = MINI
    connection_configure(
        provider_slug="azure",
        base_url=fake.origin,
        options={"deployments": {MINI: "mini-eu"}},
    )
    clear_all()
    assert pinned.chat.completions.create(model=MINI, messages=HELLO).choices
    assert fake.last.path == "/openai/deployments/mini-eu/chat/completions"
    del fake.deployments["mini-eu"]  # the deployment is gone: Azure's 404 reaches the client
    with pytest.raises(openai.NotFoundError) as raised:
        pinned.chat.completions.create(model=MINI, messages=HELLO)
    assert "The API deployment for this resource does not exist" in raised.value.message


@pytest.fixture
def eu_key(azure_catalog, make_license, make_key):
    """A key of a license whose requests must stay on `eu`-tagged connections, with `azure`'s
    connection tagged `eu` (and `direct`'s and `aggregator`'s not)."""
    from licensing.rules.policy import open_policy_document

    connection_configure(provider_slug="azure", base_url=azure_catalog["azure"].origin, tags=["eu"])
    clear_all()
    policy = {**open_policy_document(), "routing": {"connection_tags": ["eu"]}}
    return make_key(make_license(name="eu-school", policy=policy, limit=10**9))


def test_eu_tagged_connection_serves_a_residency_rule(client, eu_key, azure_catalog):
    auth = {"Authorization": f"Bearer {eu_key}"}
    for stream in (False, True):
        body = {"model": MINI, "messages": HELLO, "stream": stream}
        response = client.post("/v1/chat/completions", json=body, headers=auth)
        assert response.status_code == 200
    assert azure_catalog["direct"].requests == [] and azure_catalog["aggregator"].requests == []
    assert [row.provider for row in rows(2)] == ["azure", "azure"]


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_tool_loop_and_structured_output(gateway, eu_key, azure_catalog, streamed):
    """The OpenAI Agents SDK (Responses API) of an `eu` license: served by Azure's Responses."""
    from tests.clients.test_clients_agents import Forecast
    from tests.clients.test_clients_agents import run as run_agent

    result, calls = run_agent(
        gateway, eu_key, MINI, "What is the weather in Paris?", tools=["get_weather"],
        streamed=streamed,
    )  # fmt: skip
    assert len(calls) == 1 and isinstance(result.final_output, str) and result.final_output
    structured, _ = run_agent(
        gateway, eu_key, MINI, "The weather in Rome, please.", output_type=Forecast,
        streamed=streamed,
    )  # fmt: skip
    assert isinstance(structured.final_output, Forecast)
    sent = [r for r in azure_catalog["azure"].requests if r.path == "/openai/responses"]
    assert len(sent) == 3 and all(bool(r.json.get("stream")) is streamed for r in sent)
    assert sent[-1].json["text"]["format"]["type"] == "json_schema"
    for row in rows(3):
        assert (row.service, row.provider) == ("responses", "azure")
        assert row.credits == billed(row) > 0


def test_failover_from_direct_to_azure_charges_the_answer_only(client, auth, azure_catalog):
    ProviderModel.objects.filter(model__model_id=MINI, provider__slug="azure").update(priority=1)
    clear_all()
    azure_catalog["direct"].fail_next(503)
    response = client.post(
        "/v1/chat/completions", json={"model": MINI, "messages": HELLO}, headers=auth
    )
    assert response.status_code == 200
    (row,) = rows(1)
    assert (row.provider, row.attempts, row.failovers) == ("azure", 2, "direct/default: status_5xx")
    assert row.credits == billed(row) > 0
    usage = usage_formats.openai_chat(response.json()["usage"])
    assert usage is not None and row.prompt_tokens == usage.prompt_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_failover_from_eu_azure_to_direct_unless_the_license_keeps_to_eu(
    client, auth, eu_key, azure_catalog, stream
):
    """The issue's example: an OpenAI model served first by `azure` (its owner, the connection
    tagged `eu`), then by `direct`. Azure down before the first byte: an ordinary license's
    request fails over to `direct` and pays that answer only; a license that keeps to `eu` has
    no other route, and gets the spec's 503, not charged."""
    Model.objects.filter(model_id=MINI).update(owned_by=Provider.objects.get(slug="azure"))
    clear_all()
    body = {"model": MINI, "messages": HELLO, "stream": stream}
    azure_catalog["azure"].fail_next(503)
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200
    (row,) = rows(1)
    assert (row.provider, row.attempts) == ("direct", 2)
    assert row.failovers == "azure/default: status_5xx"
    assert row.credits == billed(row) > 0
    assert len(azure_catalog["direct"].requests) == 1

    azure_catalog["azure"].fail_next(503)
    response = client.post("/v1/chat/completions", json=body, headers=eu_auth(eu_key))
    assert error(response, 503) == "Service temporarily unavailable"
    row = rows(2)[-1]
    assert (row.provider, row.status_code, row.credits, row.attempts) == ("azure", 503, 0, 1)
    assert len(azure_catalog["direct"].requests) == 1  # never tried for the eu license


def eu_auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


# --- content filter and errors ------------------------------------------------------------------


def test_prompt_filter_is_a_clear_400_not_charged(client, auth, azure_catalog):
    body = {"model": MINI, "messages": [{"role": "user", "content": "a forbidden-topic here"}]}
    response = client.post("/v1/chat/completions", json=body, headers={**auth, **AZURE})
    assert error(response, 400) == CONTENT_FILTERED
    (row,) = rows(1)
    assert (row.status_code, row.credits) == (400, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_answer_cut_by_the_filter_is_relayed_and_charged(pinned, azure_catalog, stream):
    azure_catalog["azure"].filter_completion = True
    if stream:
        chunks = list(pinned.chat.completions.create(model=MINI, messages=HELLO, stream=True))
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        answer = pinned.chat.completions.create(model=MINI, messages=HELLO)
        finish = answer.choices[0].finish_reason
    assert finish == "content_filter"
    (row,) = rows(1)
    assert row.status_code == 200 and row.credits == billed(row) > 0


@pytest.mark.parametrize(
    ("status", "client_status"), [(400, 400), (404, 404), (401, 503), (429, 503), (500, 503)]
)
def test_status_mapping(client, auth, azure_catalog, status, client_status):
    azure_catalog["azure"].fail_next(status)
    body = {"model": MINI, "messages": HELLO}
    response = client.post("/v1/chat/completions", json=body, headers={**auth, **AZURE})
    assert response.status_code == client_status
    assert "Azure" not in response.text
    (row,) = rows(1)
    assert row.credits == 0


def test_in_stream_error_and_a_broken_stream(client, auth, azure_catalog):
    fake = azure_catalog["azure"]
    body = {"model": MINI, "messages": HELLO, "stream": True}
    for mode in ("error_event", "drop"):
        fake.stream_fail_after, fake.stream_fail_mode = 3, mode
        response = client.post("/v1/chat/completions", json=body, headers={**auth, **AZURE})
        assert response.status_code == 200
        assert '"error"' in response.text and response.text.endswith("data: [DONE]\n\n")
    assert [(r.status_code, r.credits) for r in rows(2)] == [(503, 0), (503, 0)]
