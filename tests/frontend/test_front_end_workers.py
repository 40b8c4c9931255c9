"""Two students flooding one front-end key at once, through two gateway worker processes on
PostgreSQL (as tests/money/test_course_budget.py floods course keys): each student's wallets
(their allowance, their license wallet) equal their own ledger rows exactly, the pool equals
the course's rows, the allowance that runs out overshoots by the requests in flight at most, and
the other student is not held up by it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db.models import Sum

from core.errors import OUT_OF_BUDGET
from licensing.models import Transaction, Wallet

from .conftest import SMALL, as_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

THREADS = 12  # requests in flight at most: the overshoot bound of every level
BODY = {"model": SMALL, "input": "a few words to embed", "encoding_format": "float"}


@pytest.fixture
def two_workers(transactional_db, tmp_path, catalog):
    from django.db import connection

    from tests.processes import running_workers

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    with running_workers(2, tmp_path) as workers:
        yield workers


def ledger_sum(**filters) -> int:
    return Transaction.objects.filter(**filters).aggregate(s=Sum("credits"))["s"] or 0


def test_one_students_wallet_under_concurrent_requests_on_two_workers(two_workers, school):
    ana = school.student("ana@front.example")
    ben = school.student("ben@front.example")
    course = school.course("BIO-7A", members=[ana, ben], allowance=25, pool_limit=10_000)
    # Ana sends five requests in six: her allowance runs out; Ben's 20 fit in his.
    emails = ["ana@front.example"] * 5 + ["ben@front.example"]
    clients = [httpx.Client(base_url=w.url, timeout=30) for w in two_workers]
    try:

        def one(n: int):
            email = emails[n % len(emails)]
            client = clients[n % len(clients)]
            return email, client.post(
                "/v1/embeddings", headers=as_user(school.key, email), json=BODY
            )

        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(one, range(120)))
    finally:
        for client in clients:
            client.close()

    statuses = {(email, answer.status_code) for email, answer in answers}
    assert statuses == {("ana@front.example", 200), ("ana@front.example", 400),
                        ("ben@front.example", 200)}  # fmt: skip
    refused = [a for _, a in answers if a.status_code == 400]
    assert {a.json()["error"]["message"] for a in refused} == {OUT_OF_BUDGET}
    ok = {a.headers["X-Request-Id"] for _, a in answers if a.status_code == 200}
    charged = Transaction.objects.filter(license=school.license, credits__gt=0)
    assert set(charged.values_list("request_id", flat=True)) == ok
    assert set(charged.values_list("api_key_id", "course_id")) == {(school.key_row.pk, course.pk)}

    spent = dict(Wallet.objects.filter(license=school.license).values_list("holder", "spent"))
    for student in (ana, ben):
        mine = ledger_sum(end_user=student)
        assert spent[f"course:{course.pk}:user:{student.pk}"] == mine
        assert spent[f"user:{student.pk}"] == mine
    assert spent[f"course:{course.pk}"] == ledger_sum(license=school.license)
    assert 25 <= ledger_sum(end_user=ana) <= 25 + THREADS  # overshoot: the requests in flight
    assert ledger_sum(end_user=ben) == 20  # every one of Ben's 20 requests answered
    assert f"key:{school.key_row.pk}" not in spent
    assert Transaction.objects.filter(error_code="out_of_budget", end_user=ana).count() == len(
        refused
    )
