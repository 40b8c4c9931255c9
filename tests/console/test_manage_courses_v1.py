"""What the management API's course calls do on /v1, against the live gateway: exam mode
switched by PATCH refuses a course key's next request (no wait, no restart), and a key made by
POST .../keys works with the openai SDK, its ledger row naming the course and the student and
its spend landing in the student's allowance wallet."""

from __future__ import annotations

import openai
import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from licensing.models import Transaction, Wallet
from tests.client_helpers import assert_charged

from .test_manage_api import BASE, user_with

pytestmark = pytest.mark.django_db(transaction=True)

MINI = "gpt-4o-mini"
EMBED = {"model": "text-embedding-3-small", "input": "x", "encoding_format": "float"}


def manage(license) -> Client:
    user = user_with("admin", license.institution)
    token = Token.objects.create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}"})


def course_with_key(api: Client, license, **course) -> tuple[dict, dict, str]:
    made = api.post(
        f"{BASE}/courses",
        {"name": "Intro to CS", "code": "CS101", "license": license.pk, **course},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    path = f"{BASE}/courses/{made.json()['id']}"
    member = api.post(f"{path}/members", {"student": "s-1"}, content_type="application/json")
    assert member.status_code == 201, member.content
    key = api.post(f"{path}/keys", {"student": "s-1", "name": "lab"}, "application/json")
    assert key.status_code == 201, key.content
    return made.json(), member.json(), key.json()["key"]


def test_exam_mode_by_patch_is_in_force_on_the_next_request(client, catalog, license):
    api = manage(license)
    course, _, key = course_with_key(api, license)
    auth = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/embeddings", json=EMBED, headers=auth).status_code == 200

    switched = api.patch(
        f"{BASE}/courses/{course['id']}", {"exam_mode": True}, content_type="application/json"
    )
    assert switched.status_code == 200 and switched.json()["exam_mode"] is True
    refused = client.post("/v1/embeddings", json=EMBED, headers=auth)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["message"]) == ("policy_denied", "course 'CS101' is in exam mode")
    row = Transaction.objects.order_by("-id").first()
    assert row is not None and (row.status_code, row.course_id) == (403, course["id"])

    api.patch(f"{BASE}/courses/{course['id']}", {"exam_mode": False}, "application/json")
    assert client.post("/v1/embeddings", json=EMBED, headers=auth).status_code == 200
    assert len(catalog["direct"].requests) == 2


def test_a_course_key_works_with_the_openai_sdk_and_pays_at_the_students_allowance(
    gateway, catalog, license
):
    api = manage(license)
    course, member, key = course_with_key(api, license, allowance=10_000_000)
    sdk = openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)
    answer = sdk.chat.completions.create(
        model=MINI, messages=[{"role": "user", "content": "Hello from the course"}]
    )
    assert answer.choices[0].message.content

    (row,) = assert_charged(1, "chat_completions", model=MINI)
    assert (row.course_id, row.end_user_id) == (course["id"], member["end_user"])
    allowance = Wallet.objects.get(holder=f"course:{course['id']}:user:{member['end_user']}")
    assert allowance.spent == row.credits and allowance.period == "day"

    usage = api.get(f"{BASE}/courses/{course['id']}/usage").json()
    (student,) = usage["rows"]
    assert (student["student"], student["requests"], student["credits"]) == ("s-1", 1, row.credits)
    assert student["period_used"] == row.credits
    assert student["period_remaining"] == 10_000_000 - row.credits


def test_the_same_new_subject_added_at_once_by_two_callers_is_one_end_user(license):
    import threading

    from django.db import connection as main_connection

    from licensing.models import Course, CourseMember, EndUser

    if main_connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes writers, the point here is row locking")
    course = Course.objects.create(
        institution=license.institution, license=license, code="RACE", name="Race"
    )
    api = manage(license)
    path = f"{BASE}/courses/{course.pk}"
    barrier = threading.Barrier(4)
    answers: list[int] = []

    def add(kind: str) -> None:
        from django.db import connection

        try:
            barrier.wait()
            if kind == "post":
                answer = api.post(f"{path}/members", {"student": "new"}, "application/json")
            else:
                answer = api.put(f"{path}/members", {"students": ["new"]}, "application/json")
            answers.append(answer.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=add, args=(k,)) for k in ("post", "post", "put", "put")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # PUT answers 200 whatever it did; a POST 201 only if it made the membership: one did at most.
    assert len(answers) == 4 and set(answers) <= {200, 201} and answers.count(201) <= 1
    (student,) = EndUser.objects.filter(license=license, subject="new")
    assert list(CourseMember.objects.filter(course=course).values_list("end_user", flat=True)) == [
        student.pk
    ]
