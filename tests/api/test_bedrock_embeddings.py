"""POST /v1/bedrock/embeddings end to end: native titan and cohere bodies over SigV4."""

from __future__ import annotations

import pytest

from licensing.models import Transaction
from tests.kit import error

pytestmark = pytest.mark.django_db(transaction=True)
TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"


def embed(client, auth, body, **headers):
    return client.post("/v1/bedrock/embeddings", json=body, headers={**auth, **headers})


def detail(response):
    assert response.status_code == 422, response.text
    return response.json()["detail"]


# --- titan ----------------------------------------------------------------------------------------


def test_titan_forwarded_signed_billed_and_ledgered(client, auth, all_upstreams):
    response = embed(
        client,
        auth,
        {
            "model": TITAN,
            "inputText": "hello world again",
            "dimensions": 256,
            "normalize": True,
            "embeddingTypes": ["float", "binary"],
        },
        **{"X-Service-Metadata": '{"course": "cs-1"}'},
    )
    assert response.status_code == 200, response.text
    fake = all_upstreams["cloud"]
    assert fake.last_signature_valid is True
    assert fake.last.raw_path == "/model/amazon.titan-embed-text-v2%3A0/invoke"
    assert fake.last.json == {
        "inputText": "hello world again",
        "dimensions": 256,
        "normalize": True,
        "embeddingTypes": ["float", "binary"],
    }
    body = response.json()
    assert set(body) == {"embedding", "embeddingsByType", "inputTextTokenCount", "usage"}
    assert len(body["embedding"]) == 256
    assert set(body["embeddingsByType"]) == {"float", "binary"}
    assert body["inputTextTokenCount"] == 3
    assert body["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 3,
        "credits_used": 1,  # 3 x 0.02, rounded up
        "credits_remaining": None,
    }
    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == (
        "bedrock_embeddings",
        TITAN,
        TITAN,
    )
    assert (row.provider, row.connection, row.status_code) == ("cloud", "default", 200)
    assert (row.prompt_tokens, row.total_tokens, row.credits) == (3, 3, 1)
    assert row.metadata == {"course": "cs-1"}


def test_titan_minimal_body(client, auth, all_upstreams):
    words = " ".join(["word"] * 120)  # 120 x 0.02 = 2.4 -> 3
    response = embed(client, auth, {"model": TITAN, "inputText": words, "dimensions": None})
    assert response.status_code == 200
    assert all_upstreams["cloud"].last.json == {"inputText": words}
    assert len(response.json()["embedding"]) == 1024
    assert response.json()["usage"]["credits_used"] == 3


# --- cohere ---------------------------------------------------------------------------------------


def test_cohere_tokens_come_from_the_header(client, auth, all_upstreams):
    body = {
        "model": COHERE,
        "texts": ["first text here", "second"],
        "input_type": "search_document",
        "truncate": "END",
        "embedding_types": ["float", "int8"],
    }
    response = embed(client, auth, body)
    assert response.status_code == 200, response.text
    sent = all_upstreams["cloud"].last
    assert sent.raw_path == "/model/cohere.embed-english-v3/invoke"
    assert sent.json == {key: value for key, value in body.items() if key != "model"}
    answer = response.json()
    assert answer["response_type"] == "embeddings_by_type"
    assert set(answer["embeddings"]) == {"float", "int8"}
    assert len(answer["embeddings"]["float"]) == 2 and answer["texts"] == body["texts"]
    assert answer["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 4,
        "credits_used": 1,  # 4 x 0.10, rounded up
        "credits_remaining": None,
    }
    row = Transaction.objects.get()
    assert (row.billed_model, row.prompt_tokens, row.credits) == (COHERE, 4, 1)


def test_cohere_multilingual_float_answer(client, auth, all_upstreams):
    words = [" ".join(["palabra"] * 25)] * 2  # 50 x 0.10 = 5
    response = embed(
        client,
        auth,
        {"model": "cohere.embed-multilingual-v3", "texts": words, "input_type": "clustering"},
    )
    assert response.status_code == 200
    answer = response.json()
    assert answer["response_type"] == "embeddings_floats"
    assert len(answer["embeddings"]) == 2 and len(answer["embeddings"][0]) == 1024
    assert answer["usage"]["credits_used"] == 5


def test_budget_remaining(client, all_upstreams, make_license, make_key):
    license = make_license(name="limited", limit=100)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = embed(client, auth, {"model": COHERE, "texts": ["a b"], "input_type": "clustering"})
    assert response.json()["usage"]["credits_remaining"] == 99


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"model": "openai.text-embedding-3-small", "inputText": "x"},
        {"model": "amazon.nova-2", "texts": ["x"], "input_type": "clustering"},
        {"inputText": "x"},
        {"model": 5, "inputText": "x"},
    ],
)
def test_unknown_prefix_is_union_tag_not_found(client, auth, all_upstreams, body):
    response = embed(client, auth, body)
    assert detail(response) == [
        {
            "type": "union_tag_not_found",
            "loc": ["body"],
            "msg": "Unable to extract tag using discriminator model_prefix()",
            "input": body,
            "ctx": {"discriminator": "model_prefix()"},
        }
    ]
    assert response.json()["error"] == {  # the whole body is to blame: no param
        "message": "body: Unable to extract tag using discriminator model_prefix()",
        "type": "invalid_request_error",
        "param": None,
        "code": "union_tag_not_found",
    }
    assert all_upstreams["cloud"].requests == [] and not Transaction.objects.exists()


@pytest.mark.parametrize(
    "body,type_,loc",
    [
        ({"model": TITAN, "inputText": "x", "dimensions": 300}, "literal_error", ["dimensions"]),
        ({"model": TITAN, "inputText": "x", "normalize": "yes"}, "bool_type", ["normalize"]),
        (
            {"model": TITAN, "inputText": "x", "embeddingTypes": ["int8"]},
            "literal_error",
            ["embeddingTypes", 0],
        ),
        ({"model": TITAN, "inputText": "x", "texts": ["y"]}, "extra_forbidden", ["texts"]),
        ({"model": TITAN}, "missing", ["inputText"]),
        ({"model": COHERE, "texts": ["x"]}, "missing", ["input_type"]),
        (
            {"model": COHERE, "texts": "x", "input_type": "clustering"},
            "list_type",
            ["texts"],
        ),
        (
            {"model": COHERE, "texts": ["x"], "input_type": "clustering", "truncate": "LEFT"},
            "literal_error",
            ["truncate"],
        ),
        (
            {"model": COHERE, "texts": ["x"], "input_type": "clustering", "input": "x"},
            "extra_forbidden",
            ["input"],
        ),
    ],
)
def test_field_validation(client, auth, all_upstreams, body, type_, loc):
    tag = "titan" if body["model"] == TITAN else "cohere"
    (item,) = detail(embed(client, auth, body))
    assert (item["type"], item["loc"]) == (type_, ["body", tag, *loc])
    assert all_upstreams["cloud"].requests == []


# --- routing, policy and failures -----------------------------------------------------------------


def test_unknown_model_with_a_known_prefix_is_forwarded(client, auth, all_upstreams):
    response = embed(client, auth, {"model": "amazon.titan-embed-text-v9", "inputText": "x"})
    assert error(response, 400) == "The provided model identifier is invalid."
    assert all_upstreams["cloud"].last.raw_path == "/model/amazon.titan-embed-text-v9/invoke"
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.billed_model) == (400, 0, "")


@pytest.mark.parametrize("pin", ["direct", "multimodal", "cloud/other"])
def test_pins_that_cannot_serve(client, auth, all_upstreams, pin):
    response = embed(
        client, auth, {"model": TITAN, "inputText": "x"}, **{"X-Service-Provider": pin}
    )
    assert error(response, 400) == (
        "No provider available for endpoint 'bedrock_embeddings' under the current pins"
    )


def test_service_not_enabled(client, all_upstreams, make_license, make_key):
    policy = {"version": 1, "services": {"embeddings": {}}}
    auth = {"Authorization": f"Bearer {make_key(make_license(name='p', policy=policy))}"}
    response = embed(client, auth, {"model": TITAN, "inputText": "x"})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "service 'bedrock_embeddings' is not enabled for this license",
        "code": "policy_denied",
        "param": None,
    }
    assert all_upstreams["cloud"].requests == []


@pytest.mark.parametrize(
    "rules,body,expected",
    [
        (
            {"dimensions": {"max": 512}},
            {"model": TITAN, "inputText": "x", "dimensions": 1024},
            ("'dimensions' must be <= 512", "dimensions"),
        ),
        (
            {"model": {"allowed": [TITAN]}},
            {"model": COHERE, "texts": ["x"], "input_type": "clustering"},
            (f"'model' must be one of: [{TITAN}]", "model"),
        ),
        (
            {"texts": {"max_items": 1}},
            {"model": COHERE, "texts": ["x", "y"], "input_type": "clustering"},
            ("'texts' exceeds maximum item count of 1", "texts"),
        ),
    ],
)
def test_parameter_rules(client, all_upstreams, make_license, make_key, rules, body, expected):
    policy = {"version": 1, "services": {"bedrock_embeddings": {"params": rules}}}
    auth = {"Authorization": f"Bearer {make_key(make_license(name='p', policy=policy))}"}
    response = embed(client, auth, body)
    assert response.status_code == 403
    error_body = response.json()["error"]
    assert (error_body["message"], error_body["param"]) == expected
    assert all_upstreams["cloud"].requests == []


def test_input_guardrail_reads_the_texts(client, all_upstreams, make_license, make_key):
    license = make_license(name="guarded")
    license.license_type.guardrails = {"input": {"patterns": ["(?i)exam answers"]}}
    license.license_type.save()
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    for body in (
        {"model": TITAN, "inputText": "the exam answers"},
        {"model": COHERE, "texts": ["fine", "Exam answers"], "input_type": "clustering"},
    ):
        assert error(embed(client, auth, body), 400) == "Request blocked by guardrail"
    assert all_upstreams["cloud"].requests == []


def test_signature_is_checked(client, auth, all_upstreams):
    from catalog.services import connection_configure
    from core.localcache import clear_all

    connection_configure(
        provider_slug="cloud",
        base_url=all_upstreams["cloud"].base_url,
        aws_access_key_id="AKIDSOMEONEELSE",
    )
    clear_all()
    response = embed(client, auth, {"model": TITAN, "inputText": "x"})
    assert error(response, 503) == "Service temporarily unavailable"
    assert all_upstreams["cloud"].last_signature_valid is False
