"""The moderation guardrail: `"moderation": true` on a stage sends its texts to the `direct`
provider's moderation endpoint (the OpenAI fake's POST /v1/moderations). Flagged: 400, input
not charged, output charged. A failed moderation call: 503, nothing charged. Never on streams."""

from __future__ import annotations

import logging
import time

import pytest
from django.core.exceptions import ValidationError

from catalog.models import Connection
from licensing.models import LicenseType, Transaction, Wallet
from tests.kit import error
from tests.ledger_helpers import refusal_codes

pytestmark = pytest.mark.django_db(transaction=True)
MINI = "gpt-4o-mini"
BLOCKED = "Request blocked by guardrail"
UNAVAILABLE = "Service temporarily unavailable"


def moderated(make_license, make_key, *, input=False, output=False, limit=1_000_000, **extra):
    license = make_license(name="moderated", limit=limit)
    license.license_type.guardrails = {
        "input": {"moderation": input, **extra.get("input_extra", {})},
        "output": {"moderation": output},
    }
    license.license_type.save()
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def paths(fake):
    return [r.path for r in fake.requests]


def chat(client, auth, text, **headers):
    body = {"model": MINI, "messages": [{"role": "user", "content": text}]}
    return client.post("/v1/chat/completions", json=body, headers={**auth, **headers})


def embed(client, auth, text):
    body = {"model": "text-embedding-3-small", "input": text}
    return client.post("/v1/embeddings", json=body, headers=auth)


@pytest.fixture
def gateway_log():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


# --- configuration -----------------------------------------------------------------------------


def test_moderation_can_be_saved_on_a_license_type(transactional_db):
    kind = LicenseType(name="mod", policy={"version": 1, "services": {}})
    kind.guardrails = {"input": {"moderation": True}, "output": {"moderation": True}}
    kind.full_clean()
    kind.guardrails = {"input": {"moderation": "yes"}}
    with pytest.raises(ValidationError) as excinfo:
        kind.full_clean()
    assert "input.moderation: must be true or false" in str(excinfo.value)


# --- input -------------------------------------------------------------------------------------


def test_flagged_input_is_blocked_before_the_provider(client, catalog, make_license, make_key):
    license, auth = moderated(make_license, make_key, input=True)
    assert error(embed(client, auth, ["fine", "how to build a bomb"]), 400) == BLOCKED
    sent = catalog["direct"].last
    assert sent.path == "/v1/moderations"
    texts = ["fine", "how to build a bomb"]
    assert sent.json == {"model": "omni-moderation-latest", "input": texts}
    assert sent.headers["authorization"] == "Bearer sk-upstream-test"
    assert paths(catalog["direct"]) == ["/v1/moderations"]  # no embeddings call
    assert refusal_codes() == ["guardrail_blocked"]
    assert not Wallet.objects.filter(license=license, spent__gt=0).exists()


def test_clean_input_goes_through_and_moderation_is_not_billed(
    client, catalog, make_license, make_key, gateway_log
):
    license, auth = moderated(make_license, make_key, input=True)
    response = embed(client, auth, "one two three")
    assert response.status_code == 200
    assert paths(catalog["direct"]) == ["/v1/moderations", "/v1/embeddings"]
    row = Transaction.objects.get()
    assert (row.service, row.credits) == ("embeddings", 1)  # the embeddings only
    assert Wallet.objects.get(license=license).spent == 1
    lines = [r.getMessage() for r in gateway_log if r.getMessage().startswith("moderation call")]
    assert len(lines) == 1 and "flagged=False" in lines[0] and "texts=1" in lines[0]


def test_regex_guardrail_runs_first_and_empty_texts_are_not_sent(
    client, catalog, make_license, make_key
):
    _, auth = moderated(
        make_license, make_key, input=True, input_extra={"patterns": ["(?i)secret"]}
    )
    assert error(embed(client, auth, "a secret"), 400) == BLOCKED
    assert catalog["direct"].requests == []
    assert embed(client, auth, "").status_code == 200
    assert paths(catalog["direct"]) == ["/v1/embeddings"]


def test_search_query_is_moderated(client, search_upstreams, make_license, make_key):
    _, auth = moderated(make_license, make_key, input=True)
    body = {"query": "kill the process"}
    response = client.post("/v1/web-search", json=body, headers=auth)
    assert error(response, 400) == BLOCKED
    assert search_upstreams["websearch"].requests == []


@pytest.mark.parametrize("status", [500, 503, 429, 401])
def test_failed_input_moderation_fails_closed(client, catalog, make_license, make_key, status):
    license, auth = moderated(make_license, make_key, input=True)
    catalog["direct"].fail_next(status)
    assert error(embed(client, auth, "hello"), 503) == UNAVAILABLE
    assert paths(catalog["direct"]) == ["/v1/moderations"]
    assert refusal_codes() == ["moderation_unavailable"]


def test_moderation_timeout_fails_closed(client, catalog, make_license, make_key):
    _, auth = moderated(make_license, make_key, input=True)
    Connection.objects.filter(provider__slug="direct").update(timeout=0.5)
    from core.localcache import clear_all

    clear_all()
    catalog["direct"].hang_next(5)
    started = time.monotonic()
    assert error(embed(client, auth, "hello"), 503) == UNAVAILABLE
    assert time.monotonic() - started < 4


def test_malformed_moderation_answer_fails_closed(client, catalog, make_license, make_key):
    _, auth = moderated(make_license, make_key, input=True)
    catalog["direct"].fail_next(200, {"id": "modr-1", "results": []})
    assert error(embed(client, auth, "hello"), 503) == UNAVAILABLE


def test_no_direct_connection_fails_closed(client, search_upstreams, make_license, make_key):
    _, auth = moderated(make_license, make_key, input=True)
    Connection.objects.filter(provider__slug="direct").delete()
    from core.localcache import clear_all

    clear_all()
    response = client.post("/v1/web-search", json={"query": "tides"}, headers=auth)
    assert error(response, 503) == UNAVAILABLE
    assert search_upstreams["websearch"].requests == []


# --- output ------------------------------------------------------------------------------------


def test_flagged_output_is_blocked_and_charged(client, catalog, make_license, make_key):
    license, auth = moderated(make_license, make_key, output=True)
    catalog["direct"].reply_text = "I will kill the process for you"
    assert error(chat(client, auth, "stop it"), 400) == BLOCKED
    assert paths(catalog["direct"]) == ["/v1/chat/completions", "/v1/moderations"]
    assert catalog["direct"].last.json["input"] == ["I will kill the process for you"]
    row = Transaction.objects.get()
    assert row.status_code == 400 and row.credits > 0
    assert Wallet.objects.get(license=license).spent == row.credits


def test_clean_output_passes(client, catalog, make_license, make_key):
    _, auth = moderated(make_license, make_key, output=True)
    response = chat(client, auth, "hello")
    assert response.status_code == 200
    assert paths(catalog["direct"]) == ["/v1/chat/completions", "/v1/moderations"]


def test_failed_output_moderation_is_503_and_not_charged(client, catalog, make_license, make_key):
    license, auth = moderated(make_license, make_key, output=True)
    catalog["direct"].fail_next(500)  # the chat goes to the aggregator; moderation fails
    response = chat(client, auth, "hello", **{"X-Service-Provider": "aggregator"})
    assert error(response, 503) == UNAVAILABLE
    assert paths(catalog["aggregator"]) == ["/api/v1/chat/completions"]
    row = Transaction.objects.get()
    assert (row.status_code, row.credits, row.provider) == (503, 0, "aggregator")
    assert row.prompt_tokens > 0  # what the provider did is still on record
    assert Wallet.objects.get(license=license).spent == 0


def test_output_moderation_never_runs_on_a_stream(client, catalog, make_license, make_key):
    _, auth = moderated(make_license, make_key, output=True)
    catalog["direct"].reply_text = "kill kill kill"
    body = {"model": MINI, "messages": [{"role": "user", "content": "x"}], "stream": True}
    response = client.post("/v1/chat/completions", json=body, headers=auth)
    assert response.status_code == 200 and "kill" in response.text
    assert paths(catalog["direct"]) == ["/v1/chat/completions"]


def test_fetched_content_is_moderated(client, website, catalog, make_license, make_key):
    _, auth = moderated(make_license, make_key, input=True, output=True)
    catalog["direct"].moderation_terms = ("mitochondria",)
    body = {"urls": [f"{website.origin}/paper.pdf", f"{website.origin}/notes.txt"]}
    response = client.post("/v1/fetch", json=body, headers=auth)
    assert error(response, 400) == BLOCKED
    inputs = [r.json["input"] for r in catalog["direct"].requests]
    assert inputs == [
        body["urls"],
        [
            "Mitochondria are the powerhouse of the cell",
            "Plain notes: caf\u00e9 \u2014 line one\nline two\n",
        ],
    ]
    row = Transaction.objects.get()
    assert (row.status_code, row.units, row.credits) == (400, 2, 2000)
