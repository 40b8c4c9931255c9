"""GET /v1/license and GET /v1/models for a course credential (issue 26): the license answer
gains a `course` object (the course, open and exam mode now, the caller's allowance and the
course pool as the budget step reads them); /v1/models lists what the course's overlay allows.
A plain credential's answers are unchanged (no `course` key at all)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from licensing.courses.services import (
    course_create,
    course_key_create,
    course_member_add,
    course_update,
    course_window_add,
)
from licensing.ledger.budget import course_window_start
from licensing.models import EndUser, Transaction, Wallet

SMALL = "text-embedding-3-small"
MINI = "gpt-4o-mini"
BODY = {"model": SMALL, "input": "x", "encoding_format": "float"}


@pytest.fixture
def course(license):
    institution = license.institution
    institution.timezone = "Europe/Berlin"
    institution.save()
    return course_create(
        license=license,
        name="Intro to CS",
        code="CS101",
        allowance=3_000_000,
        allowance_period="week",
        pool_limit=9_000_000,
    )


@pytest.fixture
def student(license, course):
    end_user = EndUser.objects.create(license=license, subject="student-1")
    course_member_add(course=course, end_user=end_user)
    return end_user


@pytest.fixture
def course_auth(course, student):
    _, key = course_key_create(course=course, end_user=student, name="course key", via="test")
    return {"Authorization": f"Bearer {key}"}


def test_plain_credentials_have_no_course_object(client, auth):
    body = client.get("/v1/license", headers=auth).json()
    assert "course" not in body
    assert set(body) == {"object", "name", "institution", "license_type", "services", "budget"}


def test_a_course_key_sees_its_course_and_levels(client, catalog, course, student, course_auth):
    body = client.get("/v1/license", headers=course_auth).json()
    now = datetime.now(UTC)
    start = course_window_start("week", now, "Europe/Berlin").isoformat()
    assert body["object"] == "license" and "budget" in body  # the license's fields as before
    assert body["course"] == {
        "id": course.pk,
        "code": "CS101",
        "name": "Intro to CS",
        "exam_mode": False,
        "open": True,
        "allowance": {
            "period": "week",
            "window_start": start,
            "limit": 3_000_000,
            "used": 0,
            "remaining": 3_000_000,
        },
        "pool": {
            "period": "week",
            "window_start": start,
            "limit": 9_000_000,
            "used": 0,
            "remaining": 9_000_000,
        },
    }

    # A request charges both levels; the answer reads their wallets.
    answer = client.post("/v1/embeddings", json=BODY, headers=course_auth)
    assert answer.status_code == 200, answer.text
    row = Transaction.objects.get()
    assert (row.course_id, row.end_user_id) == (course.pk, student.pk)
    body = client.get("/v1/license", headers=course_auth).json()
    allowance = Wallet.objects.get(holder=f"course:{course.pk}:user:{student.pk}")
    pool = Wallet.objects.get(holder=f"course:{course.pk}")
    assert allowance.spent == pool.spent == row.credits > 0
    assert body["course"]["allowance"]["used"] == allowance.spent
    assert body["course"]["allowance"]["remaining"] == 3_000_000 - allowance.spent
    assert body["course"]["pool"]["used"] == pool.spent


def test_no_pool_no_allowance_limit_and_exam_mode(client, catalog, course, course_auth):
    course_update(course=course, changes={"pool_limit": None, "allowance": None})
    course_update(course=course, changes={"exam_mode": True})
    body = client.get("/v1/license", headers=course_auth).json()["course"]
    assert body["pool"] is None
    assert body["allowance"]["limit"] is None and body["allowance"]["remaining"] is None
    assert (body["exam_mode"], body["open"]) == (True, True)


def test_a_closed_course_says_so(client, catalog, course, course_auth):
    later = datetime.now(UTC) + timedelta(days=2)
    course_window_add(course=course, starts_at=later, ends_at=later + timedelta(hours=2))
    body = client.get("/v1/license", headers=course_auth).json()["course"]
    assert body["open"] is False


def test_v1_models_of_a_course_key_follow_the_overlay(client, catalog, license, course, auth):
    """The course allows chat with one model only: its key lists that model; the plain key of
    the same license still lists everything (the two answers are cached apart)."""
    student = EndUser.objects.create(license=license, subject="student-2")
    course_member_add(course=course, end_user=student)
    _, key = course_key_create(course=course, end_user=student, via="test")
    course_auth = {"Authorization": f"Bearer {key}"}
    plain_before = {m["id"] for m in client.get("/v1/models", headers=auth).json()["data"]}
    assert MINI in plain_before and SMALL in plain_before

    overlay = {"services": {"chat_completions": {"params": {"model": {"allowed": [MINI]}}}}}
    course_update(course=course, changes={"policy": overlay})
    listed = {m["id"] for m in client.get("/v1/models", headers=course_auth).json()["data"]}
    assert listed == {MINI}
    assert client.get(f"/v1/models/{SMALL}", headers=course_auth).status_code == 404
    assert client.get(f"/v1/models/{MINI}", headers=course_auth).status_code == 200
    plain = {m["id"] for m in client.get("/v1/models", headers=auth).json()["data"]}
    assert plain == plain_before


def test_the_openapi_document_names_the_course_object(client):
    schemas = client.get("/v1/openapi.json").json()["components"]["schemas"]
    assert "course" in schemas["LicenseOut"]["properties"]
    assert set(schemas["CourseOut"]["properties"]) == {
        "id",
        "code",
        "name",
        "exam_mode",
        "open",
        "allowance",
        "pool",
    }
