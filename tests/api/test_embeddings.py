"""POST /v1/embeddings end to end: the gateway over HTTP, fake upstreams at the network edge."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import timedelta

import openai
import pytest

from catalog.models import Connection, ProviderModel
from licensing.models import Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
SMALL = "text-embedding-3-small"


def embed(client, auth, body, **headers):
    return client.post("/v1/embeddings", json=body, headers={**auth, **headers})


# --- the happy path ----------------------------------------------------------------------------


def test_sdk_float_call(sdk, catalog):
    result = sdk.embeddings.create(
        model=SMALL, input=["hello world", "second one"], encoding_format="float"
    )
    assert [d.index for d in result.data] == [0, 1]
    assert all(len(d.embedding) == 1536 for d in result.data)
    assert result.model == SMALL
    assert result.usage.prompt_tokens == result.usage.total_tokens == 4
    assert result.usage.model_extra["credits_used"] == 1  # 4 tokens x 0.02, rounded up
    assert result.usage.model_extra["credits_remaining"] is None
    sent = catalog["direct"].last
    assert sent.path == "/v1/embeddings"
    assert sent.json == {
        "model": SMALL,
        "input": ["hello world", "second one"],
        "encoding_format": "float",
    }
    assert sent.headers["authorization"] == "Bearer sk-upstream-test"


def test_sdk_default_call_is_a_clear_422(sdk, catalog):
    """The SDK sends encoding_format=base64 unless told otherwise; the spec accepts float only."""
    with pytest.raises(openai.UnprocessableEntityError) as excinfo:
        sdk.embeddings.create(model=SMALL, input="hello")
    exc = excinfo.value
    # What the user sees: the SDK's text is "Error code: 422 - <error.message>".
    message = (
        "encoding_format: Input should be 'float'; pass encoding_format=\"float\": embeddings "
        'are returned as float arrays only (the openai SDK sends "base64" unless told)'
    )
    assert str(exc) == f"Error code: 422 - {message}"
    assert exc.message == f"Error code: 422 - {message}"
    assert (exc.code, exc.param, exc.type) == (
        "literal_error",
        "encoding_format",
        "invalid_request_error",
    )
    # The SDK hands over `error` as `body`; the contract's `detail` is in the answer as it was.
    item = exc.response.json()["detail"][0]
    assert item["loc"] == ["body", "encoding_format"] and item["input"] == "base64"
    assert catalog["direct"].requests == []
    # Told what to do, the same call works.
    result = sdk.embeddings.create(model=SMALL, input="hello", encoding_format="float")
    assert len(result.data[0].embedding) == 1536


def test_async_sdk_default_call_shows_the_message(gateway, api_key, catalog):
    async def call():
        async with openai.AsyncOpenAI(
            api_key=api_key, base_url=gateway.url + "/v1", max_retries=0
        ) as sdk:
            await sdk.embeddings.create(model=SMALL, input="hello")

    with pytest.raises(openai.UnprocessableEntityError) as excinfo:
        asyncio.run(call())
    assert str(excinfo.value).startswith("Error code: 422 - encoding_format: ")
    assert 'pass encoding_format="float"' in str(excinfo.value)


def test_response_shape_and_ledger(client, auth, catalog):
    response = embed(
        client,
        auth,
        {"model": SMALL, "input": "one two three", "user": "stu-1"},
        **{"X-Service-Metadata": '{"course": "bio-101", "week": 3}'},
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"object", "model", "data", "usage"}
    assert body["object"] == "list"
    assert body["data"][0]["object"] == "embedding" and body["data"][0]["index"] == 0
    assert body["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 3,
        "credits_used": 1,
        "credits_remaining": None,
    }
    assert catalog["direct"].last.json["user"] == "stu-1"
    row = Transaction.objects.get()
    assert row.request_id == response.headers["X-Request-Id"]
    assert (row.service, row.requested_model, row.billed_model) == ("embeddings", SMALL, SMALL)
    assert (row.provider, row.connection, row.status_code) == ("direct", "default", 200)
    assert (row.prompt_tokens, row.total_tokens, row.credits) == (3, 3, 1)
    assert row.metadata == {"course": "bio-101", "week": 3}
    assert row.api_key_id is not None and row.latency_ms >= 0


def test_data_is_ordered_by_index(client, auth, catalog):
    catalog["direct"].reverse_embeddings = True
    try:
        response = embed(client, auth, {"model": SMALL, "input": ["a", "b", "c"]})
    finally:
        catalog["direct"].reverse_embeddings = False
    assert [d["index"] for d in response.json()["data"]] == [0, 1, 2]


def test_credits_are_rounded_up_per_request(client, auth, catalog):
    words = " ".join(["word"] * 120)  # 120 tokens x 0.13 = 15.6 -> 16
    response = embed(client, auth, {"model": "text-embedding-3-large", "input": words})
    assert response.json()["usage"]["credits_used"] == 16
    assert Transaction.objects.get().credits == 16


def test_empty_string_is_free(client, auth, catalog):
    for payload in ("", ["", ""]):
        response = embed(client, auth, {"model": SMALL, "input": payload})
        assert response.status_code == 200
        assert response.json()["usage"]["credits_used"] == 0
    assert list(Transaction.objects.values_list("credits", "prompt_tokens")) == [(0, 0), (0, 0)]


def test_dimensions_forwarded_where_supported(client, auth, catalog):
    response = embed(client, auth, {"model": SMALL, "input": "x", "dimensions": 256})
    assert response.status_code == 200
    assert len(response.json()["data"][0]["embedding"]) == 256
    assert catalog["direct"].last.json["dimensions"] == 256


def test_dimensions_on_ada_is_400_before_the_call(client, auth, catalog):
    response = embed(
        client, auth, {"model": "text-embedding-ada-002", "input": "x", "dimensions": 256}
    )
    message = error(response, 400)
    assert "text-embedding-ada-002" in message and "dimensions" in message
    assert catalog["direct"].requests == []
    assert refusal_codes() == ["provider_selection"]


def test_versioned_answer_billed_under_catalog_id(client, auth, catalog):
    response = embed(client, auth, {"model": "text-embedding-ada-002", "input": "a b c d e"})
    body = response.json()
    assert body["model"] == "text-embedding-ada-002-v2"
    assert body["usage"]["credits_used"] == 1  # 5 x 0.10 = 0.5 -> 1
    row = Transaction.objects.get()
    assert (row.requested_model, row.billed_model) == (
        "text-embedding-ada-002",
        "text-embedding-ada-002",
    )


# --- the aggregator ------------------------------------------------------------------------------


def test_aggregator_by_header(client, auth, catalog):
    response = embed(
        client, auth, {"model": SMALL, "input": "one two"}, **{"X-Service-Provider": "aggregator"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["model"] == "openai/text-embedding-3-small"
    assert body["usage"]["credits_used"] == 1
    assert catalog["aggregator"].last.json["model"] == "openai/text-embedding-3-small"
    assert catalog["aggregator"].last.path == "/api/v1/embeddings"
    assert catalog["direct"].requests == []
    row = Transaction.objects.get()
    assert (row.provider, row.billed_model) == ("aggregator", SMALL)


def test_aggregator_with_connection_pin(client, auth, catalog):
    response = embed(
        client, auth, {"model": SMALL, "input": "x"}, **{"X-Service-Provider": "aggregator/default"}
    )
    assert response.status_code == 200


def test_unknown_model_forwarded_unchanged(client, auth, catalog):
    response = embed(client, auth, {"model": "my-own-model", "input": "x"})
    message = error(response, 404)
    assert "my-own-model" in message
    assert catalog["direct"].last.json["model"] == "my-own-model"
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (404, 0)


# --- provider selection errors --------------------------------------------------------------------


@pytest.mark.parametrize("pin", ["cloud", "nope", "direct/other", "websearch"])
def test_pins_that_cannot_serve(client, auth, catalog, pin):
    response = embed(client, auth, {"model": SMALL, "input": "x"}, **{"X-Service-Provider": pin})
    assert (
        error(response, 400)
        == "No provider available for endpoint 'embeddings' under the current pins"
    )
    assert refusal_codes() == ["provider_selection"]


def test_pin_outside_the_license_providers(client, catalog, make_license, make_key):
    policy = {"version": 1, "services": {"embeddings": {"providers": ["aggregator"]}}}
    key = make_key(make_license(name="agg-only", policy=policy))
    auth = {"Authorization": f"Bearer {key}"}
    response = embed(
        client, auth, {"model": SMALL, "input": "x"}, **{"X-Service-Provider": "direct"}
    )
    assert error(response, 400).endswith("under the current pins")
    # without a pin the license's only provider serves it
    assert embed(client, auth, {"model": SMALL, "input": "x"}).status_code == 200
    assert catalog["aggregator"].last.json["model"] == "openai/text-embedding-3-small"


def test_no_provider_for_the_license(client, catalog, make_license, make_key):
    policy = {"version": 1, "services": {"embeddings": {"providers": []}}}
    key = make_key(make_license(name="none", policy=policy))
    response = embed(client, {"Authorization": f"Bearer {key}"}, {"model": SMALL, "input": "x"})
    assert error(response, 400) == "No provider available for endpoint 'embeddings'"


def test_all_rows_inactive(client, auth, catalog):
    ProviderModel.objects.filter(model__model_id=SMALL).update(active=False)
    from core.localcache import clear_all

    clear_all()
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert response.status_code == 400
    assert catalog["direct"].requests == []


def test_missing_connection_credentials(client, auth, catalog):
    connection = Connection.objects.get(provider__slug="direct")
    connection.api_key = ""
    connection.save()
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert (
        error(response, 400)
        == "Connection 'default' is misconfigured: missing 'api_key' credential"
    )
    connection.delete()
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert (
        error(response, 400)
        == "Connection 'default' is misconfigured: missing 'api_key' credential"
    )
    assert refusal_codes() == ["provider_selection"] * 2


# --- provider status mapping -------------------------------------------------------------------


# The one end-to-end case for every adapter and endpoint (the pipeline maps nothing itself); the
# whole table, per adapter, is tests/providers/test_provider_status_mapping.py.
@pytest.mark.parametrize(
    "upstream,status,message",
    [
        (429, 503, "Service temporarily unavailable"),
    ],
)
def test_status_mapping(client, auth, catalog, upstream, status, message):
    catalog["direct"].fail_next(
        status=upstream,
        body={
            "error": {"message": "Bad thing happened.", "type": "x", "param": None, "code": None}
        },
        headers={"Retry-After": "30"},
    )
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert error(response, status) == message
    assert "retry-after" not in response.headers
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (status, 0)


def test_timeout_and_dropped_connection_are_503(client, auth, catalog):
    connection = Connection.objects.get(provider__slug="direct")
    connection.timeout = 0.5
    connection.save()
    catalog["direct"].hang_next(seconds=3)
    assert (
        error(embed(client, auth, {"model": SMALL, "input": "x"}), 503)
        == "Service temporarily unavailable"
    )
    catalog["direct"].drop_next()
    assert (
        error(embed(client, auth, {"model": SMALL, "input": "x"}), 503)
        == "Service temporarily unavailable"
    )
    assert list(Transaction.objects.values_list("status_code", "credits")) == [(503, 0), (503, 0)]


def test_unreachable_upstream_is_503(client, auth, catalog):
    connection = Connection.objects.get(provider__slug="direct")
    connection.base_url = "http://127.0.0.1:9/v1"
    connection.save()
    assert (
        error(embed(client, auth, {"model": SMALL, "input": "x"}), 503)
        == "Service temporarily unavailable"
    )


def test_provider_messages_are_sanitized(client, auth, catalog):
    catalog["direct"].fail_next(
        status=400,
        body={
            "error": {
                "message": "Invalid input for OpenAI: see https://platform.openai.com/docs/x "
                "or write to support@openai.com. Amazon Bedrock and Google agree."
            }
        },
    )
    message = error(embed(client, auth, {"model": SMALL, "input": "x"}), 400)
    for leaked in ("http", "openai.com", "@", "OpenAI", "Amazon", "Bedrock", "Google"):
        assert leaked not in message
    assert message.startswith("Invalid input for")


# --- budgets -----------------------------------------------------------------------------------


def limited(make_license, make_key, **kwargs):
    license = make_license(name=kwargs.pop("name", "limited"), **kwargs)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def test_budget_charge_and_remaining(client, catalog, make_license, make_key):
    license, auth = limited(make_license, make_key, limit=10)
    response = embed(
        client, auth, {"model": "text-embedding-3-large", "input": "a b c d e f g h i j"}
    )
    usage = response.json()["usage"]
    assert (usage["credits_used"], usage["credits_remaining"]) == (2, 8)
    wallet = Wallet.objects.get()
    assert (wallet.holder, wallet.spent, wallet.unit) == ("license", 2, "micro_credits")
    assert Transaction.objects.get().wallet_id == wallet.pk


def test_out_of_budget_is_400_before_the_call(client, catalog, make_license, make_key):
    license, auth = limited(make_license, make_key, limit=1)
    assert (
        embed(client, auth, {"model": SMALL, "input": "x y"}).json()["usage"]["credits_remaining"]
        == 0
    )
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert error(response, 400) == "Your license is out of budget"
    assert len(catalog["direct"].requests) == 1
    assert Transaction.objects.filter(outcome="success").count() == 1
    assert refusal_codes() == ["out_of_budget"]


def test_zero_limit_is_out_of_budget(client, catalog, make_license, make_key):
    _, auth = limited(make_license, make_key, limit=0)
    assert (
        error(embed(client, auth, {"model": SMALL, "input": "x"}), 400)
        == "Your license is out of budget"
    )


@pytest.mark.parametrize(
    "field,value",
    [("budget_strategy", "shared"), ("budget_period", "hourly"), ("budget_unit", "usd")],
)
def test_budget_misconfiguration_is_500_and_free(
    client, catalog, make_license, make_key, field, value
):
    license, auth = limited(make_license, make_key, limit=100)
    setattr(license, field, value)
    license.save()
    response = embed(client, auth, {"model": SMALL, "input": "x"})
    assert error(response, 500) == "Budget configuration error"
    assert catalog["direct"].requests == []
    assert refusal_codes() == ["budget_misconfigured"]


def test_unit_change_after_wallet_opened_is_500(client, catalog, make_license, make_key):
    license, auth = limited(make_license, make_key, limit=100)
    assert embed(client, auth, {"model": SMALL, "input": "x"}).status_code == 200
    Wallet.objects.update(unit="credits")
    assert (
        error(embed(client, auth, {"model": SMALL, "input": "x"}), 500)
        == "Budget configuration error"
    )


def test_per_user_wallets(client, catalog, make_license, make_key):
    license = make_license(name="per-user", limit=1, strategy="per_user")
    first = {"Authorization": f"Bearer {make_key(license)}"}
    second = {"Authorization": f"Bearer {make_key(license)}"}
    assert embed(client, first, {"model": SMALL, "input": "x"}).status_code == 200
    assert (
        error(embed(client, first, {"model": SMALL, "input": "x"}), 400)
        == "Your license is out of budget"
    )
    assert embed(client, second, {"model": SMALL, "input": "x"}).status_code == 200
    assert sorted(Wallet.objects.values_list("holder", flat=True))[0].startswith("key:")
    assert Wallet.objects.count() == 2


def test_daily_window(client, catalog, make_license, make_key):
    from core import clock

    _, auth = limited(make_license, make_key, limit=100, period="daily")
    with clock.frozen() as frozen:  # the gateway's clock: the test cannot straddle midnight
        embed(client, auth, {"model": SMALL, "input": "x"})
        wallet = Wallet.objects.get()
        today = clock.utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
        assert wallet.window_start == today
        frozen.advance(24 * 3600)  # the next day spends from a wallet of its own
        embed(client, auth, {"model": SMALL, "input": "x"})
    starts = list(Wallet.objects.order_by("window_start").values_list("window_start", flat=True))
    assert starts == [today, today + timedelta(days=1)]


# --- policy and guardrails -------------------------------------------------------------------


def with_policy(make_license, make_key, services, **kwargs):
    license = make_license(name="policy", policy={"version": 1, "services": services}, **kwargs)
    return {"Authorization": f"Bearer {make_key(license)}"}


def policy_error(response):
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "policy_denied"
    return error["message"], error["param"]


def test_service_not_enabled(client, catalog, make_license, make_key):
    auth = with_policy(make_license, make_key, {"image_generation": {}})
    for _ in range(2):  # the same request gives the same 403
        assert policy_error(embed(client, auth, {"model": SMALL, "input": "x"})) == (
            "service 'embeddings' is not enabled for this license",
            None,
        )
    assert refusal_codes() == ["policy_denied"] * 2 and catalog["direct"].requests == []


@pytest.mark.parametrize(
    "rules,body,expected",
    [
        (
            {"dimensions": {"max": 1024}},
            {"dimensions": 2048},
            ("'dimensions' must be <= 1024", "dimensions"),
        ),
        (
            {"dimensions": {"min": 64}},
            {"dimensions": 8},
            ("'dimensions' must be >= 64", "dimensions"),
        ),
        (
            {"dimensions": {"min": 64, "max": 512}},
            {"dimensions": 8},
            ("'dimensions' must be between 64 and 512", "dimensions"),
        ),
        (
            {"model": {"allowed": ["text-embedding-3-small", "text-embedding-3-large"]}},
            {"model": "text-embedding-ada-002"},
            ("'model' must be one of: [text-embedding-3-small, text-embedding-3-large]", "model"),
        ),
        (
            {"model": {"fixed": "text-embedding-3-small"}},
            {"model": "text-embedding-3-large"},
            ("'model' must be 'text-embedding-3-small'", "model"),
        ),
        (
            {"model": {"excluded": ["text-embedding-3-large"]}},
            {"model": "text-embedding-3-large"},
            ("'model' value 'text-embedding-3-large' is not permitted for this license", "model"),
        ),
        (
            {"user": {"forbidden": True}},
            {"user": "u1"},
            ("parameter 'user' is not permitted for this license", "user"),
        ),
        (
            {"input": {"max_length": 5}},
            {"input": ["ok", "too long"]},
            ("'input' exceeds maximum length of 5", "input"),
        ),
        (
            {"input": {"max_items": 2}},
            {"input": ["a", "b", "c"]},
            ("'input' exceeds maximum item count of 2", "input"),
        ),
        (
            {"user": {"patterns": ["stu-[0-9]+"]}},
            {"user": "teacher"},
            ("'user' value 'teacher' does not match any allowed pattern", "user"),
        ),
    ],
)
def test_parameter_rules(client, catalog, make_license, make_key, rules, body, expected):
    auth = with_policy(make_license, make_key, {"embeddings": {"params": rules}})
    response = embed(client, auth, {"model": SMALL, "input": "x", **body})
    assert policy_error(response) == expected
    assert catalog["direct"].requests == []


def test_rules_pass_when_satisfied(client, catalog, make_license, make_key):
    auth = with_policy(
        make_license,
        make_key,
        {
            "embeddings": {
                "params": {"dimensions": {"max": 1024}, "user": {"patterns": ["stu-[0-9]+"]}}
            }
        },
    )
    assert (
        embed(
            client, auth, {"model": SMALL, "input": "x", "dimensions": 512, "user": "stu-7"}
        ).status_code
        == 200
    )
    assert embed(client, auth, {"model": SMALL, "input": "x"}).status_code == 200


def test_unsupported_policy_version_is_503(client, catalog, make_license, make_key):
    license = make_license(name="v9")
    license.license_type.policy = {"version": 9, "services": {}}
    license.license_type.save()  # bypasses the admin's validation, as a bad migration would
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    for _ in range(2):
        assert (
            error(embed(client, auth, {"model": SMALL, "input": "x"}), 503)
            == "Service temporarily unavailable"
        )
    assert catalog["direct"].requests == []


def test_input_guardrail_blocks_before_the_call(client, catalog, make_license, make_key):
    license = make_license(name="guarded")
    license.license_type.guardrails = {"input": {"patterns": ["(?i)secret exam answers"]}}
    license.license_type.save()
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    response = embed(client, auth, {"model": SMALL, "input": ["fine", "the SECRET exam answers"]})
    assert error(response, 400) == "Request blocked by guardrail"
    assert catalog["direct"].requests == [] and refusal_codes() == ["guardrail_blocked"]
    assert embed(client, auth, {"model": SMALL, "input": "fine"}).status_code == 200


# --- the order of checks ---------------------------------------------------------------------


def test_check_order(client, catalog, make_license, make_key):
    policy = {"version": 1, "services": {"image_generation": {}}}
    license = make_license(name="ordered", policy=policy, limit=0)
    license.license_type.guardrails = {"input": {"patterns": ["x"]}}
    license.license_type.save()
    good = {"Authorization": f"Bearer {make_key(license)}"}
    bad_body = {"model": SMALL}
    body = {"model": SMALL, "input": "x"}
    # 1 before 2: a malformed or unknown credential wins over an invalid body
    assert error(embed(client, {"Authorization": "Token x"}, bad_body), 401) == (
        "Authorization header must use the Bearer scheme"
    )
    assert (
        error(embed(client, {"Authorization": "Bearer nope"}, bad_body), 401) == "Invalid API key"
    )
    # 2 before 3: an invalid body wins over a missing header
    assert embed(client, {}, bad_body).status_code == 422
    assert error(embed(client, {}, body), 401) == "Authentication required"
    # 3 before 4
    assert embed(client, {}, body, **{"X-Service-Provider": "a/b/c"}).status_code == 401
    # 4 before 5 (out of budget)
    assert error(embed(client, good, body, **{"X-Service-Metadata": "[]"}), 400) == (
        "X-Service-Metadata must be a JSON object"
    )
    # 5 before 6 (service not enabled)
    assert error(embed(client, good, body), 400) == "Your license is out of budget"
    license.budget_limit = None
    license.save()
    # 6 before 7 (unknown pinned provider)
    assert policy_error(embed(client, good, body, **{"X-Service-Provider": "nope"}))[1] is None
    license.license_type.policy = {"version": 1, "services": {"embeddings": {}}}
    license.license_type.save()
    # 7 before 8 (the guardrail would match "x")
    assert error(embed(client, good, body, **{"X-Service-Provider": "nope"}), 400).startswith(
        "No provider available"
    )
    # 8 before 9
    assert error(embed(client, good, body), 400) == "Request blocked by guardrail"
    assert catalog["direct"].requests == [] and refusal_codes() == [
        "out_of_budget",
        "policy_denied",
        "provider_selection",
        "guardrail_blocked",
    ]


# --- concurrency -------------------------------------------------------------------------------


def test_concurrent_charges_on_one_wallet(gateway, catalog, make_license, make_key):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row-level concurrency is only meaningful on PostgreSQL")
    import asyncio

    import httpx

    license = make_license(name="busy", limit=10_000_000)
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    inputs = [" ".join(["w"] * (i + 1) * 7) for i in range(60)]

    async def fire():
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            return await asyncio.gather(
                *(
                    http.post(
                        "/v1/embeddings",
                        json={"model": "text-embedding-3-large", "input": text},
                        headers=auth,
                    )
                    for text in inputs
                )
            )

    responses = asyncio.run(fire())
    assert [r.status_code for r in responses] == [200] * len(inputs)
    charged = sum(r.json()["usage"]["credits_used"] for r in responses)
    expected = sum(math.ceil(len(text.split()) * 0.13) for text in inputs)
    wallet = Wallet.objects.get()
    ledger = sum(Transaction.objects.values_list("credits", flat=True))
    assert wallet.spent == ledger == charged == expected
    assert Transaction.objects.count() == len(inputs)
    remaining = sorted(r.json()["usage"]["credits_remaining"] for r in responses)
    assert remaining[0] == 10_000_000 - expected  # the last charge saw every other one
    assert len(set(remaining)) == len(inputs)  # no two charges saw the same balance
    json.dumps(remaining)
