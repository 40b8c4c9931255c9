"""The fakes behind search, fetch and moderation speak their real wire formats (checked here
with a plain HTTP client, without the gateway)."""

from __future__ import annotations

import io

import httpx
import pypdf
import pytest

from fake_upstreams import BraveFake, OpenAIFake, OpenAlexFake, WebsiteFake, serve


@pytest.fixture(scope="module")
def brave():
    with serve(BraveFake(api_key="tok")) as fake:
        yield fake


@pytest.fixture(scope="module")
def openalex():
    with serve(OpenAlexFake(api_key="key")) as fake:
        yield fake


def test_brave_answer_and_errors(brave):
    url = brave.base_url + "/res/v1/web/search"
    ok = httpx.get(
        url,
        params={"q": "moon (site:nasa.gov)", "count": 2},
        headers={"X-Subscription-Token": "tok"},
    )
    body = ok.json()
    assert body["type"] == "search" and body["query"]["original"] == "moon (site:nasa.gov)"
    assert [r["meta_url"]["hostname"] for r in body["web"]["results"]] == ["nasa.gov"] * 2
    assert {"title", "url", "description", "page_age", "age", "profile"} <= set(
        body["web"]["results"][0]
    )
    bad_token = httpx.get(url, params={"q": "x"}, headers={"X-Subscription-Token": "no"})
    assert bad_token.status_code == 422
    assert bad_token.json()["error"]["code"] == "SUBSCRIPTION_TOKEN_INVALID"
    too_many = httpx.get(
        url, params={"q": "x", "count": 21}, headers={"X-Subscription-Token": "tok"}
    )
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "VALIDATION"
    brave.fail_next(429)
    limited = httpx.get(url, params={"q": "x"}, headers={"X-Subscription-Token": "tok"})
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "RATE_LIMITED"
    assert brave.last.headers["x-subscription-token"] == "tok"


def test_openalex_answer_and_errors(openalex):
    url = openalex.base_url + "/works"
    body = httpx.get(url, params={"search": "sea ice", "per-page": 4}).json()
    assert body["meta"]["per_page"] == 4 and len(body["results"]) == 4
    work = body["results"][0]
    assert work["abstract_inverted_index"]["sea"] == [2]
    assert work["primary_location"]["source"]["display_name"]
    assert (
        body["results"][2]["doi"] is None and body["results"][3]["abstract_inverted_index"] is None
    )
    assert httpx.get(url, params={"search": "x", "api_key": "key"}).status_code == 200
    wrong = httpx.get(url, params={"search": "x", "api_key": "nope"})
    assert wrong.status_code == 401 and set(wrong.json()) == {"error", "message"}
    assert httpx.get(url, params={"search": "x", "per-page": 500}).status_code == 400
    assert httpx.get(url, params={"search": "x", "filter": "nope:1"}).status_code == 400


def test_openai_moderations():
    with serve(OpenAIFake(api_key="k")) as fake:
        answer = httpx.post(
            fake.base_url + "/moderations",
            json={"model": "omni-moderation-latest", "input": ["hello", "kill it"]},
            headers={"Authorization": "Bearer k"},
        ).json()
        assert answer["id"].startswith("modr-") and answer["model"] == "omni-moderation-2024-09-26"
        assert [r["flagged"] for r in answer["results"]] == [False, True]
        assert answer["results"][1]["categories"]["violence"] is True
        single = httpx.post(
            fake.base_url + "/moderations",
            json={"input": "fine"},
            headers={"Authorization": "Bearer k"},
        ).json()
        assert len(single["results"]) == 1
        missing = httpx.post(
            fake.base_url + "/moderations", json={}, headers={"Authorization": "Bearer k"}
        )
        assert missing.status_code == 400


def test_website_pages():
    with serve(WebsiteFake()) as site:
        pdf = httpx.get(site.origin + "/paper.pdf")
        assert pdf.headers["content-type"] == "application/pdf"
        reader = pypdf.PdfReader(io.BytesIO(pdf.content))
        assert reader.pages[0].extract_text() == "Mitochondria are the powerhouse of the cell"
        hop = httpx.get(site.origin + "/redirect", params={"to": "http://10.0.0.1/", "status": 307})
        assert (hop.status_code, hop.headers["location"]) == (307, "http://10.0.0.1/")
        assert httpx.get(site.origin + "/chain/2").headers["location"] == "/chain/1"
        assert "content-length" not in httpx.get(site.origin + "/trickle").headers
