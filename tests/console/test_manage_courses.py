"""The management API's courses (/manage/v1/courses): each endpoint's status, body, database and
audit row; ValidationErrors of the course services as 400s naming the field; hostile values;
the OpenAPI document; `create_institution_admin --course`; a teacher's management token."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token

from core import clock
from licensing.access.credentials import resolve_credential
from licensing.courses.services import course_member_add
from licensing.models import (
    ApiKey,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    CourseWindow,
    EndUser,
)

from .test_admin import make_licensing
from .test_manage_api import BASE, token_client, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

T0 = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)


def json_client(client: Client):
    """The same client, sending JSON bodies."""

    def send(method: str, path: str, body=None, **kwargs):
        call = getattr(client, method)
        if body is None:
            return call(path, **kwargs)
        return call(path, body, content_type="application/json", **kwargs)

    return send


@pytest.fixture
def world(db):
    return {"a": make_licensing("a"), "b": make_licensing("b")}


@pytest.fixture
def admin_a(world):
    return json_client(token_client(user_with("admin", world["a"]["institution"])))


def audit_rows(action) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def new_course_body(world, **changes):
    return {
        "name": "Intro to ML",
        "code": "ML101",
        "license": world["a"]["license"].pk,
        "allowance": 500_000,
        "allowance_period": "week",
        **changes,
    }


# --- courses ---------------------------------------------------------------------------------


def test_create_course(world, admin_a):
    answer = admin_a("post", f"{BASE}/courses", new_course_body(world, pool_limit=9_000_000))
    assert answer.status_code == 201, answer.content
    body = answer.json()
    course = Course.objects.get(pk=body["id"])
    assert body == {
        "id": course.pk,
        "name": "Intro to ML",
        "code": "ML101",
        "license": world["a"]["license"].pk,
        "institution": "Institution a",
        "allowance": 500_000,
        "allowance_period": "week",
        "pool_limit": 9_000_000,
        "instructions": "",
        "policy": {},
        "exam_mode": False,
        "exam_policy": None,
        "active": True,
        "ends_at": None,
        "lti_context_id": "",
        "created_at": body["created_at"],
        "teachers": [],
        "members": 0,
    }
    assert course.institution_id == world["a"]["institution"].pk
    assert (course.allowance, course.allowance_period, course.pool_limit) == (
        500_000,
        "week",
        9_000_000,
    )
    (event,) = audit_rows(AuditEvent.Action.COURSE_CREATED)
    assert event.target == f"course:{course.pk}" and event.detail["code"] == "ML101"
    assert event.actor_name == "admin-" + str(world["a"]["institution"].pk)


def test_create_course_refusals_are_400_naming_the_field(world, admin_a):
    other_license = world["b"]["license"].pk
    cases = [
        ({"license": other_license}, "license"),
        ({"license": 2**64}, "license"),
        ({"license": -1}, "license"),
        ({"license": "abc"}, "license"),
        ({"allowance": 2**64}, "allowance"),
        ({"allowance": -1}, "allowance"),
        ({"allowance": "1e400"}, "allowance"),
        ({"allowance_period": "fortnight"}, "allowance_period"),
        ({"name": "x" * 100_000}, "name"),
        ({"name": "nul\x00"}, "name"),
        ({"name": "\ud800"}, "detail"),  # the JSON reader's: at its character offset
        ({"code": "CS-a"}, "non_field_errors"),  # the code exists in the institution
        ({"policy": ["not", "an", "object"]}, "policy"),
        ({"policy": {"services": {"x\x00": {}}}}, "policy"),
        ({"exam_mode": True}, "exam_mode"),
        ({"colour": "red"}, "colour"),
        ({"id": 5}, "id"),
    ]
    before = Course.objects.count()
    for change, field in cases:
        answer = admin_a("post", f"{BASE}/courses", new_course_body(world, **change))
        assert answer.status_code == 400, (change, answer.content)
        assert field in answer.json(), (change, answer.json())
    # 1e400 as a JSON number: the JSON reader refuses it (core.jsonio), saying where.
    raw = Client(headers={"Authorization": admin_auth(world)}).post(
        f"{BASE}/courses",
        f'{{"name": "n", "code": "N1", "license": {world["a"]["license"].pk}, "allowance": 1e400}}',
        content_type="application/json",
    )
    assert raw.status_code == 400 and "Number out of range" in raw.json()["detail"]
    assert Course.objects.count() == before
    assert not audit_rows(AuditEvent.Action.COURSE_CREATED)


def admin_auth(world) -> str:
    """The admin_a fixture's token, for a raw body."""
    token = Token.objects.get(user__username=f"admin-{world['a']['institution'].pk}")
    return f"Token {token.key}"


def test_a_widening_overlay_is_400_with_the_offending_rule(world, admin_a):
    course = world["a"]["course"]
    license_type = course.license.license_type
    license_type.policy = {"version": 1, "services": {"embeddings": {}}}
    license_type.save()
    answer = admin_a(
        "patch", f"{BASE}/courses/{course.pk}", {"policy": {"services": {"image_generation": {}}}}
    )
    assert answer.status_code == 400, answer.content
    assert "services.image_generation: not enabled by the license type" in str(
        answer.json()["policy"]
    )
    course.refresh_from_db()
    assert course.policy == {}
    narrower = {"services": {"embeddings": {"params": {"dimensions": {"max": 256}}}}}
    answer = admin_a("patch", f"{BASE}/courses/{course.pk}", {"policy": narrower})
    assert answer.status_code == 200, answer.content
    assert answer.json()["policy"] == narrower
    course.refresh_from_db()
    assert course.policy == narrower
    (event,) = audit_rows(AuditEvent.Action.COURSE_CHANGED)
    assert event.detail["after"] == {"policy": narrower}


def test_patch_exam_mode_is_its_own_audit_row(world, admin_a):
    course = world["a"]["course"]
    answer = admin_a("patch", f"{BASE}/courses/{course.pk}", {"exam_mode": True, "name": "New"})
    assert answer.status_code == 200, answer.content
    assert (answer.json()["exam_mode"], answer.json()["name"]) == (True, "New")
    course.refresh_from_db()
    assert course.exam_mode is True and course.name == "New"
    (exam,) = audit_rows(AuditEvent.Action.EXAM_MODE_CHANGED)
    assert exam.detail == {"code": "CS-a", "exam_mode": True}
    (changed,) = audit_rows(AuditEvent.Action.COURSE_CHANGED)
    assert changed.detail["after"] == {"name": "New"}


def test_patch_instructions_and_their_refusals(world, admin_a):
    course = world["a"]["course"]
    path = f"{BASE}/courses/{course.pk}"
    answer = admin_a("patch", path, {"instructions": "Ask, do not answer."})
    assert answer.status_code == 200 and answer.json()["instructions"] == "Ask, do not answer."
    (changed,) = audit_rows(AuditEvent.Action.COURSE_CHANGED)
    assert changed.detail["after"] == {"instructions": "Ask, do not answer."}
    for value in ["nul\x00", "x" * 4001, 2**64, 1e400, ["a"], {"a": 1}, None]:
        answer = admin_a("patch", path, {"instructions": value})
        # 1e400 is refused by the JSON parser (`detail`), the rest on the field.
        assert answer.status_code == 400, (value, answer.content)
        assert {"instructions", "detail"} & set(answer.json()), (value, answer.content)
    lone = admin_a("patch", path, '{"instructions": "\\ud800"}')
    assert lone.status_code == 400, lone.content
    course.refresh_from_db()
    assert course.instructions == "Ask, do not answer."
    assert len(audit_rows(AuditEvent.Action.COURSE_CHANGED)) == 1


def test_an_end_date_is_an_admins_and_ends_the_course_keys(world, admin_a):
    course = world["a"]["course"]
    path = f"{BASE}/courses/{course.pk}"
    answer = admin_a("patch", path, {"ends_at": "2026-07-31T22:00:00Z"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["ends_at"] == "2026-07-31T22:00:00Z"
    course.refresh_from_db()
    assert course.ends_at == datetime(2026, 7, 31, 22, 0, tzinfo=UTC)
    (changed,) = audit_rows(AuditEvent.Action.COURSE_CHANGED)
    assert changed.detail["after"] == {"ends_at": "2026-07-31T22:00:00+00:00"}
    student = world["a"]["end_user"]
    course_member_add(course=course, end_user=student)
    with clock.frozen(at=datetime(2026, 8, 1, tzinfo=UTC).timestamp()):
        keys = admin_a("post", f"{path}/keys", {"student": student.subject})
    assert keys.status_code == 400 and "has ended" in str(keys.json()), keys.content
    for value in ["tomorrow", "\x00", 2**64, "2026-02-30T00:00:00Z"]:
        answer = admin_a("patch", path, {"ends_at": value})
        assert answer.status_code == 400 and "ends_at" in answer.json(), (value, answer.content)
    assert admin_a("patch", path, {"ends_at": None}).json()["ends_at"] is None


def test_patch_refuses_unknown_and_read_only_fields_and_put_is_405(world, admin_a):
    course = world["a"]["course"]
    for body, field in [
        ({"exam_mod": True}, "exam_mod"),
        ({"created_at": "2020-01-01T00:00:00Z"}, "created_at"),
        ({"teachers": ["x"]}, "teachers"),
        ({"allowance": 2**64}, "allowance"),
        ({"allowance_period": "\ud800"}, "detail"),
        ({"license": world["b"]["license"].pk}, "license"),
    ]:
        answer = admin_a("patch", f"{BASE}/courses/{course.pk}", body)
        assert answer.status_code == 400 and field in answer.json(), (body, answer.content)
    assert admin_a("put", f"{BASE}/courses/{course.pk}", {"name": "x"}).status_code == 405
    assert admin_a("patch", f"{BASE}/courses/{course.pk}", ["a", "list"]).status_code == 400
    assert not audit_rows(AuditEvent.Action.COURSE_CHANGED)


def test_list_and_retrieve_are_scoped(world, admin_a):
    own, other = world["a"]["course"], world["b"]["course"]
    listed = admin_a("get", f"{BASE}/courses").json()
    assert [row["id"] for row in listed["results"]] == [own.pk]
    assert listed["results"][0]["teachers"] == ["staff-a"]
    assert listed["results"][0]["members"] == 1
    assert "next" in listed and "previous" in listed  # the cursor pagination of the others
    assert admin_a("get", f"{BASE}/courses", {"code": "CS-a"}).json()["results"]
    assert not admin_a("get", f"{BASE}/courses", {"code": "CS-b"}).json()["results"]
    by_license = admin_a("get", f"{BASE}/courses", {"license": own.license_id}).json()
    assert [row["id"] for row in by_license["results"]] == [own.pk]
    for bad in (other.license_id, 2**64, -1, "abc", "\x00"):
        assert admin_a("get", f"{BASE}/courses", {"license": bad}).status_code == 400, bad
    assert admin_a("get", f"{BASE}/courses", {"code": "\x00"}).status_code == 400
    assert admin_a("get", f"{BASE}/courses/{own.pk}").json()["code"] == "CS-a"
    for bad in (other.pk, 2**64, -1, "abc", "%00"):
        assert admin_a("get", f"{BASE}/courses/{bad}").status_code == 404, bad
    assert admin_a("patch", f"{BASE}/courses/{other.pk}", {"name": "x"}).status_code == 404
    assert admin_a("delete", f"{BASE}/courses/{other.pk}").status_code == 404
    assert Course.objects.filter(pk=other.pk, name="Course b").exists()


def test_delete_course(world, admin_a):
    course = world["a"]["course"]
    assert admin_a("delete", f"{BASE}/courses/{course.pk}").status_code == 204
    assert not Course.objects.filter(pk=course.pk).exists()
    (event,) = audit_rows(AuditEvent.Action.COURSE_DELETED)
    assert event.target == f"course:{course.pk}"


def test_reviewers_have_no_course_access(world):
    reviewer = json_client(token_client(user_with("reviewer", world["a"]["institution"])))
    course = world["a"]["course"]
    for method, path in [
        ("get", f"{BASE}/courses"),
        ("post", f"{BASE}/courses"),
        ("get", f"{BASE}/courses/{course.pk}"),
        ("get", f"{BASE}/courses/{course.pk}/members"),
        ("get", f"{BASE}/courses/{course.pk}/usage"),
        ("post", f"{BASE}/courses/{course.pk}/keys"),
    ]:
        assert reviewer(method, path, {} if method == "post" else None).status_code == 403


# --- windows ---------------------------------------------------------------------------------


def test_windows(world, admin_a):
    course = world["a"]["course"]
    path = f"{BASE}/courses/{course.pk}/windows"
    answer = admin_a(
        "post",
        path,
        {
            "starts_at": T0.isoformat(),
            "ends_at": (T0 + timedelta(hours=2)).isoformat(),
            "kind": "exam",
        },
    )
    assert answer.status_code == 201, answer.content
    window = CourseWindow.objects.get(pk=answer.json()["id"])
    assert (window.kind, window.starts_at, window.course_id) == ("exam", T0, course.pk)
    assert answer.json()["kind"] == "exam"
    (event,) = audit_rows(AuditEvent.Action.COURSE_WINDOW_CHANGED)
    assert event.detail["added"]["kind"] == "exam"
    default = admin_a(
        "post",
        path,
        {"starts_at": "2026-12-01T08:00:00+01:00", "ends_at": "2026-12-01T10:00:00+01:00"},
    )
    assert default.status_code == 201 and default.json()["kind"] == "access"
    listed = admin_a("get", path).json()
    assert {row["id"] for row in listed} == {
        window.pk,
        default.json()["id"],
        world["a"]["course_window"].pk,
    }

    count = CourseWindow.objects.count()
    for body, field in [
        (
            {"starts_at": T0.isoformat(), "ends_at": (T0 - timedelta(hours=1)).isoformat()},
            "ends_at",
        ),
        ({"starts_at": T0.isoformat(), "ends_at": T0.isoformat()}, "ends_at"),
        ({"starts_at": "yesterday", "ends_at": T0.isoformat()}, "starts_at"),
        ({"starts_at": "2026-01-01T00:00:00\x00", "ends_at": T0.isoformat()}, "starts_at"),
        ({"starts_at": T0.isoformat(), "ends_at": "99999-01-01T00:00:00Z"}, "ends_at"),
        ({"starts_at": T0.isoformat(), "ends_at": T0.isoformat(), "kind": "party"}, "kind"),
        ({"starts_at": T0.isoformat()}, "ends_at"),
        ({"starts_at": T0.isoformat(), "ends_at": T0.isoformat(), "course": 1}, "course"),
    ]:
        answer = admin_a("post", path, body)
        assert answer.status_code == 400 and field in answer.json(), (body, answer.content)
    assert CourseWindow.objects.count() == count

    other_window = world["b"]["course_window"]
    for bad in (other_window.pk, 2**64, -1, "abc"):
        assert admin_a("delete", f"{path}/{bad}").status_code == 404, bad
    assert CourseWindow.objects.filter(pk=other_window.pk).exists()
    assert admin_a("delete", f"{path}/{window.pk}").status_code == 204
    assert not CourseWindow.objects.filter(pk=window.pk).exists()
    assert (
        audit_rows(AuditEvent.Action.COURSE_WINDOW_CHANGED)[-1].detail["removed"]["kind"] == "exam"
    )


# --- members ---------------------------------------------------------------------------------


def test_members_add_by_id_and_by_subject(world, admin_a):
    course, lic = world["a"]["course"], world["a"]["license"]
    path = f"{BASE}/courses/{course.pk}/members"
    classmate = EndUser.objects.create(license=lic, subject="classmate")
    answer = admin_a("post", path, {"student": classmate.pk})
    assert answer.status_code == 201, answer.content
    member = CourseMember.objects.get(course=course, end_user=classmate)
    assert answer.json() == {
        "id": member.pk,
        "end_user": classmate.pk,
        "subject": "classmate",
        "paused": False,
        "top_up": 0,
        "top_up_window_start": None,
        "created_at": answer.json()["created_at"],
    }
    assert admin_a("post", path, {"student": classmate.pk}).status_code == 200  # already in
    assert admin_a("post", path, {"student": "classmate"}).json()["id"] == member.pk

    new = admin_a("post", path, {"student": "lms-user-42"})
    assert new.status_code == 201, new.content
    made = EndUser.objects.get(license=lic, subject="lms-user-42")
    assert made.issuer_id is None and new.json()["end_user"] == made.pk
    assert admin_a("post", path, {"student": "lms-user-42"}).status_code == 200
    assert EndUser.objects.filter(subject="lms-user-42").count() == 1
    added = [e.detail for e in audit_rows(AuditEvent.Action.COURSE_MEMBER_CHANGED)]
    assert added == [
        {"code": "CS-a", "end_user": classmate.pk, "added": True},
        {"code": "CS-a", "end_user": made.pk, "added": True},
    ]

    members = admin_a("get", path).json()["results"]
    assert {row["end_user"] for row in members} == {
        world["a"]["end_user"].pk,
        classmate.pk,
        made.pk,
    }


def test_member_add_refusals(world, admin_a):
    course = world["a"]["course"]
    path = f"{BASE}/courses/{course.pk}/members"
    users = EndUser.objects.count()
    for student in (
        world["b"]["end_user"].pk,  # another institution's end user
        2**64,
        -1,
        0,
        True,
        1.5,
        None,
        ["a"],
        "",
        "x" * 501,
        "nul\x00",
    ):
        answer = admin_a("post", path, {"student": student})
        assert answer.status_code == 400 and "student" in answer.json(), (student, answer.content)
    surrogate = admin_a("post", path, {"student": "\ud800"})
    assert "Lone surrogate" in surrogate.json()["detail"]
    assert admin_a("post", path, {}).status_code == 400
    assert admin_a("post", path, {"student": "ok", "paused": True}).status_code == 400
    assert EndUser.objects.count() == users
    assert CourseMember.objects.filter(course=course).count() == 1


def test_an_ambiguous_subject_must_be_named_by_id(world, admin_a):
    from licensing.models import JwtIssuer

    course, lic = world["a"]["course"], world["a"]["license"]
    other_issuer = JwtIssuer.objects.create(
        institution=lic.institution, license=lic, issuer="https://idp2.example", audience="g"
    )
    EndUser.objects.create(license=lic, issuer=world["a"]["issuer"], subject="twin")
    EndUser.objects.create(license=lic, issuer=other_issuer, subject="twin")
    answer = admin_a("post", f"{BASE}/courses/{course.pk}/members", {"student": "twin"})
    assert answer.status_code == 400 and "name the id" in str(answer.json()["student"])


def test_member_update_and_remove(world, admin_a):
    course, student = world["a"]["course"], world["a"]["end_user"]
    member = world["a"]["course_member"]
    path = f"{BASE}/courses/{course.pk}/members/{member.pk}"
    answer = admin_a(
        "patch", path, {"paused": True, "top_up": 5000, "top_up_window_start": T0.isoformat()}
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["paused"], answer.json()["top_up"]) == (True, 5000)
    member.refresh_from_db()
    assert (member.paused, member.top_up, member.top_up_window_start) == (True, 5000, T0)
    (event,) = audit_rows(AuditEvent.Action.COURSE_MEMBER_CHANGED)
    assert event.detail["after"]["paused"] is True and event.detail["after"]["top_up"] == 5000
    for body, field in [
        ({"top_up": -1}, "top_up"),
        ({"top_up": 2**64}, "top_up"),
        ({"paused": "maybe"}, "paused"),
        ({"end_user": 1}, "end_user"),
        ({"top_up_window_start": "\x00"}, "top_up_window_start"),
    ]:
        answer = admin_a("patch", path, body)
        assert answer.status_code == 400 and field in answer.json(), (body, answer.content)

    key = admin_a("post", f"{BASE}/courses/{course.pk}/keys", {"name": "k", "student": student.pk})
    assert key.status_code == 201
    other_member = world["b"]["course_member"]
    for bad in (other_member.pk, 2**64, "abc"):
        assert admin_a("delete", f"{BASE}/courses/{course.pk}/members/{bad}").status_code == 404
    assert admin_a("delete", path).status_code == 204
    assert not CourseMember.objects.filter(pk=member.pk).exists()
    assert ApiKey.objects.get(pk=key.json()["id"]).active is False
    assert resolve_credential(key.json()["key"]) is None
    removed = audit_rows(AuditEvent.Action.COURSE_MEMBER_CHANGED)[-1]
    assert removed.detail == {
        "code": "CS-a",
        "end_user": student.pk,
        "removed": True,
        "keys_revoked": 1,
    }


def test_roster_sync_and_its_dry_run(world, admin_a):
    course, lic = world["a"]["course"], world["a"]["license"]
    path = f"{BASE}/courses/{course.pk}/members"
    old = world["a"]["end_user"]  # a member, not listed: removed
    kept = EndUser.objects.create(license=lic, subject="kept")
    CourseMember.objects.create(course=course, end_user=kept)
    known = EndUser.objects.create(license=lic, subject="known")
    old_key = admin_a("post", f"{BASE}/courses/{course.pk}/keys", {"student": old.pk}).json()
    roster = {"students": ["kept", known.pk, "new-1", "new-1", "known"]}

    dry = admin_a("put", f"{path}?dry_run=true", roster)
    assert dry.status_code == 200, dry.content
    assert dry.json() == {
        "added": 2,
        "removed": 1,
        "kept": 1,
        "dry_run": True,
        "add": [known.pk, "new-1"],
        "remove": ["user-a"],
    }
    assert set(CourseMember.objects.filter(course=course).values_list("end_user", flat=True)) == {
        old.pk,
        kept.pk,
    }
    assert not EndUser.objects.filter(subject="new-1").exists()

    done = admin_a("put", path, roster)
    assert done.status_code == 200, done.content
    assert (done.json()["added"], done.json()["removed"], done.json()["kept"]) == (2, 1, 1)
    new = EndUser.objects.get(license=lic, subject="new-1")
    assert set(CourseMember.objects.filter(course=course).values_list("end_user", flat=True)) == {
        kept.pk,
        known.pk,
        new.pk,
    }
    assert ApiKey.objects.get(pk=old_key["id"]).active is False
    again = admin_a("put", path, roster).json()
    assert (again["added"], again["removed"], again["kept"]) == (0, 0, 3)

    members = CourseMember.objects.filter(course=course).count()
    for body, params in [
        ({"students": "kept"}, ""),
        ({"students": [world["b"]["end_user"].pk]}, ""),
        ({"students": ["ok", "\x00"]}, ""),
        ({"students": [True]}, ""),
        ({"students": ["x"] * 10_001}, ""),
        ({"pupils": []}, ""),
        (roster, "?dry_run=perhaps"),
    ]:
        answer = admin_a("put", path + params, body)
        assert answer.status_code == 400, (str(body)[:80], answer.content[:300])
    assert CourseMember.objects.filter(course=course).count() == members
    emptied = admin_a("put", path, {"students": []}).json()
    assert (emptied["removed"], CourseMember.objects.filter(course=course).count()) == (3, 0)


# --- keys and usage --------------------------------------------------------------------------


def test_course_keys(world, admin_a):
    course, student = world["a"]["course"], world["a"]["end_user"]
    path = f"{BASE}/courses/{course.pk}/keys"
    answer = admin_a("post", path, {"name": "notebook", "student": "user-a"})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["key"].startswith("sk-") and body["student"] == student.pk
    assert (body["name"], body["subject"], body["license"]) == (
        "notebook",
        "user-a",
        course.license_id,
    )
    row = ApiKey.objects.get(pk=body["id"])
    assert (row.course_id, row.end_user_id, row.active) == (course.pk, student.pk, True)
    principal = resolve_credential(body["key"])
    assert principal is not None and principal.course_id == course.pk
    (event,) = audit_rows(AuditEvent.Action.API_KEY_CREATED)
    assert event.detail["course"] == course.pk and event.detail["end_user"] == student.pk

    listed = admin_a("get", path).json()["results"]
    assert [r["id"] for r in listed] == [row.pk] and "key" not in listed[0]

    outsider = EndUser.objects.create(license=course.license, subject="not-in-course")
    for student_value in (
        outsider.pk,
        "not-in-course",
        "unknown",
        world["b"]["end_user"].pk,
        2**64,
    ):
        answer = admin_a("post", path, {"student": student_value})
        assert answer.status_code == 400 and "student" in answer.json(), student_value
    assert admin_a("post", path, {"student": student.pk, "name": "x" * 201}).status_code == 400
    assert admin_a("post", path, {"student": student.pk, "license": 1}).status_code == 400
    assert ApiKey.objects.filter(course=course).count() == 1
    assert not EndUser.objects.filter(subject="unknown").exists()


def test_usage(world, admin_a):
    course, student = world["a"]["course"], world["a"]["end_user"]
    tx = world["a"]["transaction"]
    tx.course = course
    tx.save()
    path = f"{BASE}/courses/{course.pk}/usage"
    answer = admin_a("get", path)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    (row,) = body["rows"]
    assert row["end_user"] == student.pk and row["student"] == "user-a"
    assert (row["member"], row["paused"], row["requests"], row["refusals"]) == (True, False, 1, 0)
    assert (row["credits"], row["models"], row["allowance"]) == (
        1,
        ["text-embedding-3-small"],
        None,
    )
    assert body["requests"] == 1 and body["period"] == "day"

    later = admin_a("get", path, {"since": "2999-01-01T00:00:00Z"}).json()
    assert later["rows"][0]["requests"] == 0
    for bad in ({"since": "soon"}, {"until": "\x00"}, {"since": "2026-13-01"}):
        answer = admin_a("get", path, bad)
        assert answer.status_code == 400, (bad, answer.content)

    csv_answer = admin_a("get", path, {"format": "csv"})
    assert csv_answer.status_code == 200 and csv_answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(csv_answer.content.decode())))
    assert rows[0]["end_user"] == str(student.pk) and rows[0]["requests"] == "1"
    bad_csv = admin_a("get", path, {"format": "csv", "since": "soon"})
    assert bad_csv.status_code == 400 and "since" in bad_csv.json()


# --- the OpenAPI document, the command, the token ---------------------------------------------


def test_openapi_lists_the_course_paths(world, admin_a):
    paths = admin_a("get", f"{BASE}/openapi.json").json()["paths"]
    for expected in (
        "/manage/v1/courses",
        "/manage/v1/courses/{id}",
        "/manage/v1/courses/{id}/windows",
        "/manage/v1/courses/{id}/windows/{window_id}",
        "/manage/v1/courses/{id}/members",
        "/manage/v1/courses/{id}/members/{member_id}",
        "/manage/v1/courses/{id}/keys",
        "/manage/v1/courses/{id}/usage",
    ):
        assert expected in paths, expected
    assert set(paths["/manage/v1/courses/{id}/members"]) == {"get", "post", "put"}
    assert set(paths["/manage/v1/courses/{id}"]) == {"get", "patch", "delete"}


def test_create_institution_admin_with_courses(world, monkeypatch, capsys):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "s3cret-pass")
    second = Course.objects.create(
        institution=world["a"]["institution"], license=world["a"]["license"], code="CS2", name="2"
    )
    args = ["create_institution_admin", "Institution a", "prof", "--role", "teacher", "--noinput"]
    call_command(*args, "--course", "CS-a", "--course", "CS2")
    assert "teaching CS-a, CS2" in capsys.readouterr().out
    taught = CourseTeacher.objects.filter(user__username="prof").values_list("course", flat=True)
    assert set(taught) == {world["a"]["course"].pk, second.pk}
    assert audit_rows(AuditEvent.Action.ROLE_CHANGED)[-1].detail["code"] == "CS2"

    from django.contrib.auth import get_user_model

    users = get_user_model().objects.count()
    for extra, message in [
        (["--course", "CS-b"], "No course 'CS-b'"),  # another institution's
        (["--course", "CS-a", "--course", "NOPE"], "No course 'NOPE'"),
        (["--course", "x\x00"], "NUL"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command(*args[:2], "prof2", *args[3:], *extra)
    with pytest.raises(CommandError, match="--role teacher only"):
        call_command(*args[:2], "prof2", "--role", "admin", "--noinput", "--course", "CS-a")
    assert get_user_model().objects.count() == users


def test_a_teacher_holds_a_management_token(world):
    from django.contrib.auth import get_user_model

    from licensing.models import AdminProfile

    user = get_user_model().objects.create_user("prof", password="pw", is_staff=True)
    AdminProfile.objects.create(user=user, institution=world["a"]["institution"], role="teacher")
    CourseTeacher.objects.create(course=world["a"]["course"], user=user)
    session = Client()
    session.force_login(user)
    page = session.get("/admin/my-token/")
    assert page.status_code == 200 and b"You have no token yet" in page.content
    assert b'id="my-token-link"' in session.get("/admin/").content
    made = session.post("/admin/my-token/")
    assert made.status_code == 200
    token = Token.objects.get(user=user)
    assert token.key in made.content.decode()
    (event,) = audit_rows(AuditEvent.Action.TOKEN_CREATED)
    assert event.target == f"user:{user.pk}"
    by_token = Client(headers={"Authorization": f"Token {token.key}"})
    listed = by_token.get(f"{BASE}/courses").json()["results"]
    assert [row["id"] for row in listed] == [world["a"]["course"].pk]
    assert by_token.get(f"{BASE}/licenses").status_code == 403
    assert by_token.get(f"{BASE}/keys").status_code == 403
