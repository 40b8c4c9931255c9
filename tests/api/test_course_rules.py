"""Course rules through the API (issue 26, item 3): a closed course, exam mode, a paused member,
each a 403 `policy_denied` with `param` null before any provider call or charge, and a ledger row
naming the course; a JWT whose issuer names a course claim (known, unknown, hostile)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import jwt
import pytest

from core import clock
from licensing.access.credentials import api_key_create
from licensing.models import (
    ApiKey,
    Course,
    CourseMember,
    CourseWindow,
    EndUser,
    JwtIssuer,
    Transaction,
)
from tests.ledger_helpers import refusal_codes

SMALL = "text-embedding-3-small"
BODY = {"model": SMALL, "input": "x", "encoding_format": "float"}
T0 = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)  # 08:00 in Berlin
HOUR = timedelta(hours=1)


@pytest.fixture
def course(license):
    institution = license.institution
    institution.timezone = "Europe/Berlin"
    institution.save()
    return Course.objects.create(
        institution=institution, license=license, name="Intro to CS", code="CS101"
    )


@pytest.fixture
def student(license, course):
    user = EndUser.objects.create(license=license, subject="student-1")
    CourseMember.objects.create(course=course, end_user=user)
    return user


@pytest.fixture
def member_auth(license, course, student):
    row, key = api_key_create(license=license, end_user=student, name="course key")
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    return {"Authorization": f"Bearer {key}"}


def embed(client, auth):
    return client.post("/v1/embeddings", json=BODY, headers=auth)


def denied(response) -> str:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("policy_denied", None)
    return error["message"]


def last_refusal() -> Transaction:
    row = Transaction.objects.order_by("-id").first()
    assert row is not None
    return row


def assert_refusal_row(course, student, message):
    row = last_refusal()
    assert (row.status_code, row.error_code, row.error_message) == (403, "policy_denied", message)
    assert (row.credits, row.wallet_id, row.course_id, row.end_user_id) == (
        0,
        None,
        course.pk,
        student.pk,
    )


def test_an_open_course_answers_and_its_row_names_the_course(
    client, catalog, course, student, member_auth
):
    assert embed(client, member_auth).status_code == 200
    row = Transaction.objects.get()
    assert (row.status_code, row.course_id, row.end_user_id) == (200, course.pk, student.pk)


def test_inactive_course_is_closed(client, catalog, course, student, member_auth):
    course.active = False
    course.save()
    message = "course 'CS101' is closed"
    assert denied(embed(client, member_auth)) == message
    assert_refusal_row(course, student, message)
    assert catalog["direct"].requests == []


def test_outside_every_access_window_closed_until_the_next_in_local_time(
    client, catalog, course, student, member_auth
):
    CourseWindow.objects.create(course=course, starts_at=T0 - 3 * HOUR, ends_at=T0)
    CourseWindow.objects.create(course=course, starts_at=T0 + 2 * HOUR, ends_at=T0 + 3 * HOUR)
    with clock.frozen(at=T0.timestamp()) as frozen:
        message = "course 'CS101' is closed until 2026-11-27T10:00:00+01:00"
        assert denied(embed(client, member_auth)) == message
        assert_refusal_row(course, student, message)
        frozen.advance(2 * 3600)  # the window opens: no save, no invalidation needed
        assert embed(client, member_auth).status_code == 200
        frozen.advance(3600)  # and closes, with no later window
        assert denied(embed(client, member_auth)) == "course 'CS101' is closed"
    assert refusal_codes() == ["policy_denied"] * 2
    assert len(catalog["direct"].requests) == 1


def test_a_course_past_its_end_refuses_its_keys_for_good(
    client, catalog, course, student, member_auth
):
    """Issue 39: a course's end date. Before it the key works; from it on every request is
    refused (with the end in the institution's time), whatever the windows or exam mode say."""
    from licensing.courses.services import course_update

    course_update(course=course, changes={"ends_at": T0 + HOUR})
    CourseWindow.objects.create(course=course, starts_at=T0, ends_at=T0 + 5 * HOUR)
    with clock.frozen(at=T0.timestamp()) as frozen:
        assert embed(client, member_auth).status_code == 200
        frozen.advance(3600)  # the end is half-open like a window: at 09:00 it has ended
        message = "course 'CS101' ended at 2026-11-27T09:00:00+01:00"
        assert denied(embed(client, member_auth)) == message
        assert_refusal_row(course, student, message)
        course.refresh_from_db()
        course.exam_mode = True
        course.save()
        assert denied(embed(client, member_auth)) == message
        license_view = client.get("/v1/license", headers=member_auth).json()
        assert license_view["course"]["open"] is False
    assert len(catalog["direct"].requests) == 1


def test_exam_switch_without_an_exam_policy(client, catalog, course, student, member_auth):
    assert embed(client, member_auth).status_code == 200  # the snapshot is now cached
    course.exam_mode = True
    course.save()  # the save clears it
    message = "course 'CS101' is in exam mode"
    assert denied(embed(client, member_auth)) == message
    assert_refusal_row(course, student, message)
    course.exam_mode = False
    course.save()
    assert embed(client, member_auth).status_code == 200


def test_exam_window(client, catalog, course, student, member_auth):
    CourseWindow.objects.create(
        course=course, kind=CourseWindow.Kind.EXAM, starts_at=T0, ends_at=T0 + HOUR
    )
    with clock.frozen(at=(T0 - timedelta(seconds=1)).timestamp()) as frozen:
        assert embed(client, member_auth).status_code == 200
        frozen.advance(1)
        assert denied(embed(client, member_auth)) == "course 'CS101' is in exam mode"
        frozen.advance(3600)
        assert embed(client, member_auth).status_code == 200


def test_exam_policy_narrows_what_the_license_allows(client, catalog, course, student, member_auth):
    course.exam_mode = True
    course.exam_policy = {"services": {"chat_completions": {}}}
    course.save()
    # The exam policy's refusal is the spec's message for a service not enabled.
    assert denied(embed(client, member_auth)) == (
        "service 'embeddings' is not enabled for this license"
    )
    assert_refusal_row(course, student, "service 'embeddings' is not enabled for this license")
    course.exam_policy = {"services": {"embeddings": {"params": {"dimensions": {"max": 8}}}}}
    course.save()
    assert embed(client, member_auth).status_code == 200
    response = client.post("/v1/embeddings", json={**BODY, "dimensions": 64}, headers=member_auth)
    assert response.status_code == 403 and response.json()["error"]["param"] == "dimensions"
    assert len(catalog["direct"].requests) == 1


def test_a_broken_exam_policy_is_503(client, catalog, course, student, member_auth):
    Course.objects.filter(pk=course.pk).update(exam_mode=True, exam_policy=["not", "a", "policy"])
    from core.localcache import clear_all

    clear_all()
    assert embed(client, member_auth).status_code == 503
    assert last_refusal().error_code == "policy_unavailable"


def test_paused_member(client, catalog, course, student, member_auth, license):
    other = EndUser.objects.create(license=license, subject="student-2")
    CourseMember.objects.create(course=course, end_user=other)
    row, other_key = api_key_create(license=license, end_user=other)
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    CourseMember.objects.filter(end_user=student).update(paused=True)
    member = CourseMember.objects.get(end_user=student)
    member.save()  # a save, as the admin's: every worker's snapshot is rebuilt
    message = "course 'CS101' has paused your access"
    assert denied(embed(client, member_auth)) == message
    assert_refusal_row(course, student, message)
    assert embed(client, {"Authorization": f"Bearer {other_key}"}).status_code == 200


def test_a_key_without_a_course_is_not_ruled_by_it(client, catalog, course, license, make_key):
    course.active = False
    course.save()
    assert embed(client, {"Authorization": f"Bearer {make_key(license)}"}).status_code == 200
    assert Transaction.objects.get().course_id is None


# --- JWT course claim ----------------------------------------------------------------------

HS_SECRET = "a-test-secret-that-is-long-enough-for-hs256"
ISSUER = "https://idp.example.edu"
AUDIENCE = "inference-gateway"


@pytest.fixture
def issuer(license, course):
    return JwtIssuer.objects.create(
        institution=license.institution,
        license=license,
        issuer=ISSUER,
        audience=AUDIENCE,
        algorithms=["HS256"],
        hs256_secret=HS_SECRET,
        course_claim="course",
    )


def token(**extra) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "student-42", "exp": now + 300, "iat": now}
    return jwt.encode({**claims, **extra}, HS_SECRET, algorithm="HS256")


def bearer(value: str) -> dict:
    return {"Authorization": f"Bearer {value}"}


def assert_401(response):
    assert response.status_code == 401, response.text
    assert response.json() == {"error": {"message": "Invalid API key"}}


def test_a_known_course_claim_makes_a_member_once(client, catalog, course, issuer):
    auth = bearer(token(course="CS101"))
    for _ in range(2):
        assert embed(client, auth).status_code == 200
    member = CourseMember.objects.get()
    assert (member.course_id, member.end_user.subject, member.paused) == (
        course.pk,
        "student-42",
        False,
    )
    assert list(Transaction.objects.values_list("course_id", flat=True)) == [course.pk] * 2
    # The course's rules now apply to the token's requests.
    course.exam_mode = True
    course.save()
    assert denied(embed(client, auth)) == "course 'CS101' is in exam mode"


def test_a_token_without_the_claim_is_a_plain_license_user(client, catalog, course, issuer):
    assert embed(client, bearer(token())).status_code == 200
    assert CourseMember.objects.count() == 0
    assert Transaction.objects.get().course_id is None


def test_an_issuer_without_a_course_claim_ignores_it(client, catalog, course, issuer):
    issuer.course_claim = ""
    issuer.save()
    assert embed(client, bearer(token(course="NOPE"))).status_code == 200
    assert CourseMember.objects.count() == 0


def test_an_unknown_course_code_is_401(client, catalog, course, issuer, license):
    assert_401(embed(client, bearer(token(course="CS999"))))
    assert_401(embed(client, bearer(token(course="cs101"))))  # codes are exact
    # A course of the same institution on another license is not this issuer's.
    from licensing.access.services import license_create

    other = license_create(name="other-license", institution=license.institution.name)
    Course.objects.create(institution=license.institution, license=other, name="X", code="BIO1")
    assert_401(embed(client, bearer(token(course="BIO1"))))
    assert CourseMember.objects.count() == 0 and Transaction.objects.count() == 0


@pytest.mark.parametrize(
    "value",
    ["", "CS\x00101", "\ud800", "C" * 10_000, 101, 1.5, True, None, ["CS101"], {"code": "CS101"}],
)
def test_hostile_course_claims_are_401(client, catalog, course, issuer, value):
    try:
        encoded = token(course=value)
    except UnicodeEncodeError:  # PyJWT will not encode a lone surrogate: write it raw
        encoded = _raw_token({"course": "\\ud800"})
    assert_401(embed(client, bearer(encoded)))
    assert CourseMember.objects.count() == 0


def _raw_token(extra_json: dict) -> str:
    """A signed token whose payload JSON holds `\\ud800` as written (a lone surrogate escape)."""
    import base64
    import hashlib
    import hmac
    import json

    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "student-42", "exp": now + 300}
    body = json.dumps(claims)[:-1] + "".join(f', "{k}": "{v}"' for k, v in extra_json.items())
    body += "}"

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(body.encode())
    signature = hmac.new(HS_SECRET.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64(signature)


def test_a_registered_claim_cannot_name_the_course(issuer):
    from django.core.exceptions import ValidationError

    issuer.course_claim = "sub"
    with pytest.raises(ValidationError) as caught:
        issuer.full_clean()
    assert "course_claim" in caught.value.message_dict
    issuer.course_claim = "course"
    issuer.full_clean()


def test_the_course_overlay_narrows_the_license_type_outside_exam_mode(
    client, catalog, course, student, member_auth
):
    course.policy = {"services": {"chat_completions": {}}}
    course.save()
    message = "service 'embeddings' is not enabled for this license"
    assert denied(embed(client, member_auth)) == message
    assert_refusal_row(course, student, message)
    course.policy = {"services": {"embeddings": {"params": {"dimensions": {"max": 8}}}}}
    course.save()
    assert embed(client, member_auth).status_code == 200
    response = client.post("/v1/embeddings", json={**BODY, "dimensions": 64}, headers=member_auth)
    assert response.status_code == 403 and response.json()["error"]["param"] == "dimensions"
    # Exam mode's policy narrows the course's: a wider exam policy changes nothing.
    course.exam_mode = True
    course.exam_policy = {"services": {"embeddings": {}}}
    course.save()
    response = client.post("/v1/embeddings", json={**BODY, "dimensions": 64}, headers=member_auth)
    assert response.status_code == 403 and response.json()["error"]["param"] == "dimensions"
    assert len(catalog["direct"].requests) == 1
