"""The hosted `web_search` tool of /v1/responses is billed, never free (docs/decisions/README.md,
"The hosted `web_search` tool"): each `web_search_call` item of the provider's answer costs its
model's `web_search_call` fee on top of the tokens, counted in the ledger row's `units`; a model
without the fee is never sent the tool."""

from __future__ import annotations

import httpx
import orjson
import pytest

from catalog.models import Model
from inference import tokens
from inference.billing import Usage, credits_for
from licensing.models import Transaction, Wallet
from tests.kit import wait_until
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
NO_FEE = "gpt-4o-audio-preview"  # no hosted web search at OpenAI: no fee in the catalog
SEARCH = {"type": "web_search", "external_web_access": True}
FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
GRACE = 0.5


@pytest.fixture
def funded(make_license, make_key):
    license = make_license(name="funded", limit=10**9)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def fee(model_id: str) -> int:
    return Model.objects.get(model_id=model_id).cost["web_search_call"]


def tokens_price(row: Transaction) -> int:
    usage = Usage(prompt_tokens=row.prompt_tokens, completion_tokens=row.completion_tokens)
    return credits_for(Model.objects.get(model_id=row.billed_model).cost, usage)


def search_items(output: list[dict]) -> list[dict]:
    return [item for item in output if item["type"] == "web_search_call"]


def completed_response(stream: bytes) -> dict:
    for block in stream.split(b"\n\n"):
        if block.startswith(b"event: response.completed"):
            return orjson.loads(block.split(b"data: ", 1)[1])["response"]
    raise AssertionError("no response.completed event")


def test_the_catalog_prices_the_openai_models_hosted_searches(catalog):
    """OpenAI's $10 per 1,000 calls; gpt-4o-mini's fixed 8,000 input tokens a call added."""
    fees = {m.model_id: m.cost.get("web_search_call") for m in Model.objects.all()}
    assert {k: v for k, v in fees.items() if v is not None} == {
        "gpt-4o-mini": 10_000 + 8_000 * 0.15,
        "gpt-4.1": 10_000,
        "o4-mini": 10_000,
    }


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_hosted_searches_are_billed_on_top_of_the_tokens(client, catalog, funded, stream):
    catalog["direct"].web_searches = 2
    body = {"model": MINI, "input": "weather in Paris?", "tools": [SEARCH], "stream": stream}
    response = client.post("/v1/responses", json=body, headers=funded[1])
    assert response.status_code == 200, response.text
    answer = completed_response(response.content) if stream else response.json()
    assert len(search_items(answer["output"])) == 2
    wait_until(lambda: Transaction.objects.count() == 1, what="the ledger row")
    row = Transaction.objects.get()
    assert (row.status_code, row.units) == (200, 2)
    assert row.prompt_tokens > 0 and row.completion_tokens > 0
    assert row.credits == tokens_price(row) + 2 * fee(MINI)
    if not stream:
        assert answer["usage"]["credits_used"] == row.credits
    assert Wallet.objects.get(license=funded[0]).spent == row.credits  # debited once


def test_an_answer_without_searches_costs_its_tokens_alone(client, catalog, funded):
    catalog["direct"].web_searches = 0
    body = {"model": MINI, "input": "hi", "tools": [SEARCH]}
    assert client.post("/v1/responses", json=body, headers=funded[1]).status_code == 200
    row = Transaction.objects.get()
    assert row.units is None and row.credits == tokens_price(row) > 0


def test_a_stream_left_early_pays_the_searches_seen(gateway, catalog, funded, settings):
    """Left after the first search opened, the provider silent past the grace: the prompt and
    that search (no text was produced)."""
    settings.GATEWAY = {**settings.GATEWAY, "STREAM_USAGE_GRACE": GRACE}
    fake = catalog["direct"]
    fake.web_searches = 2
    # response.created, response.in_progress, the first search's output_item.added: silence.
    fake.stream_stall_after = 3
    fake.stream_stall_seconds = 16 * GRACE  # far past the grace, on a loaded machine too
    body = {"model": MINI, "input": "weather in Paris?", "tools": [SEARCH], "stream": True}
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        with http.stream("POST", "/v1/responses", json=body, headers=funded[1]) as response:
            assert response.status_code == 200
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if received.count(b"\n\n") >= 3:
                    break
    assert b"response.output_item.added" in received
    row = wait_until(lambda: Transaction.objects.first(), timeout=60, what="the ledger row")
    prompt = tokens.responses_prompt_tokens(fake.last.json, MINI)
    assert (row.status_code, row.units, row.prompt_tokens, row.completion_tokens) == (
        499,
        1,
        prompt,
        0,
    )
    usage = Usage(prompt_tokens=prompt, completion_tokens=0)
    assert row.credits == credits_for(Model.objects.get(model_id=MINI).cost, usage) + fee(MINI)
    assert Wallet.objects.get(license=funded[0]).spent == row.credits


def test_a_model_without_the_fee_is_never_sent_the_tool(client, catalog, funded):
    body = {"model": NO_FEE, "input": "hi", "tools": [FUNCTION, SEARCH]}
    response = client.post("/v1/responses", json=body, headers=funded[1])
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "tools[1]: the hosted 'web_search' tool is not priced for model "
            f"'{NO_FEE}' on this gateway; leave it out of `tools` (Codex CLI: "
            'web_search = "disabled" in config.toml)'
        }
    }
    assert catalog["direct"].requests == [] and catalog["aggregator"].requests == []
    assert refusal_codes() == ["provider_selection"]
    assert Wallet.objects.get(license=funded[0]).spent == 0


def test_without_the_web_search_service_the_license_refuses_first(
    client, catalog, make_license, make_key
):
    policy = {"version": 1, "services": {"responses": {}}}
    auth = {"Authorization": f"Bearer {make_key(make_license(name='nosearch', policy=policy))}"}
    for model in (MINI, NO_FEE):
        body = {"model": model, "input": "hi", "tools": [SEARCH]}
        response = client.post("/v1/responses", json=body, headers=auth)
        assert response.status_code == 400
        assert "needs the web_search service" in response.json()["error"]["message"]
    assert catalog["direct"].requests == []
    assert refusal_codes() == ["provider_selection"] * 2
