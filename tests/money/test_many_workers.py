"""Many workers, one ledger: four worker processes on one database with Redis take concurrent
charged requests; every answer is in the ledger once, the wallet holds exactly the ledger's
sum, the budget's overshoot stays within the requests in flight, and a fair-use limit holds
across the workers. PostgreSQL only (the row locking it relies on)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db import connection
from django.db.models import Sum

from licensing.models import Transaction, Wallet
from licensing.rules.policy import open_policy_document
from tests.processes import redis_server_or_skip, running_workers

pytestmark = pytest.mark.slow  # Gateway worker processes against PostgreSQL and Redis

SMALL = "text-embedding-3-small"
BODY = {"model": SMALL, "input": "a few words to embed", "encoding_format": "float"}
WORKERS = 4


@pytest.fixture
def four_workers(transactional_db, tmp_path, catalog):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    server = redis_server_or_skip(tmp_path)
    try:
        with running_workers(WORKERS, tmp_path, {"REDIS_URL": server.url}) as workers:
            yield workers
    finally:
        server.stop()


def fire(workers, headers, count: int, threads: int = 16) -> list[httpx.Response]:
    clients = [httpx.Client(base_url=w.url, timeout=30) for w in workers]
    try:

        def one(n):
            return clients[n % len(clients)].post("/v1/embeddings", headers=headers, json=BODY)

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, range(count)))
    finally:
        for client in clients:
            client.close()


def test_ledger_equals_wallet_equals_answers(four_workers, make_license, make_key):
    limit = 150  # one micro-credit a request: the budget runs out part way
    license = make_license(name="shared", limit=limit, period="daily")
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    answers = fire(four_workers, headers, 400)
    ok = [r for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code == 400]
    assert len(ok) + len(refused) == len(answers), {r.status_code for r in answers}
    assert ok and refused  # the budget ran out under load

    charged = Transaction.objects.filter(license=license, credits__gt=0)
    assert charged.count() == len(ok)
    assert {r.headers["X-Request-Id"] for r in ok} == set(
        charged.values_list("request_id", flat=True)
    )
    billed = sum(r.json()["usage"]["credits_used"] for r in ok)
    ledger_sum = charged.aggregate(total=Sum("credits"))["total"]
    wallet = Wallet.objects.get(license=license)
    assert billed == ledger_sum == wallet.spent
    # Overshoot is bounded by the requests in flight (16 at most, one charge each).
    per_request = max(r.json()["usage"]["credits_used"] for r in ok)
    assert limit <= wallet.spent <= limit + 16 * per_request
    assert Transaction.objects.filter(license=license, error_code="out_of_budget").count() == len(
        refused
    )


def test_fair_use_holds_across_workers(four_workers, make_license, make_key):
    license = make_license(name="fair-shared")
    license.license_type.policy = {
        **open_policy_document(),
        "limits": {"holder": {"requests_per_minute": 25}},
    }
    license.license_type.save()
    # The burst must fall in one minute's window (the workers are on the real clock): one that
    # crossed into the next minute is fired once more by a fresh holder, which cannot cross too.
    for _attempt in range(2):
        headers = {"Authorization": f"Bearer {make_key(license)}"}
        started = time.time() // 60
        answers = fire(four_workers, headers, 60)
        if time.time() // 60 == started:
            break
    statuses = [r.status_code for r in answers]
    assert (statuses.count(200), statuses.count(429)) == (25, 35)
    assert all(int(r.headers["Retry-After"]) >= 1 for r in answers if r.status_code == 429)
    rows = Transaction.objects.filter(request_id__in=[r.headers["X-Request-Id"] for r in answers])
    assert rows.filter(outcome="success").count() == 25
    assert rows.filter(error_code="rate_limited").count() == 35
