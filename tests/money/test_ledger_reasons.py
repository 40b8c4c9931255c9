"""What a reviewer finds in the ledger: refusals after the caller is identified (0 credits, never a
wallet), the provider's answer id a student quotes, and for every failed row its status class,
error code and the reason (sanitized); validation errors and unknown credentials stay out of the
ledger and are counted in the access log."""

from __future__ import annotations

import json
import logging

import pytest

from gateway_site.logs import JsonFormatter
from licensing.ledger.actions import transaction_record_once
from licensing.ledger.record import LedgerEntry
from licensing.ledger.spool import _decode, _encode
from licensing.models import Transaction, Wallet
from tests.kit import wait_for_ledger, wait_until
from tests.ledger_helpers import refusal_codes

MINI = "gpt-4o-mini"
SMALL = "text-embedding-3-small"
HELLO = [{"role": "user", "content": "hello"}]


def row_of(response) -> Transaction:
    return Transaction.objects.get(request_id=response.headers["X-Request-Id"])


def wait_for_row(request_id: str, timeout: float = 5.0) -> Transaction:
    return wait_until(
        lambda: Transaction.objects.filter(request_id=request_id).first(),
        timeout=timeout,
        what=f"no ledger row for {request_id}",
    )


def limited_key(make_license, make_key, *, limit, policy=None, guardrails=None):
    license = make_license(name="limited", limit=limit, period="daily")
    if policy is not None or guardrails is not None:
        license.license_type.policy = policy or license.license_type.policy
        license.license_type.guardrails = guardrails or {}
        license.license_type.save()
    return license, {"Authorization": f"Bearer {make_key(license)}"}


def spend(license) -> list[int]:
    return list(Wallet.objects.filter(license=license).values_list("spent", flat=True))


# --- refusals ---------------------------------------------------------------------------------


def test_policy_refusal_is_a_row_with_its_message(client, catalog, make_license, make_key):
    policy = {
        "version": 1,
        "services": {"embeddings": {"params": {"model": {"allowed": ["text-embedding-3-large"]}}}},
    }
    license, auth = limited_key(make_license, make_key, limit=10**6, policy=policy)
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert response.status_code == 403
    row = row_of(response)
    assert (row.status_code, row.outcome, row.error_code, row.credits) == (
        403,
        "denied",
        "policy_denied",
        0,
    )
    assert row.error_message == response.json()["error"]["message"]
    assert "'model' must be one of" in row.error_message
    assert (row.service, row.requested_model, row.provider, row.wallet_id) == (
        "embeddings",
        SMALL,
        "",
        None,
    )
    assert row.api_key_id is not None and row.license_id == license.id
    assert catalog["direct"].requests == [] and spend(license) in ([], [0])


def test_out_of_budget_refusal_never_touches_the_wallet(client, catalog, make_license, make_key):
    license, auth = limited_key(make_license, make_key, limit=1)
    body = {"model": SMALL, "input": "one two three"}
    assert client.post("/v1/embeddings", headers=auth, json=body).status_code == 200
    before = spend(license)
    refused = [client.post("/v1/embeddings", headers=auth, json=body) for _ in range(3)]
    assert [r.status_code for r in refused] == [400] * 3
    assert spend(license) == before
    assert refusal_codes() == ["out_of_budget"] * 3
    row = row_of(refused[0])
    assert (row.outcome, row.error_message) == ("denied", "Your license is out of budget")
    assert len(catalog["direct"].requests) == 1


def test_input_guardrail_and_provider_selection_refusals(client, catalog, make_license, make_key):
    license, auth = limited_key(
        make_license, make_key, limit=10**6, guardrails={"input": {"patterns": ["(?i)exam"]}}
    )
    blocked = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "EXAM"})
    pinned = client.post(
        "/v1/embeddings",
        headers={**auth, "X-Service-Provider": "cloud"},
        json={"model": SMALL, "input": "fine"},
    )
    assert (blocked.status_code, pinned.status_code) == (400, 400)
    assert refusal_codes() == ["guardrail_blocked", "provider_selection"]
    assert row_of(pinned).error_message == (
        "No provider available for endpoint 'embeddings' under the current pins"
    )
    assert catalog["direct"].requests == [] and spend(license) in ([], [0])


def test_refusals_of_an_unlimited_license_open_no_wallet(client, auth, license, catalog):
    client.post(
        "/v1/embeddings",
        headers={**auth, "X-Service-Provider": "nope"},
        json={"model": SMALL, "input": "x"},
    )
    assert refusal_codes() == ["provider_selection"]
    assert not Wallet.objects.exists()


def test_validation_and_unknown_credentials_stay_out_of_the_ledger(client, auth, catalog, caplog):
    logger = logging.getLogger("gateway.access")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            invalid = client.post("/v1/embeddings", headers=auth, json={"model": SMALL})
            unknown = client.post(
                "/v1/embeddings",
                headers={"Authorization": "Bearer sk-svc-" + "x" * 43},
                json={"model": SMALL, "input": "x"},
            )
            header = client.post(
                "/v1/embeddings",
                headers={**auth, "X-Service-Metadata": "[]"},
                json={"model": SMALL, "input": "x"},
            )
            denied = client.post(
                "/v1/embeddings",
                headers={**auth, "X-Service-Provider": "nope"},
                json={"model": SMALL, "input": "x"},
            )
    finally:
        logger.removeHandler(caplog.handler)
    assert (invalid.status_code, unknown.status_code, header.status_code) == (422, 401, 400)
    assert list(Transaction.objects.values_list("request_id", flat=True)) == [
        denied.headers["X-Request-Id"]
    ]
    lines = {
        line["request_id"]: line
        for line in (
            json.loads(JsonFormatter().format(r))
            for r in caplog.records
            if r.name == "gateway.access"
        )
    }
    codes = [lines[r.headers["X-Request-Id"]]["error_code"] for r in (invalid, unknown, header)]
    assert codes == ["validation_error", "unauthenticated", "invalid_header"]
    assert lines[denied.headers["X-Request-Id"]]["error_code"] == "provider_selection"


# --- answer ids -------------------------------------------------------------------------------


def test_chat_answer_id_is_stored(sdk, catalog):
    answer = sdk.chat.completions.create(model=MINI, messages=HELLO)
    assert answer.id.startswith("chatcmpl-")
    row = Transaction.objects.get()
    assert (row.upstream_id, row.outcome, row.error_code) == (answer.id, "success", "")


def test_streamed_chat_answer_id_is_stored(sdk, catalog):
    stream = sdk.chat.completions.create(model=MINI, messages=HELLO, stream=True)
    ids = {chunk.id for chunk in stream}
    [answer_id] = ids
    rows = Transaction.objects.all()
    wait_for_ledger(1, timeout=5)
    assert rows.get().upstream_id == answer_id and answer_id.startswith("chatcmpl-")


def test_responses_answer_ids_are_stored(sdk, catalog):
    answer = sdk.responses.create(model=MINI, input="hi")
    assert Transaction.objects.get().upstream_id == answer.id
    with sdk.responses.stream(model=MINI, input="hi") as stream:
        final = stream.get_final_response()
    assert final.id.startswith("resp_") and final.id != answer.id
    wait_for_ledger(2, timeout=5)
    assert Transaction.objects.filter(upstream_id=final.id).count() == 1


def test_embeddings_have_no_answer_id(client, auth, catalog):
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert row_of(response).upstream_id == ""


# --- reasons of failed rows -------------------------------------------------------------------


@pytest.mark.parametrize("upstream_status", [429, 500, 401])
def test_provider_unavailable_keeps_the_reason(client, auth, catalog, upstream_status):
    catalog["direct"].fail_next(upstream_status)
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert response.json() == {"error": {"message": "Service temporarily unavailable"}}
    row = row_of(response)
    assert (row.status_code, row.outcome, row.error_code, row.credits) == (
        503,
        "failure",
        "provider_unavailable",
        0,
    )
    assert row.error_message == (
        f"Service temporarily unavailable (openai answered {upstream_status})"
    )
    assert row.provider == "direct"


def test_provider_rejection_keeps_the_sanitized_message(client, auth, catalog):
    catalog["direct"].fail_next(
        400,
        body={
            "error": {
                "message": "Bad input, see https://platform.openai.com/docs or ask x@openai.com",
                "type": "invalid_request_error",
            }
        },
    )
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert response.status_code == 400
    row = row_of(response)
    assert (row.outcome, row.error_code) == ("client_error", "provider_rejected")
    assert row.error_message == response.json()["error"]["message"]
    assert "http" not in row.error_message and "@" not in row.error_message


def test_provider_timeout_reason(client, auth, catalog):
    from catalog.models import Connection

    connection = Connection.objects.get(provider__slug="direct", name="default")
    connection.timeout = 0.3
    connection.save()
    catalog["direct"].hang_next(2)
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert response.status_code == 503
    row = row_of(response)
    assert row.error_code == "provider_unavailable" and "timeout" in row.error_message


def test_stream_failing_midway_is_stream_failed(client, auth, catalog):
    catalog["direct"].stream_fail_after = 2
    response = client.post(
        "/v1/chat/completions",
        headers=auth,
        json={"model": MINI, "messages": HELLO, "stream": True},
    )
    assert response.status_code == 200
    row = wait_for_row(response.headers["X-Request-Id"])
    assert (row.status_code, row.outcome, row.error_code) == (503, "failure", "stream_failed")
    assert row.error_message == "Service temporarily unavailable"
    assert row.upstream_id.startswith("chatcmpl-")


def test_output_guardrail_block_is_charged_and_denied(client, catalog, make_license, make_key):
    license, auth = limited_key(
        make_license, make_key, limit=10**6, guardrails={"output": {"patterns": ["(?s).+"]}}
    )
    response = client.post(
        "/v1/chat/completions", headers=auth, json={"model": MINI, "messages": HELLO}
    )
    assert response.json()["error"]["message"] == "Request blocked by guardrail"
    row = row_of(response)
    assert (row.outcome, row.error_code) == ("denied", "output_blocked")
    assert row.credits > 0 and spend(license) == [row.credits]
    assert row.upstream_id.startswith("chatcmpl-")
    assert refusal_codes() == []


# --- the spool keeps refusals too -------------------------------------------------------------


def test_a_spooled_refusal_is_written_without_a_wallet(transactional_db, license):
    entry = LedgerEntry(
        request_id="f" * 32,
        license_id=license.id,
        api_key_id=None,
        end_user_id=None,
        service="embeddings",
        requested_model=SMALL,
        billed_model="",
        provider="",
        connection="",
        status_code=403,
        outcome="denied",
        error_code="policy_denied",
        error_message="service 'embeddings' is not enabled for this license",
    )
    decoded, budget = _decode(_encode(entry, None))
    assert budget is None and decoded == entry
    assert transaction_record_once(entry=decoded, budget=None) is True
    assert transaction_record_once(entry=decoded, budget=None) is False
    assert refusal_codes() == ["policy_denied"] and not Wallet.objects.exists()


def test_an_old_spool_line_without_the_new_fields_still_replays(transactional_db, license):
    entry = LedgerEntry(
        request_id="e" * 32,
        license_id=license.id,
        api_key_id=None,
        end_user_id=None,
        service="embeddings",
        requested_model=SMALL,
        billed_model=SMALL,
        provider="direct",
        connection="default",
        status_code=503,
    )
    record = json.loads(_encode(entry, None))
    for name in ("upstream_id", "outcome", "error_code", "error_message"):
        record["entry"].pop(name)
    for name in ("institution_id", "license_name"):
        record["entry"].pop(name)
    decoded, _ = _decode(json.dumps(record).encode())
    assert transaction_record_once(entry=decoded, budget=None) is True
    row = Transaction.objects.get()
    assert (row.status_code, row.outcome, row.error_code) == (503, "failure", "")


def test_provider_text_no_database_takes_is_made_storable(client, auth, catalog):
    # A provider message with NUL: one such value would fail the whole group-committed batch
    # (and its neighbours' charges) on PostgreSQL.
    catalog["direct"].fail_next(
        400, body='{"error": {"message": "bad\\u0000 input here ' + "y" * 900 + '"}}'
    )
    response = client.post("/v1/embeddings", headers=auth, json={"model": SMALL, "input": "x"})
    assert response.status_code == 400
    row = row_of(response)
    assert "\x00" not in row.error_message and row.error_message.startswith("bad input")
    assert len(row.error_message) <= 500


def test_storable_text():
    from licensing.ledger.record import storable

    assert storable("a\x00b\ud800c", 10) == "ab?c"
    assert storable("x" * 300, 200) == "x" * 200
    assert storable("chatcmpl-ok", 200) == "chatcmpl-ok"
