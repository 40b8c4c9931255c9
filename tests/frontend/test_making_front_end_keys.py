"""Front-end keys made by an institution admin in the admin, by `manage.py create_api_key
--front-end` and through the management API, and shown as such wherever keys are listed; never
for another institution's course, never one student's own key."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client

from licensing.access.credentials import api_key_create, resolve_credential
from licensing.models import ApiKey, AuditEvent

from ..console.test_admin import url
from ..console.test_manage_api import token_client, user_with
from .conftest import make_school

# The admin's and the management API's queries: both databases.
pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


@pytest.fixture
def schools(db):
    front, other = make_school("Front School"), make_school("Other School")
    return front, other


def institution_admin(school) -> Client:
    client = Client()
    client.force_login(user_with("admin", school.license.institution))
    return client


def test_an_institution_admin_makes_one_in_the_admin(schools):
    front, other = schools
    course = front.course("BIO-7A")
    admin = institution_admin(front)
    add = url(ApiKey, "add")
    page = admin.get(add).content.decode()
    assert 'name="kind"' in page and "Front-end key" in page
    assert "BIO-7A" in page and "XX-1" not in page  # the course choices are the institution's
    answer = admin.post(
        add,
        {"license": front.license.pk, "kind": "front_end", "course": course.pk,
         "name": "Open WebUI BIO", "active": "on"},
        follow=True,
    )  # fmt: skip
    assert answer.status_code == 200
    (key,) = set(KEY_RE.findall(answer.content.decode()))
    row = ApiKey.objects.get(name="Open WebUI BIO")
    assert (row.kind, row.course_id, row.license_id) == ("front_end", course.pk, front.license.pk)
    assert "ENABLE_FORWARD_USER_INFO_HEADERS=true" in answer.content.decode()
    principal = resolve_credential(key)
    assert principal is not None and principal.front_end and principal.course_id == course.pk
    audit = AuditEvent.objects.get(
        action=AuditEvent.Action.API_KEY_CREATED, target=f"api_key:{row.pk}"
    )
    assert audit.institution_id == front.license.institution_id

    # Listed as such, and found by the filter.
    listed = admin.get(url(ApiKey, "changelist") + "?kind=front_end").content.decode()
    assert row.prefix in listed and "Front-end key" in listed
    assert front.key_row.prefix in listed
    license_page = admin.get(url(type(front.license), "change", front.license.pk)).content.decode()
    assert "Front-end key" in license_page
    # Kind and course are fixed once it is made.
    change = admin.get(url(ApiKey, "change", row.pk)).content.decode()
    assert 'name="kind"' not in change and 'name="course"' not in change


def test_the_admin_refuses_another_institutions_course(schools):
    front, other = schools
    theirs = other.course("XX-1")
    mine_on_other_license = front.course("BIO-7A")
    admin = institution_admin(front)
    for course in (theirs, mine_on_other_license):
        license = front.license if course is theirs else other.license
        answer = admin.post(
            url(ApiKey, "add"),
            {"license": license.pk, "kind": "front_end", "course": course.pk, "active": "on"},
        )
        assert answer.status_code == 200  # the form again, with its error
        assert not ApiKey.objects.filter(course=course).exists()


def test_the_command_makes_one(schools):
    front, _ = schools
    course = front.course("BIO-7A")
    out = StringIO()
    call_command("create_api_key", front.license.name, "--front-end", "--name", "OWUI", stdout=out)
    key = out.getvalue().strip()
    assert KEY_RE.fullmatch(key)
    principal = resolve_credential(key)
    assert principal is not None and principal.front_end and principal.course_id is None
    out = StringIO()
    call_command(
        "create_api_key", front.license.name, "--front-end", "--course", "BIO-7A", stdout=out
    )
    principal = resolve_credential(out.getvalue().strip())
    assert principal is not None and principal.course_id == course.pk
    with pytest.raises(CommandError, match="No course 'XX-1'"):
        call_command("create_api_key", front.license.name, "--front-end", "--course", "XX-1")
    with pytest.raises(CommandError, match="--course goes with --front-end"):
        call_command("create_api_key", front.license.name, "--course", "BIO-7A")
    out = StringIO()
    call_command("create_api_key", front.license.name, stdout=out)  # an ordinary one, as before
    principal = resolve_credential(out.getvalue().strip())
    assert principal is not None and not principal.front_end


def test_the_management_api_makes_lists_and_rotates_them(schools):
    front, other = schools
    course = front.course("BIO-7A")
    theirs = other.course("XX-1")
    api = token_client(user_with("admin", front.license.institution))
    made = api.post(
        "/manage/v1/keys",
        {"license": front.license.pk, "kind": "front_end", "course": course.pk, "name": "OWUI"},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["kind"], body["course"]) == ("front_end", course.pk)
    listed = api.get("/manage/v1/keys?kind=front_end").json()["results"]
    assert {row["id"] for row in listed} == {body["id"], front.key_row.pk}
    rotated = api.post(f"/manage/v1/keys/{body['id']}/rotate").json()
    assert (rotated["kind"], rotated["course"]) == ("front_end", course.pk)
    for bad in (
        {"license": front.license.pk, "kind": "front_end", "course": theirs.pk},
        {"license": front.license.pk, "kind": "nonsense"},
        {"license": front.license.pk, "kind": "front_end\x00"},
    ):
        answer = api.post("/manage/v1/keys", bad, content_type="application/json")
        assert answer.status_code == 400, (bad, answer.content)
    # The course's key list says which kind each is.
    keys = api.get(f"/manage/v1/courses/{course.pk}/keys").json()
    rows = keys["results"] if isinstance(keys, dict) else keys
    assert {row["kind"] for row in rows} == {"front_end"}


def test_a_front_end_key_is_never_one_students_own(schools):
    front, _ = schools
    ana = front.student("ana@front.example")
    with pytest.raises(ValueError, match="no end user"):
        api_key_create(license=front.license, kind=ApiKey.Kind.FRONT_END, end_user=ana)
    with pytest.raises(ValueError, match="Not a kind"):
        api_key_create(license=front.license, kind="super")
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=front.key_row.pk).update(end_user=ana)
    assert "front-end key" in str(front.key_row)


def test_the_usage_page_names_it_a_front_end_key(schools):
    from datetime import timedelta

    from django.utils import timezone

    from licensing.console.usage_report import usage_report
    from licensing.models import Transaction

    front, _ = schools
    ana = front.student("ana@front.example")
    Transaction.objects.create(
        request_id="r1", license=front.license, api_key=front.key_row, end_user=ana,
        service="chat_completions", requested_model="gpt-4o-mini", status_code=200, credits=7,
    )  # fmt: skip
    today = timezone.now().date()
    report = usage_report(Transaction.objects.all(), today, today + timedelta(days=1))
    (row,) = report.top_api_keys
    assert row.label == f"{front.key_row.prefix}… (Open WebUI, front-end key)"
