"""POST /v1/web-search end to end: Brave (`websearch`) and OpenAlex (`academic`) fakes at the
network edge, the gateway over HTTP, the ledger and wallets in the real database."""

from __future__ import annotations

import openai
import pytest

from catalog.models import Model
from licensing.models import Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)


def search(client, auth, body, **headers):
    return client.post("/v1/web-search", json=body, headers={**auth, **headers})


def licensed(make_license, make_key, policy=None, **kwargs):
    license = make_license(name=kwargs.pop("name", "search-license"), policy=policy, **kwargs)
    return license, {"Authorization": f"Bearer {make_key(license)}"}


# --- web (Brave) -------------------------------------------------------------------------------


def test_web_search_shape_wire_format_and_ledger(client, auth, search_upstreams):
    response = search(client, auth, {"query": "photosynthesis", "num_results": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"id", "object", "query", "type", "results", "usage", "credits_remaining"}
    assert body["id"] == response.headers["X-Request-Id"]
    assert (body["object"], body["query"], body["type"]) == ("search", "photosynthesis", "web")
    assert len(body["results"]) == 3
    first = body["results"][0]
    assert set(first) == {"title", "url", "snippet", "date", "source"}
    assert first["url"] == "https://example.com/photosynthesis/1"
    # Brave's <strong> marks and entities are gone; page_age is cut to the date.
    assert first["snippet"] == "All about photosynthesis: page 1 on example.com & more."
    assert first["date"] == "2025-03-01" and first["source"] == "Example"
    assert body["usage"] == {"num_results": 3, "credits_used": 5000}
    assert body["credits_remaining"] is None

    sent = search_upstreams["websearch"].last
    assert (sent.method, sent.path) == ("GET", "/res/v1/web/search")
    assert sent.query == {"q": "photosynthesis", "count": "3"}
    assert sent.headers["x-subscription-token"] == "sk-upstream-test"
    assert "authorization" not in sent.headers

    row = Transaction.objects.get()
    assert (row.service, row.requested_model, row.billed_model) == (
        "web_search",
        "web-search",
        "web-search",
    )
    assert (row.provider, row.connection, row.status_code) == ("websearch", "default", 200)
    assert (row.units, row.credits, row.prompt_tokens) == (1, 5000, None)


def test_defaults_country_and_domain_filter(client, auth, search_upstreams):
    response = search(
        client,
        auth,
        {"query": "tides", "country": "gb", "search_domain_filter": ["bbc.co.uk", "nasa.gov"]},
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == 5  # num_results defaults to 5
    assert {r["url"].split("/")[2] for r in results} == {"bbc.co.uk", "nasa.gov"}
    sent = search_upstreams["websearch"].last.query
    assert sent == {"q": "tides (site:bbc.co.uk OR site:nasa.gov)", "count": "5", "country": "GB"}


def test_sdk_generic_post(sdk, search_upstreams):
    """The openai SDK has no search call; its generic `post` reaches the endpoint."""
    answer = sdk.post("/web-search", body={"query": "volcano", "num_results": 2}, cast_to=object)
    assert answer["object"] == "search" and len(answer["results"]) == 2
    with pytest.raises(openai.UnprocessableEntityError):
        sdk.post("/web-search", body={"query": ""}, cast_to=object)


def test_budget_is_charged_on_success_only(client, search_upstreams, make_license, make_key):
    license, auth = licensed(make_license, make_key, limit=12_000)
    assert search(client, auth, {"query": "a"}).json()["credits_remaining"] == 7_000
    search_upstreams["websearch"].fail_next(500)
    assert error(search(client, auth, {"query": "b"}), 503) == "Service temporarily unavailable"
    assert search(client, auth, {"query": "c"}).json()["credits_remaining"] == 2_000
    response = search(client, auth, {"query": "d"})  # 2,000 left: not out of budget yet
    assert response.json()["credits_remaining"] == 0
    assert error(search(client, auth, {"query": "e"}), 400) == "Your license is out of budget"
    assert Wallet.objects.get(license=license).spent == 15_000
    rows = Transaction.objects.order_by("created_at")
    assert [(r.status_code, r.credits, r.units, r.error_code) for r in rows] == [
        (200, 5000, 1, ""),
        (503, 0, None, "provider_unavailable"),
        (200, 5000, 1, ""),
        (200, 5000, 1, ""),
        (400, 0, None, "out_of_budget"),
    ]


def test_operator_price_from_the_catalog(client, auth, search_upstreams):
    entry = Model.objects.get(model_id="web-search")
    entry.cost = {"type": "per_call", "call": 1234}
    entry.save()
    assert search(client, auth, {"query": "x"}).json()["usage"]["credits_used"] == 1234


def test_brave_validation_error_is_a_400_with_its_message(client, auth, search_upstreams):
    response = search(client, auth, {"query": "x", "country": "zz"})
    assert error(response, 400) == "Unable to validate request parameter(s)"


def test_wrong_subscription_token_is_503(client, auth, search_upstreams):
    from catalog.services import connection_configure

    connection_configure(
        provider_slug="websearch", base_url=search_upstreams["websearch"].base_url, api_key="bad"
    )
    assert error(search(client, auth, {"query": "x"}), 503) == "Service temporarily unavailable"


def test_websearch_without_key_is_misconfigured(client, auth, catalog):
    from catalog.services import connection_configure

    connection_configure(provider_slug="websearch", base_url="http://127.0.0.1:9/")
    assert error(search(client, auth, {"query": "x"}), 400) == (
        "Connection 'default' is misconfigured: missing 'api_key' credential"
    )


# --- academic (OpenAlex) -----------------------------------------------------------------------


def test_academic_search_mapping(client, auth, search_upstreams):
    response = search(client, auth, {"query": "coral reefs", "type": "academic", "num_results": 5})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["type"] == "academic" and body["usage"] == {"num_results": 5, "credits_used": 0}
    first, third, fourth, fifth = (body["results"][i] for i in (0, 2, 3, 4))
    assert first["url"].startswith("https://doi.org/10.5555/fake.")
    assert first["title"] == "On Coral Reefs: study 1"
    assert first["snippet"] == "We study coral reefs in depth and report results"
    assert first["date"] == "2020-01-15"
    assert first["source"] == "Journal of Made-up Results"
    assert third["url"].startswith("https://journals.example.org/article/")  # no DOI
    assert fourth["snippet"] == ""  # no abstract
    assert fifth["source"] is None  # no source
    sent = search_upstreams["academic"].last
    assert (sent.path, sent.query) == ("/works", {"search": "coral reefs", "per-page": "5"})
    row = Transaction.objects.get()
    assert (row.provider, row.requested_model, row.credits, row.units) == (
        "academic",
        "academic-search",
        0,
        1,
    )
    assert search_upstreams["websearch"].requests == []


def test_academic_country_filter_and_key(client, auth, search_upstreams):
    from catalog.services import connection_configure

    connection_configure(
        provider_slug="academic",
        base_url=search_upstreams["academic"].base_url,
        api_key="sk-upstream-test",
    )
    response = search(client, auth, {"query": "x", "type": "academic", "country": "de"})
    assert response.status_code == 200, response.text
    assert search_upstreams["academic"].last.query == {
        "search": "x",
        "per-page": "5",
        "filter": "authorships.institutions.country_code:DE",
        "api_key": "sk-upstream-test",
    }


def test_academic_domain_filter_is_refused(client, auth, search_upstreams):
    body = {"query": "x", "type": "academic", "search_domain_filter": ["nature.com"]}
    assert error(search(client, auth, body), 400) == (
        "'search_domain_filter' is only supported with type 'web'"
    )
    assert search_upstreams["academic"].requests == []
    assert refusal_codes() == ["provider_selection"]


def test_academic_without_an_academic_provider(client, search_upstreams, make_license, make_key):
    policy = {"version": 1, "services": {"web_search": {"providers": ["websearch"]}}}
    _, auth = licensed(make_license, make_key, policy)
    expected = "No provider available for endpoint 'web_search' under the current pins"
    assert error(search(client, auth, {"query": "x", "type": "academic"}), 400) == expected
    assert search(client, auth, {"query": "x"}).status_code == 200  # web still works
    # and the pin: web search pinned to the academic provider, or academic to websearch
    open_auth = licensed(make_license, make_key, name="open")[1]
    pinned = {"X-Service-Provider": "websearch"}
    assert error(search(client, open_auth, {"query": "x", "type": "academic"}, **pinned), 400) == (
        expected
    )
    pinned = {"X-Service-Provider": "academic"}
    assert error(search(client, open_auth, {"query": "x"}, **pinned), 400) == expected
    assert search_upstreams["academic"].requests == []


def test_license_without_any_search_provider(client, search_upstreams, make_license, make_key):
    policy = {"version": 1, "services": {"web_search": {"providers": ["direct"]}}}
    _, auth = licensed(make_license, make_key, policy)
    assert error(search(client, auth, {"query": "x"}), 400) == (
        "No provider available for endpoint 'web_search'"
    )


def test_openalex_error_message_is_passed_on(client, auth, search_upstreams):
    search_upstreams["academic"].fail_next(400, {"error": "Invalid", "message": "bad search"})
    assert error(search(client, auth, {"query": "x", "type": "academic"}), 400) == "bad search"


# --- validation, policy and the order of checks ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "type_", "loc"),
    [
        ({}, "missing", ["body", "query"]),
        ({"query": ""}, "string_too_short", ["body", "query"]),
        ({"query": 5}, "string_type", ["body", "query"]),
        ({"query": "x", "num_results": 0}, "greater_than_equal", ["body", "num_results"]),
        ({"query": "x", "num_results": 21}, "less_than_equal", ["body", "num_results"]),
        ({"query": "x", "num_results": "5"}, "int_type", ["body", "num_results"]),
        ({"query": "x", "num_results": 10**6}, "less_than_equal", ["body", "num_results"]),
        ({"query": "x", "type": "news"}, "literal_error", ["body", "type"]),
        ({"query": "x", "country": "usa"}, "string_pattern_mismatch", ["body", "country"]),
        ({"query": "x", "search_domain_filter": "a.com"}, "list_type", None),
        (
            {"query": "x", "search_domain_filter": ["not a domain"]},
            "string_pattern_mismatch",
            ["body", "search_domain_filter", 0],
        ),
        (
            {"query": "x", "search_domain_filter": [f"d{i}.com" for i in range(21)]},
            "too_long",
            ["body", "search_domain_filter"],
        ),
        ({"query": "x", "stream": True}, "extra_forbidden", ["body", "stream"]),
        ({"query": "x", "model": "sonar"}, "extra_forbidden", ["body", "model"]),
    ],
)
def test_validation(client, auth, search_upstreams, body, type_, loc):
    response = search(client, auth, body)
    assert response.status_code == 422, response.text
    item = response.json()["detail"][0]
    assert item["type"] == type_
    if loc is not None:
        assert item["loc"] == loc
    assert search_upstreams["websearch"].requests == []


def test_422_comes_before_missing_credentials(client, search_upstreams):
    response = client.post("/v1/web-search", json={"query": ""})
    assert response.status_code == 422
    response = client.post("/v1/web-search", json={"query": "x"})
    assert error(response, 401) == "Authentication required"


def test_bad_key_comes_before_422(client, search_upstreams):
    response = client.post(
        "/v1/web-search", json={"query": ""}, headers={"Authorization": "Bearer sk-svc-nope"}
    )
    assert error(response, 401) == "Invalid API key"


def test_service_not_enabled(client, search_upstreams, make_license, make_key):
    policy = {"version": 1, "services": {"embeddings": {}}}
    _, auth = licensed(make_license, make_key, policy)
    response = search(client, auth, {"query": "x"})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "service 'web_search' is not enabled for this license",
        "code": "policy_denied",
        "param": None,
    }


def test_policy_before_provider_selection(client, search_upstreams, make_license, make_key):
    """A policy 403 wins over the academic-provider 400 (check 6 before check 7)."""
    policy = {
        "version": 1,
        "services": {
            "web_search": {"providers": ["websearch"], "params": {"num_results": {"max": 3}}}
        },
    }
    _, auth = licensed(make_license, make_key, policy)
    response = search(client, auth, {"query": "x", "type": "academic", "num_results": 10})
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "'num_results' must be <= 3"
    response = search(client, auth, {"query": "x", "type": "academic", "num_results": 2})
    assert response.status_code == 400


def test_policy_on_type_and_query(client, search_upstreams, make_license, make_key):
    policy = {
        "version": 1,
        "services": {
            "web_search": {"params": {"type": {"fixed": "academic"}, "query": {"max_length": 10}}}
        },
    }
    _, auth = licensed(make_license, make_key, policy)
    response = search(client, auth, {"query": "x", "type": "web"})
    assert response.json()["error"]["message"] == "'type' must be 'academic'"
    response = search(client, auth, {"query": "a long query", "type": "academic"})
    assert response.json()["error"]["message"] == "'query' exceeds maximum length of 10"


def test_malformed_provider_header_before_budget(client, search_upstreams, make_license, make_key):
    _, auth = licensed(make_license, make_key, limit=0)
    response = search(client, auth, {"query": "x"}, **{"X-Service-Provider": "a/b/c"})
    assert error(response, 400) == "Malformed X-Service-Provider header: 'a/b/c'"
    assert error(search(client, auth, {"query": "x"}), 400) == "Your license is out of budget"


def test_input_guardrail_blocks_the_query(client, search_upstreams, license, auth):
    license.license_type.guardrails = {"input": {"patterns": ["(?i)forbidden"]}}
    license.license_type.save()
    response = search(client, auth, {"query": "a Forbidden topic"})
    assert error(response, 400) == "Request blocked by guardrail"
    assert search_upstreams["websearch"].requests == []
    assert refusal_codes() == ["guardrail_blocked"]


def test_output_guardrail_blocks_and_charges(client, search_upstreams, license, auth):
    license.license_type.guardrails = {"output": {"patterns": ["result 2"]}}
    license.license_type.save()
    assert error(search(client, auth, {"query": "x"}), 400) == "Request blocked by guardrail"
    row = Transaction.objects.get()
    assert (row.status_code, row.credits) == (400, 5000)


# --- the rest of the surface -------------------------------------------------------------------


def test_models_list_is_unchanged_and_license_lists_the_services(client, auth, search_upstreams):
    ids = {m["id"] for m in client.get("/v1/models", headers=auth).json()["data"]}
    assert not ids & {"web-search", "academic-search", "web-fetch"}
    assert "text-embedding-3-small" in ids
    services = client.get("/v1/license", headers=auth).json()["services"]
    assert "web_search" in services and "fetch" in services


def test_openapi_documents_both_endpoints(client):
    paths = client.get("/v1/openapi.json").json()["paths"]
    assert "post" in paths["/v1/web-search"] and "post" in paths["/v1/fetch"]


def test_wrong_method(client, auth):
    response = client.get("/v1/web-search", headers=auth)
    assert response.status_code == 405
