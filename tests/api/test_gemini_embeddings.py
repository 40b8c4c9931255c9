"""POST /v1/gemini/embeddings end to end: the multimodal provider's native embeddings fields,
single and batch routing, token counting, policy, credits and the ledger."""

from __future__ import annotations

import math

import pytest

from licensing.models import Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gemini-embedding-001"
EMBED = f"/v1beta/models/{MODEL}:embedContent"
BATCH = f"/v1beta/models/{MODEL}:batchEmbedContents"
COUNT = f"/v1beta/models/{MODEL}:countTokens"


def embed(client, auth, body, **headers):
    return client.post("/v1/gemini/embeddings", json=body, headers={**auth, **headers})


def sent(fake, path):
    [request] = [r for r in fake.requests if r.path == path]
    return request


def norm(values):
    return math.sqrt(sum(v * v for v in values))


# --- single and batch ---------------------------------------------------------------------------


def test_single_string_goes_to_embed_content(client, auth, all_upstreams):
    gemini = all_upstreams["multimodal"]
    response = embed(
        client,
        auth,
        {
            "model": MODEL,
            "input": "how do plants grow",
            "task_type": "RETRIEVAL_QUERY",
            "output_dimensionality": 8,
        },
        **{"X-Service-Metadata": '{"course": "bio-101"}'},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"model", "embeddings", "usage"}
    assert body["model"] == MODEL
    [vector] = body["embeddings"]
    assert set(vector) == {"values"} and len(vector["values"]) == 8
    # 4 tokens x 0.15 micro-credits = 0.6 -> 1
    assert body["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 4,
        "credits_used": 1,
        "credits_remaining": None,
    }
    call = sent(gemini, EMBED)
    assert call.headers["x-goog-api-key"] == "sk-upstream-test"
    assert call.json == {
        "content": {"parts": [{"text": "how do plants grow"}]},
        "taskType": "RETRIEVAL_QUERY",
        "outputDimensionality": 8,
    }
    assert sent(gemini, COUNT).json == {
        "contents": [{"role": "user", "parts": [{"text": "how do plants grow"}]}]
    }
    assert sorted(r.path for r in gemini.requests) == sorted([EMBED, COUNT])
    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == (
        "gemini_embeddings",
        MODEL,
        MODEL,
    )
    assert (row.provider, row.connection, row.status_code) == ("multimodal", "default", 200)
    assert (row.prompt_tokens, row.total_tokens, row.credits) == (4, 4, 1)
    assert row.metadata == {"course": "bio-101"}
    assert row.request_id == response.headers["X-Request-Id"]


def test_list_goes_to_batch_embed_contents(client, auth, all_upstreams):
    gemini = all_upstreams["multimodal"]
    texts = ["the water cycle", "photosynthesis in leaves", "cells"]
    response = embed(
        client,
        auth,
        {
            "model": MODEL,
            "input": texts,
            "task_type": "RETRIEVAL_DOCUMENT",
            "title": "Biology notes",
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["embeddings"]) == 3
    assert all(len(e["values"]) == 3072 for e in body["embeddings"])
    assert all(abs(norm(e["values"]) - 1) < 1e-6 for e in body["embeddings"])
    assert len({tuple(e["values"]) for e in body["embeddings"]}) == 3
    call = sent(gemini, BATCH)
    assert call.json == {
        "requests": [
            {
                "model": f"models/{MODEL}",
                "content": {"parts": [{"text": text}]},
                "taskType": "RETRIEVAL_DOCUMENT",
                "title": "Biology notes",
            }
            for text in texts
        ]
    }
    # The title is read with every text: (3 + 3 + 1) text tokens + 3 x 2 title tokens = 13
    assert sent(gemini, COUNT).json == {
        "contents": [
            {"role": "user", "parts": [{"text": "Biology notes"}, {"text": text}]} for text in texts
        ]
    }
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == 13
    assert body["usage"]["credits_used"] == 2  # 13 x 0.15 = 1.95 -> 2
    assert not [r for r in gemini.requests if r.path == EMBED]
    row = Transaction.objects.get()
    assert (row.prompt_tokens, row.credits) == (13, 2)


def test_single_item_list_is_a_batch(client, auth, all_upstreams):
    response = embed(client, auth, {"model": MODEL, "input": ["just one"]})
    assert response.status_code == 200, response.text
    assert len(response.json()["embeddings"]) == 1
    assert sent(all_upstreams["multimodal"], BATCH).json["requests"][0] == {
        "model": f"models/{MODEL}",
        "content": {"parts": [{"text": "just one"}]},
    }


def test_single_matches_batch_vector(client, auth, all_upstreams):
    one = embed(client, auth, {"model": MODEL, "input": "alpha"}).json()
    many = embed(client, auth, {"model": MODEL, "input": ["beta", "alpha"]}).json()
    assert many["embeddings"][1] == one["embeddings"][0]


def test_task_type_changes_the_vector(client, auth, all_upstreams):
    query = embed(client, auth, {"model": MODEL, "input": "x", "task_type": "RETRIEVAL_QUERY"})
    other = embed(client, auth, {"model": MODEL, "input": "x", "task_type": "CLUSTERING"})
    assert query.json()["embeddings"] != other.json()["embeddings"]


def test_credits_are_rounded_up_per_request(client, auth, all_upstreams):
    words = " ".join(["word"] * 101)  # 101 x 0.15 = 15.15 -> 16
    response = embed(client, auth, {"model": MODEL, "input": words})
    assert response.json()["usage"]["credits_used"] == 16
    assert Transaction.objects.get().credits == 16


def test_count_failure_bills_an_estimate(client, auth, all_upstreams):
    """A model without `:countTokens` (text-embedding-004, unknown to the catalog, so forwarded
    and recorded at zero cost) still answers; its tokens are estimated at 4 characters each."""
    gemini = all_upstreams["multimodal"]
    response = embed(client, auth, {"model": "text-embedding-004", "input": ["abcdefghi", "ab"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["embeddings"]) == 2 and len(body["embeddings"][0]["values"]) == 768
    assert body["usage"] == {
        "prompt_tokens": 4,  # ceil(9 / 4) + ceil(2 / 4)
        "total_tokens": 4,
        "credits_used": 0,
        "credits_remaining": None,
    }
    assert {r.path for r in gemini.requests} == {
        "/v1beta/models/text-embedding-004:batchEmbedContents",
        "/v1beta/models/text-embedding-004:countTokens",
    }
    row = Transaction.objects.get()
    assert (row.billed_model, row.prompt_tokens, row.credits) == ("text-embedding-004", 4, 0)


def test_budget_charge_and_remaining(client, all_upstreams, make_license, make_key):
    license = make_license(name="limited", limit=100)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    words = " ".join(["w"] * 40)  # 40 x 0.15 = 6
    response = embed(client, auth, {"model": MODEL, "input": [words, words]})
    usage = response.json()["usage"]
    assert (usage["prompt_tokens"], usage["credits_used"], usage["credits_remaining"]) == (
        80,
        12,
        88,
    )
    wallet = Wallet.objects.get()
    assert wallet.spent == 12 and Transaction.objects.get().wallet_id == wallet.pk


def test_out_of_budget_is_400_before_the_call(client, all_upstreams, make_license, make_key):
    license = make_license(name="empty", limit=0)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = embed(client, auth, {"model": MODEL, "input": "x"})
    assert error(response, 400) == "Your license is out of budget"
    assert all_upstreams["multimodal"].requests == []
    assert refusal_codes() == ["out_of_budget"]


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra,kind,loc",
    [
        ({"dimensions": 8}, "extra_forbidden", ["body", "dimensions"]),
        ({"content": {"parts": [{"text": "x"}]}}, "extra_forbidden", ["body", "content"]),
        ({"taskType": "CLUSTERING"}, "extra_forbidden", ["body", "taskType"]),
        ({"encoding_format": "float"}, "extra_forbidden", ["body", "encoding_format"]),
        ({"stream": False}, "extra_forbidden", ["body", "stream"]),
        ({"task_type": "retrieval_query"}, "literal_error", ["body", "task_type"]),
        ({"task_type": "TASK_TYPE_UNSPECIFIED"}, "literal_error", ["body", "task_type"]),
        ({"output_dimensionality": 0}, "greater_than_equal", ["body", "output_dimensionality"]),
        ({"output_dimensionality": "8"}, "int_type", ["body", "output_dimensionality"]),
        ({"output_dimensionality": 8.0}, "int_type", ["body", "output_dimensionality"]),
    ],
)
def test_422_fields(client, auth, all_upstreams, extra, kind, loc):
    response = embed(client, auth, {"model": MODEL, "input": "x", **extra})
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert (item["type"], item["loc"]) == (kind, loc)
    assert all_upstreams["multimodal"].requests == []
    assert not Transaction.objects.exists()


@pytest.mark.parametrize(
    "value,kind,loc",
    [
        ("", "string_too_short", ["body", "input", "str"]),
        ([], "too_short", ["body", "input", "list[str]"]),
        (["a", ""], "string_too_short", ["body", "input", "list[str]", 1]),
        ([1, 2], "string_type", ["body", "input", "list[str]", 0]),
    ],
)
def test_422_input(client, auth, all_upstreams, value, kind, loc):
    response = embed(client, auth, {"model": MODEL, "input": value})
    assert response.status_code == 422, response.text
    assert (kind, loc) in [(i["type"], i["loc"]) for i in response.json()["detail"]]
    assert all_upstreams["multimodal"].requests == []


def test_missing_fields(client, auth, all_upstreams):
    response = embed(client, auth, {})
    assert response.status_code == 422
    assert sorted(i["loc"][-1] for i in response.json()["detail"]) == ["input", "model"]
    assert {i["type"] for i in response.json()["detail"]} == {"missing"}


@pytest.mark.parametrize("task_type", [None, "RETRIEVAL_QUERY", "CLUSTERING"])
def test_title_needs_retrieval_document(client, auth, all_upstreams, task_type):
    body = {"model": MODEL, "input": "x", "title": "Notes"}
    if task_type:
        body["task_type"] = task_type
    response = embed(client, auth, body)
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["type"] == "value_error" and item["loc"] == ["body"]
    assert item["msg"] == "Value error, title is only allowed with task_type RETRIEVAL_DOCUMENT"
    assert all_upstreams["multimodal"].requests == []


def test_422_comes_before_missing_credentials(client, all_upstreams):
    response = embed(client, {}, {"model": MODEL, "input": "x", "task_type": "NOPE"})
    assert response.status_code == 422
    assert error(embed(client, {}, {"model": MODEL, "input": "x"}), 401) == (
        "Authentication required"
    )


def test_get_is_405(client, auth, all_upstreams):
    response = client.get("/v1/gemini/embeddings", headers=auth)
    assert response.status_code == 405
    assert response.json()["detail"][0]["type"] == "method_not_allowed"


# --- policy -------------------------------------------------------------------------------------


def policy_auth(make_license, make_key, services):
    license = make_license(name="policy", policy={"version": 1, "services": services})
    return {"Authorization": f"Bearer {make_key(license)}"}


def test_service_not_enabled(client, all_upstreams, make_license, make_key):
    auth = policy_auth(make_license, make_key, {"embeddings": {}})
    response = embed(client, auth, {"model": MODEL, "input": "x"})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "service 'gemini_embeddings' is not enabled for this license",
        "code": "policy_denied",
        "param": None,
    }
    assert all_upstreams["multimodal"].requests == []
    assert refusal_codes() == ["policy_denied"]


@pytest.mark.parametrize(
    "extra,param,message",
    [
        (
            {"output_dimensionality": 1024},
            "output_dimensionality",
            "'output_dimensionality' must be <= 768",
        ),
        (
            {"task_type": "CLUSTERING"},
            "task_type",
            "'task_type' must be one of: [RETRIEVAL_QUERY, RETRIEVAL_DOCUMENT]",
        ),
        (
            {"input": ["ok", "a secret plan"]},
            "input",
            "'input' value 'a secret plan' does not match any allowed pattern",
        ),
        (
            {"input": ["a", "b", "c"]},
            "input",
            "'input' exceeds maximum item count of 2",
        ),
        (
            {"task_type": "RETRIEVAL_DOCUMENT", "title": "x"},
            "title",
            "parameter 'title' is not permitted for this license",
        ),
    ],
)
def test_parameter_rules(client, all_upstreams, make_license, make_key, extra, param, message):
    params = {
        "output_dimensionality": {"max": 768},
        "task_type": {"allowed": ["RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT"]},
        "input": {"patterns": ["[a-z ]{0,10}"], "max_items": 2},
        "title": {"forbidden": True},
    }
    auth = policy_auth(make_license, make_key, {"gemini_embeddings": {"params": params}})
    response = embed(client, auth, {"model": MODEL, "input": "ok", **extra})
    assert response.status_code == 403, response.text
    assert response.json()["error"] == {"message": message, "code": "policy_denied", "param": param}
    assert all_upstreams["multimodal"].requests == []
    # within the rules it is served
    ok = embed(client, auth, {"model": MODEL, "input": "ok", "output_dimensionality": 768})
    assert ok.status_code == 200, ok.text


def test_policy_providers_without_multimodal(client, all_upstreams, make_license, make_key):
    auth = policy_auth(make_license, make_key, {"gemini_embeddings": {"providers": ["direct"]}})
    response = embed(client, auth, {"model": MODEL, "input": "x"})
    assert error(response, 400) == "No provider available for endpoint 'gemini_embeddings'"
    assert all_upstreams["multimodal"].requests == []


# --- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pin", ["direct", "cloud", "aggregator", "multimodal/other"])
def test_pins_that_cannot_serve(client, auth, all_upstreams, pin):
    response = embed(client, auth, {"model": MODEL, "input": "x"}, **{"X-Service-Provider": pin})
    assert (
        error(response, 400)
        == "No provider available for endpoint 'gemini_embeddings' under the current pins"
    )
    assert refusal_codes() == ["provider_selection"]


def test_pin_to_multimodal(client, auth, all_upstreams):
    response = embed(
        client, auth, {"model": MODEL, "input": "x"}, **{"X-Service-Provider": "multimodal/default"}
    )
    assert response.status_code == 200, response.text


def test_a_model_of_another_provider(client, auth, all_upstreams):
    response = embed(client, auth, {"model": "text-embedding-3-small", "input": "x"})
    assert error(response, 400) == "No provider available for endpoint 'gemini_embeddings'"
    assert all_upstreams["multimodal"].requests == []


def test_missing_connection(client, auth, catalog):
    """`catalog` alone leaves `multimodal` without a connection."""
    response = embed(client, auth, {"model": MODEL, "input": "x"})
    assert (
        error(response, 400)
        == "Connection 'default' is misconfigured: missing 'api_key' credential"
    )


# --- provider failures --------------------------------------------------------------------------


def test_provider_400_is_forwarded(client, auth, all_upstreams):
    response = embed(client, auth, {"model": MODEL, "input": "x", "output_dimensionality": 5000})
    assert (
        error(response, 400)
        == "* EmbedContentRequest.output_dimensionality: must be between 1 and 3072"
    )
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.billed_model) == (400, 0, "")


def test_unknown_model_is_forwarded(client, auth, all_upstreams):
    response = embed(client, auth, {"model": "gemini-embedding-999", "input": "x"})
    message = error(response, 404)
    assert message.startswith("models/gemini-embedding-999 is not found")
    assert "/v1beta/models/gemini-embedding-999:embedContent" in {
        r.path for r in all_upstreams["multimodal"].requests
    }
    assert Transaction.objects.get().status_code == 404
