"""A student downloads everything the gateway holds about them (issue 39, GDPR Art. 15): one
JSON document, or one CSV per part; only their own rows, never a key's secret, every cell
spreadsheet-safe, each download in the audit log; anything else asked is a 400."""

from __future__ import annotations

import csv
import io
import json
import uuid

import pytest
from django.utils import timezone

from licensing.courses.services import course_create, course_key_create, course_member_add
from licensing.models import ApiKey, AuditEvent, Transaction
from licensing.portal.services import portal_key_create, terms_accept

from .conftest import make_student, signed_in

pytestmark = pytest.mark.django_db

EXPORT = "/portal/data/export/"


def ledger_row(end_user, *, credits=7, course=None, api_key=None):
    return Transaction.objects.create(
        request_id=uuid.uuid4().hex,
        created_at=timezone.now(),
        license=end_user.license,
        end_user=end_user,
        api_key=api_key,
        course=course,
        service="chat_completions",
        requested_model="gpt-4o-mini",
        billed_model="gpt-4o-mini",
        provider="direct",
        status_code=200,
        credits=credits,
        total_tokens=12,
    )


@pytest.fixture
def world(db):
    user, student = make_student(username="ada")
    user.email, user.first_name = "ada@hill.example", "Ada"
    user.save()
    terms_accept(end_user=student)
    key, secret = portal_key_create(end_user=student, name="=HYPERLINK(evil)")
    course = course_create(license=student.license, name="Intro", code="CS101")
    course_member_add(course=course, end_user=student)
    course_key, _ = course_key_create(course=course, end_user=student, via="test")
    ledger_row(student, api_key=key)
    ledger_row(student, credits=3, course=course, api_key=course_key)
    _, other = make_student(username="bob")
    ledger_row(other, credits=1000)
    return {"user": user, "student": student, "secret": secret, "course": course, "other": other}


def download(client, query: str) -> tuple[int, str, dict]:
    answer = client.get(EXPORT + query)
    body = b"".join(answer.streaming_content).decode() if answer.streaming else ""
    return answer.status_code, body, answer


def test_everything_as_one_json_document(world):
    client = signed_in(world["user"])
    status, body, answer = download(client, "?format=json")
    assert status == 200 and answer["Content-Type"] == "application/json"
    assert answer["Content-Disposition"].startswith('attachment; filename="my-data-all-')
    assert "no-store" in answer["Cache-Control"]
    found = json.loads(body)
    assert set(found) == {
        "exported_at",
        "person",
        "keys",
        "courses",
        "consents",
        "safeguarding_alerts",
        "transactions",
    }
    person = found["person"]
    assert person["subject"] == world["student"].subject and person["institution"] == "Hill School"
    assert person["account"]["email"] == "ada@hill.example"
    assert [k["course"] for k in found["keys"]] == [None, "CS101"]
    assert found["keys"][0]["name"] == "=HYPERLINK(evil)"  # JSON is data: kept as it is
    assert world["secret"] not in body
    assert not any(row.digest in body for row in ApiKey.objects.all())
    assert found["courses"] == [
        {
            "code": "CS101",
            "name": "Intro",
            "member_since": found["courses"][0]["member_since"],
            "paused": False,
            "top_up": 0,
            "top_up_window_start": None,
        }
    ]
    assert [c["consent"] for c in found["consents"]] == ["terms_of_use"]
    rows = found["transactions"]
    assert sorted(row["credits"] for row in rows) == [3, 7]  # not the other student's
    assert {row["course"] for row in rows} == {"CS101", None}
    assert all(row["end_user"] == world["student"].subject for row in rows)
    (event,) = AuditEvent.objects.filter(action=AuditEvent.Action.DATA_EXPORTED)
    assert event.target == f"end_user:{world['student'].pk}"
    assert event.detail == {"what": "json:all"}


def test_the_parts_as_csv(world):
    client = signed_in(world["user"])
    status, body, answer = download(client, "?format=csv&part=transactions")
    assert status == 200 and answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body)))
    assert sorted(int(row["credits"]) for row in rows) == [3, 7]
    status, body, _ = download(client, "?format=csv&part=keys")
    keys = list(csv.DictReader(io.StringIO(body)))
    assert keys[0]["name"] == "'=HYPERLINK(evil)"  # a spreadsheet would run it: quoted
    assert keys[1]["course"] == "CS101"
    status, body, _ = download(client, "?format=csv&part=courses")
    assert [row["code"] for row in csv.DictReader(io.StringIO(body))] == ["CS101"]
    status, body, _ = download(client, "?format=csv&part=consents")
    assert [row["consent"] for row in csv.DictReader(io.StringIO(body))] == ["terms_of_use"]
    whats = AuditEvent.objects.filter(action=AuditEvent.Action.DATA_EXPORTED).values_list(
        "detail__what", flat=True
    )
    assert sorted(whats) == [
        "csv:consents",
        "csv:courses",
        "csv:keys",
        "csv:transactions",
    ]


@pytest.mark.parametrize(
    "query",
    [
        "?format=xml",
        "?format=csv",
        "?format=csv&part=wallets",
        "?format=json&part=keys",
        "?format=csv&part=..%2F..%2Fetc",
        "?format=%00",
        "?format=csv&part=%ED%A0%80",
        "?format=" + "x" * 10_000,
    ],
)
def test_anything_else_is_a_400_page(world, query):
    answer = signed_in(world["user"]).get(EXPORT + query)
    assert answer.status_code == 400
    assert 'id="data-export"' in answer.content.decode()
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.DATA_EXPORTED).exists()


def test_only_a_signed_in_student_downloads(world):
    from django.test import Client

    anonymous = Client().get(EXPORT + "?format=json")
    assert anonymous.status_code == 302 and "/portal/login/" in anonymous["Location"]
    assert signed_in(world["user"]).post(EXPORT + "?format=json").status_code == 405


def test_a_long_history_streams_page_by_page(world, django_assert_max_num_queries):
    student = world["student"]
    now = timezone.now()
    Transaction.objects.bulk_create(
        Transaction(
            request_id=uuid.uuid4().hex,
            created_at=now,
            license=student.license,
            end_user=student,
            service="embeddings",
            requested_model="m",
            provider="direct",
            status_code=200,
            credits=1,
        )
        for _ in range(4_500)
    )
    client = signed_in(world["user"])
    with django_assert_max_num_queries(30):  # pages of 2,000 rows, not a query a row
        status, body, _ = download(client, "?format=json")
    assert status == 200
    assert len(json.loads(body)["transactions"]) == 4_502


def test_the_data_page_links_the_downloads(world):
    body = signed_in(world["user"]).get("/portal/data/").content.decode()
    assert 'id="data-export"' in body
    for part in ("transactions", "keys", "courses", "consents", "alerts"):
        assert f"format=csv&amp;part={part}" in body


def test_the_data_page_says_how_long_a_record_names_the_student(world):
    from licensing.models import Institution

    client = signed_in(world["user"])
    body = client.get("/portal/data/").content.decode()
    assert "After 540 days (for a course's requests: after the course has ended and 540" in body
    Institution.objects.update(ledger_identity_days=None)
    body = client.get("/portal/data/").content.decode()
    assert "keeps the usage records with your name for as long as you have an account" in body
    Institution.objects.update(ledger_identity_days=1)
    client.cookies["django_language"] = "de"
    body = client.get("/portal/data/", headers={"accept-language": "de"}).content.decode()
    assert "Nach 1 Tag" in body


def test_closed_safeguarding_alerts_are_in_it_open_ones_not(world):
    from licensing.models import SafeguardingAlert

    student = world["student"]
    common = {"institution": student.license.institution, "end_user": student}
    SafeguardingAlert.objects.create(
        **common,
        direction="input",
        categories=["self-harm"],
        content=json.dumps(["=a closed flagged message"]),
        status=SafeguardingAlert.Status.CLOSED,
        note="a teacher's note",
        handled_at=timezone.now(),
    )
    SafeguardingAlert.objects.create(
        **common, direction="input", categories=["violence"], content=json.dumps(["still open"])
    )
    client = signed_in(world["user"])
    status, body, _ = download(client, "?format=json")
    (alert,) = json.loads(body)["safeguarding_alerts"]
    assert alert["messages"] == ["=a closed flagged message"]
    assert alert["categories"] == ["self-harm"] and alert["closed_at"]
    assert "still open" not in body and "a teacher's note" not in body
    status, body, _ = download(client, "?format=csv&part=alerts")
    (row,) = list(csv.DictReader(io.StringIO(body)))
    assert row["messages"] == '["=a closed flagged message"]' and row["direction"] == "input"
