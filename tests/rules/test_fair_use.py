"""Fair-use limits (policy `limits`): requests and tokens per minute per holder and per license,
429 `Rate limit exceeded` with Retry-After, checked before the budget and never charged; a
refusal is a ledger row; counters shared across worker processes through Redis."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from core import clock
from licensing.models import LicenseType, Transaction, Wallet
from licensing.rules import fairuse
from licensing.rules.policy import PolicyDocumentError, compile_policy, open_policy_document
from tests.ledger_helpers import refusal_codes
from tests.processes import redis_server_or_skip, running_workers

SMALL = "text-embedding-3-small"
BODY = {"model": SMALL, "input": "one two three four five six", "encoding_format": "float"}


def limited(make_license, make_key, limits: dict, *, keys: int = 1, budget: int | None = None):
    license = make_license(name="fair", limit=budget, period="daily")
    license.license_type.policy = {**open_policy_document(), "limits": limits}
    license.license_type.full_clean()
    license.license_type.save()
    headers = [{"Authorization": f"Bearer {make_key(license)}"} for _ in range(keys)]
    return license, headers


def post(client, headers):
    return client.post("/v1/embeddings", headers=headers, json=BODY)


def assert_429(response):
    assert response.status_code == 429, response.text
    assert response.json()["error"]["message"].startswith("Rate limit exceeded")
    assert 1 <= int(response.headers["Retry-After"]) <= 60


@pytest.fixture(autouse=True)
def fresh_counters():
    """The in-process counters outlive a test (ids repeat on SQLite): start each one afresh, on a
    clock that stands still, so its requests all fall in one window wherever in the minute it
    runs (the gateway is served in a thread of this process and reads the same clock)."""
    fairuse.counters_reset()
    with clock.frozen() as frozen:
        yield frozen
    fairuse.counters_reset()


def test_requests_per_minute_per_holder(client, catalog, make_license, make_key):
    license, (first, second) = limited(
        make_license, make_key, {"holder": {"requests_per_minute": 2}}, keys=2, budget=10**6
    )
    assert [post(client, first).status_code for _ in range(2)] == [200, 200]
    spent = Wallet.objects.get(license=license).spent
    refused = post(client, first)
    assert_429(refused)
    assert post(client, second).status_code == 200  # another holder has its own minute
    assert Wallet.objects.get(license=license).spent > spent  # only by the second holder's
    row = Transaction.objects.get(request_id=refused.headers["X-Request-Id"])
    assert (row.status_code, row.outcome, row.credits, row.wallet_id) == (429, "denied", 0, None)
    seconds = refused.headers["Retry-After"]
    message = (
        "Rate limit exceeded: the limit of 2 requests per minute for each API key or user of "
        f"this license is reached; it resets in {seconds} s (at the next UTC minute; Retry-After)"
    )
    assert refused.json() == {"error": {"message": message}}
    assert row.error_message == f"{message} (holder requests per minute)"
    assert refusal_codes() == ["rate_limited"]
    assert len(catalog["direct"].requests) == 3


def test_a_new_minute_admits_again(client, catalog, make_license, make_key, fresh_counters):
    _, (headers,) = limited(make_license, make_key, {"holder": {"requests_per_minute": 1}})
    assert post(client, headers).status_code == 200
    refused = post(client, headers)
    assert_429(refused)
    fresh_counters.advance(int(refused.headers["Retry-After"]))  # to the next window's start
    assert post(client, headers).status_code == 200
    assert_429(post(client, headers))


def test_a_refused_holder_does_not_use_up_the_license(client, catalog, make_license, make_key):
    limits = {"holder": {"requests_per_minute": 2}, "license": {"requests_per_minute": 3}}
    _, (greedy, other) = limited(make_license, make_key, limits, keys=2)
    statuses = [post(client, greedy).status_code for _ in range(6)]
    assert statuses == [200, 200, 429, 429, 429, 429]
    assert post(client, other).status_code == 200  # the license's third request
    refused = post(client, other)
    assert_429(refused)
    row = Transaction.objects.get(request_id=refused.headers["X-Request-Id"])
    message = (
        "Rate limit exceeded: the limit of 3 requests per minute for this license as a whole "
        "(all its keys and users together) is reached; it resets in "
        f"{refused.headers['Retry-After']} s (at the next UTC minute; Retry-After)"
    )
    assert refused.json()["error"]["message"] == message
    assert row.error_message == f"{message} (license requests per minute)"


def test_tokens_per_minute(client, catalog, make_license, make_key):
    _, (headers,) = limited(make_license, make_key, {"holder": {"tokens_per_minute": 5}})
    first = post(client, headers)
    assert first.status_code == 200 and first.json()["usage"]["total_tokens"] > 5
    refused = post(client, headers)
    assert_429(refused)  # the window's tokens are spent
    message = refused.json()["error"]["message"]
    assert message.startswith("Rate limit exceeded: the limit of 5 tokens per minute for each")
    assert f"resets in {refused.headers['Retry-After']} s" in message


def test_checked_before_the_budget(client, catalog, make_license, make_key):
    _, (headers,) = limited(
        make_license, make_key, {"holder": {"requests_per_minute": 1}}, budget=0
    )
    assert post(client, headers).json()["error"]["message"] == "Your license is out of budget"
    assert_429(post(client, headers))
    assert refusal_codes() == ["out_of_budget", "rate_limited"]


def test_the_sdk_sees_a_rate_limit_error(gateway, catalog, make_license, make_key):
    _, (headers,) = limited(make_license, make_key, {"holder": {"requests_per_minute": 1}})
    key = headers["Authorization"].split()[1]
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    sdk.embeddings.create(model=SMALL, input="x", encoding_format="float")
    with pytest.raises(openai.RateLimitError) as raised:
        sdk.embeddings.create(model=SMALL, input="x", encoding_format="float")
    assert raised.value.status_code == 429 and raised.value.response.headers["Retry-After"]


def test_without_limits_nothing_is_counted(client, auth, catalog):
    assert all(post(client, auth).status_code == 200 for _ in range(5))
    assert compile_policy(open_policy_document()).limits is None


@pytest.mark.parametrize(
    "limits",
    [
        [],
        {"student": {"requests_per_minute": 1}},
        {"holder": {"requests_per_hour": 1}},
        {"holder": {"requests_per_minute": 0}},
        {"holder": {"requests_per_minute": 1.5}},
        {"holder": {"requests_per_minute": True}},
        {"holder": 5},
    ],
)
def test_bad_limits_are_refused_on_save(transactional_db, limits):
    document = {**open_policy_document(), "limits": limits}
    with pytest.raises(PolicyDocumentError):
        compile_policy(document)
    with pytest.raises(ValidationError) as raised:
        LicenseType(name="bad", policy=document).full_clean()
    assert "policy" in raised.value.message_dict


def test_windows_and_retry_after():
    limits = fairuse.Limits(holder_requests=1)
    window = fairuse.window_of(limits, 1, "key:1", now=120.2)
    assert (window.index, window.retry_after) == (2, 60)
    assert fairuse.window_of(limits, 1, "key:1", now=179.5).retry_after == 1

    counters = fairuse.LocalCounters()
    assert asyncio.run(counters.admit(window)) == 0
    assert asyncio.run(counters.admit(window)) == 1  # holder requests full
    later = fairuse.window_of(limits, 1, "key:1", now=181.0)
    assert asyncio.run(counters.admit(later)) == 0  # a new minute


def test_an_unreachable_redis_admits(client, catalog, make_license, make_key):
    _, (headers,) = limited(make_license, make_key, {"holder": {"requests_per_minute": 1}})
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        fairuse.counters_reset()
        try:
            assert [post(client, headers).status_code for _ in range(3)] == [200] * 3
        finally:
            fairuse.counters_reset()


@pytest.mark.slow
def test_limits_hold_across_worker_processes(transactional_db, tmp_path, make_license, make_key,
                                             catalog):  # fmt: skip
    server = redis_server_or_skip(tmp_path)
    env = {"REDIS_URL": server.url, "GATEWAY_INVALIDATION_FILE": str(tmp_path / "generation")}
    try:
        with running_workers(2, tmp_path, env) as workers:
            _limits_across(workers, make_license, make_key)
    finally:
        server.stop()


def _limits_across(workers, make_license, make_key):
    license, (headers,) = limited(make_license, make_key, {"holder": {"requests_per_minute": 3}})
    # The workers are other processes, on the real clock: a batch that crossed into the next
    # minute found its counters empty again, and is sent once more by a fresh holder (a batch
    # takes well under a minute, so the second cannot cross too).
    for _attempt in range(2):
        started = time.time() // fairuse.WINDOW
        statuses = [
            workers[n % 2].http.post("/v1/embeddings", headers=headers, json=BODY) for n in range(6)
        ]
        if time.time() // fairuse.WINDOW == started:
            break
        headers = {"Authorization": f"Bearer {make_key(license)}"}
    assert sorted(r.status_code for r in statuses) == [200] * 3 + [429] * 3
    sent = [r.headers["X-Request-Id"] for r in statuses]
    assert Transaction.objects.filter(request_id__in=sent, outcome="success").count() == 3
    for response in statuses:
        if response.status_code == 429:
            assert_429(response)
