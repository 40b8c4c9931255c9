"""An erasure raced with charges (issue 39, licensing.access.erasure): a student's requests
running on the live gateway while an admin erases them. Every answered request is one ledger
row, paid once; the wallet is exactly the sum of its rows; once the erasure has committed, the
student's key is refused."""

from __future__ import annotations

import threading

import httpx
import pytest
from django.db.models import Sum

from licensing.access.credentials import api_key_create
from licensing.access.erasure import end_user_erase
from licensing.models import EndUser, Transaction, Wallet
from tests.kit import drain_background_writes

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"model": "text-embedding-3-small", "input": "a line", "encoding_format": "float"}
THREADS = 4


def test_an_erasure_raced_with_charges_loses_and_doubles_nothing(gateway, catalog, make_license):
    license = make_license(limit=10_000_000, strategy="per_user")
    student = EndUser.objects.create(license=license, subject="racing-student")
    _, key = api_key_create(license=license, end_user=student, name="race")
    statuses: list[int] = []
    lock = threading.Lock()
    started = threading.Barrier(THREADS + 1)

    def spend():
        with httpx.Client(base_url=gateway.url, timeout=30) as http:
            started.wait()
            for _ in range(200):
                answer = http.post(
                    "/v1/embeddings", json=BODY, headers={"Authorization": f"Bearer {key}"}
                )
                with lock:
                    statuses.append(answer.status_code)
                if answer.status_code == 401:
                    return

    threads = [threading.Thread(target=spend) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    started.wait()
    while True:  # some charges before the erasure
        with lock:
            if len(statuses) >= 8:
                break
    erased = end_user_erase(end_user=student)
    for thread in threads:
        thread.join(timeout=60)
    drain_background_writes()

    assert set(statuses) <= {200, 401}, statuses
    answered = statuses.count(200)
    assert answered >= 8 and statuses.count(401) == THREADS  # each thread ends refused
    rows = Transaction.objects.filter(end_user=student, status_code=200)
    assert rows.count() == answered  # every answer recorded, once
    (wallet,) = Wallet.objects.filter(license=license)
    assert wallet.spent == rows.aggregate(total=Sum("credits"))["total"]
    student.refresh_from_db()
    assert student.subject == erased.pseudonym and not student.active
