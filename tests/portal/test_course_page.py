"""The portal's course page (`/portal/courses/<id>/`, issue 26): a member sees the learner view
(the course's state now, their allowance, the pool and the license, their usage in the course,
the models the course allows, their course keys), a teacher of the course or an admin of its
institution the instructor view (settings, windows, the overlay in words, the exam switch, the
per-student usage); anyone else a 404. Hostile ids and bodies: a 4xx, never a 500."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from licensing.access.credentials import api_key_create
from licensing.courses.services import (
    course_create,
    course_key_create,
    course_member_add,
    course_member_update,
    course_teacher_add,
    course_update,
    course_window_add,
)
from licensing.ledger.budget import course_levels_usage
from licensing.models import AdminProfile, ApiKey, AuditEvent, Course, Transaction
from licensing.portal import courses as portal_courses

from .conftest import make_student, signed_in

pytestmark = pytest.mark.django_db

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


def text(response) -> str:
    return response.content.decode()


def make_course(end_user, code="CS101", **kwargs) -> Course:
    institution = end_user.license.institution
    institution.timezone = "Europe/Berlin"
    institution.currency = "EUR"
    institution.micro_credits_per_currency_unit = 1_000_000
    institution.save()
    fields = {"allowance": 2_000_000, "allowance_period": "week", **kwargs}
    return course_create(license=end_user.license, name=f"Course {code}", code=code, **fields)


def staff(username: str, institution, role: str = "teacher"):
    user = get_user_model().objects.create_user(username, email=f"{username}@hill.example")
    user.is_staff = True
    user.save()
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


@pytest.fixture
def world(db):
    """A course with a member (the learner), a teacher (staff, no end user) and a student of
    the same license who is not a member."""
    user, end_user = make_student()
    course = make_course(end_user, pool_limit=10_000_000)
    course_member_add(course=course, end_user=end_user)
    teacher = staff("teacher-1", course.institution)
    course_teacher_add(course=course, user=teacher)
    outsider, _ = make_student()
    return {
        "user": user,
        "end_user": end_user,
        "course": course,
        "teacher": teacher,
        "outsider": outsider,
    }


def page_of(course) -> str:
    return f"/portal/courses/{course.pk}/"


def ledger_row(end_user, course, *, credits, model="gpt-4o-mini", status=200, outcome=None):
    fields = {"outcome": outcome} if outcome else {}
    return Transaction.objects.create(
        request_id=uuid.uuid4().hex,
        created_at=timezone.now(),
        license=end_user.license,
        end_user=end_user,
        course=course,
        service="chat_completions",
        requested_model=model,
        billed_model=model,
        provider="direct",
        status_code=status,
        credits=credits,
        **fields,
    )


# --- who sees what ----------------------------------------------------------------------------


def test_a_member_sees_the_learner_view(world):
    body = text(signed_in(world["user"]).get(page_of(world["course"])))
    assert "CS101" in body and "Course CS101" in body
    assert 'id="allowance"' in body and 'id="pool"' in body and 'id="license-level"' in body
    assert 'id="key-form"' in body and 'id="student-usage"' not in body
    assert "Open" in body and "Europe/Berlin" in body


def test_members_and_teachers_see_the_courses_instructions(world):
    course = world["course"]
    assert 'id="course-instructions"' not in text(signed_in(world["user"]).get(page_of(course)))
    course_update(course=course, changes={"instructions": "Ask first.\n<script>x()</script>"})
    for who in (world["user"], world["teacher"]):
        body = text(signed_in(who).get(page_of(course)))
        assert 'id="course-instructions"' in body
        assert "Ask first.<br>&lt;script&gt;x()&lt;/script&gt;" in body
        assert "<script>x()" not in body


def test_an_ended_course_says_so_and_takes_no_new_keys(world):
    course = world["course"]
    ended = timezone.now() - timedelta(minutes=1)
    course_update(course=course, changes={"ends_at": ended})
    client = signed_in(world["user"])
    body = text(client.get(page_of(course)))
    assert "Ended" in body and "The course ended on" in body
    answer = client.post(page_of(course), {"name": "late"})
    assert answer.status_code == 403
    assert "This course has ended: it takes no new keys." in text(answer)
    assert not ApiKey.objects.filter(course=course).exists()
    assert "Ended" in text(signed_in(world["teacher"]).get(page_of(course)))


def test_a_teacher_sees_the_instructor_view_without_an_end_user(world):
    client = signed_in(world["teacher"])
    body = text(client.get(page_of(world["course"])))
    assert 'id="student-usage"' in body and 'id="exam-form"' in body
    assert f"/admin/licensing/course/{world['course'].pk}/change/" in body
    assert 'id="key-form"' not in body and 'id="allowance"' not in body
    # Still no student pages for them.
    assert client.get("/portal/").status_code == 403
    assert client.get("/portal/keys/").status_code == 403


def test_an_institution_admin_sees_the_instructor_view(world):
    admin = staff("admin-1", world["course"].institution, role="admin")
    body = text(signed_in(admin).get(page_of(world["course"])))
    assert 'id="student-usage"' in body


def test_a_superuser_sees_the_instructor_view(world):
    root = get_user_model().objects.create_superuser("root", "root@x.example", "pw")
    assert 'id="student-usage"' in text(signed_in(root).get(page_of(world["course"])))


def test_strangers_get_a_404(world):
    course = world["course"]
    # A student of the same license who is not a member.
    assert signed_in(world["outsider"]).get(page_of(course)).status_code == 404
    # A reviewer of the institution.
    reviewer = staff("reviewer-1", course.institution, role="reviewer")
    assert signed_in(reviewer).get(page_of(course)).status_code == 404
    # Another teacher of the institution (teaching another course).
    other_teacher = staff("teacher-2", course.institution)
    other = course_create(license=course.license, name="Other", code="OTHER")
    course_teacher_add(course=other, user=other_teacher)
    assert signed_in(other_teacher).get(page_of(course)).status_code == 404
    assert signed_in(world["teacher"]).get(page_of(other)).status_code == 404
    # The member of one course on another course of the same license.
    assert signed_in(world["user"]).get(page_of(other)).status_code == 404


def test_another_institutions_people_get_a_404(world):
    user, end_user = make_student(institution="Other School", license="other-students")
    other_course = make_course(end_user, code="BIO1")
    course_member_add(course=other_course, end_user=end_user)
    admin = staff("admin-b", other_course.institution, role="admin")
    for who in (user, admin):
        assert signed_in(who).get(page_of(world["course"])).status_code == 404
    assert signed_in(world["teacher"]).get(page_of(other_course)).status_code == 404
    assert signed_in(world["user"]).get(page_of(other_course)).status_code == 404


def test_an_inactive_member_gets_a_404(world):
    end_user = world["end_user"]
    end_user.active = False
    end_user.save()
    assert signed_in(world["user"]).get(page_of(world["course"])).status_code == 404


def test_anonymous_goes_to_the_login_page(world):
    answer = Client().get(page_of(world["course"]))
    assert answer.status_code == 302
    assert answer["Location"].startswith("/portal/login/?next=%2Fportal%2Fcourses%2F")


@pytest.mark.parametrize(
    "course_id",
    [
        str(2**64),
        str(2**63),
        "-1",
        "0",
        "abc",
        "1e400",
        "%00",
        "1%00",
        "%ED%A0%80",  # a lone surrogate, UTF-8 encoded
        "١",  # an Arabic-Indic digit: isdigit() but not ASCII
        "9" * 40,
    ],
)
def test_hostile_course_ids_are_404(world, course_id):
    client = signed_in(world["teacher"])
    assert client.get(f"/portal/courses/{course_id}/").status_code == 404
    assert client.post(f"/portal/courses/{course_id}/exam/", {"exam_mode": "on"}).status_code == 404
    learner = signed_in(world["user"])
    revoke = f"/portal/courses/{course_id}/keys/1/revoke/"
    assert learner.post(revoke).status_code == 404


# --- the learner view -----------------------------------------------------------------------


def test_the_learners_numbers_are_the_wallets(world):
    course, end_user = world["course"], world["end_user"]
    client = signed_in(world["user"])
    _, key = course_key_create(course=course, end_user=end_user, via="test")
    # Spend through the store's own wallets: a charged ledger row's levels are what a request
    # leaves; here the wallets are written as the charge would (allowance, pool, license).
    from licensing.models import Wallet

    allowance, pool = course_levels_usage(
        course.pk,
        end_user_id=end_user.pk,
        license_id=course.license_id,
        holder=f"user:{end_user.pk}",
    )
    start = datetime.fromisoformat(allowance["window_start"])
    Wallet.objects.create(
        license=course.license,
        holder=f"course:{course.pk}:user:{end_user.pk}",
        period="week",
        window_start=start,
        unit="micro_credits",
        spent=500_000,
    )
    Wallet.objects.create(
        license=course.license,
        holder=f"course:{course.pk}",
        period="week",
        window_start=start,
        unit="micro_credits",
        spent=9_700_000,
    )
    allowance, pool = course_levels_usage(
        course.pk,
        end_user_id=end_user.pk,
        license_id=course.license_id,
        holder=f"user:{end_user.pk}",
    )
    assert (allowance["remaining"], pool["remaining"]) == (1_500_000, 300_000)
    body = text(client.get(page_of(course)))
    card = body.split('id="allowance"')[1].split("</section>")[0]
    assert "1,500,000 of 2,000,000 micro-credits left" in card and "1.50 EUR" in card
    pool_card = body.split('id="pool"')[1].split("</section>")[0]
    assert "300,000 of 10,000,000 micro-credits left" in pool_card
    # The smallest: the pool's (the license has 5,000,000 left).
    smallest = body.split('id="course-remaining"')[1].split("</section>")[0]
    assert "300,000 micro-credits" in smallest and "the course pool" in smallest
    levels = portal_courses.course_levels_of(course, end_user)
    assert levels is not None and levels.remaining == 300_000
    assert levels.license.remaining == 5_000_000
    # The dashboard lists the course with what remains.
    overview = text(client.get("/portal/"))
    courses = overview.split('id="courses"')[1].split("</ul>")[0]
    assert page_of(course) in courses and "300,000 micro-credits" in courses
    assert key  # the key exists; its use is tests/portal/test_course_sdk.py


def test_allowance_resets_at_the_next_local_period(world):
    course, end_user = world["course"], world["end_user"]
    # Wednesday 2026-11-25 12:00 UTC: the week began Monday 00:00 Berlin (Sunday 23:00 UTC).
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    levels = portal_courses.course_levels_of(course, end_user, now=now)
    assert levels is not None
    assert levels.allowance.window_start == datetime(2026, 11, 22, 23, 0, tzinfo=UTC)
    assert levels.allowance.resets_at == datetime(2026, 11, 29, 23, 0, tzinfo=UTC)
    day = course_update(course=course, changes={"allowance_period": "day"})
    # The day of the clocks going back in Berlin lasts 25 hours.
    autumn = datetime(2026, 10, 25, 12, 0, tzinfo=UTC)
    levels = portal_courses.course_levels_of(day, end_user, now=autumn)
    assert levels is not None
    assert levels.allowance.window_start == datetime(2026, 10, 24, 22, 0, tzinfo=UTC)
    assert levels.allowance.resets_at == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)


def test_usage_is_the_students_own_in_this_course(world):
    course, end_user = world["course"], world["end_user"]
    other = course_create(license=course.license, name="Other", code="OTHER")
    ledger_row(end_user, course, credits=1234, model="gpt-4o-mini")
    ledger_row(end_user, other, credits=999_999, model="o4-mini")  # another course
    ledger_row(end_user, None, credits=888_888, model="gpt-4.1")  # a plain portal key
    _, classmate = make_student()
    course_member_add(course=course, end_user=classmate)
    ledger_row(classmate, course, credits=777_777, model="o3")
    body = text(signed_in(world["user"]).get(page_of(course)))
    by_model = body.split('id="usage-by-model"')[1].split("</table>")[0]
    assert "gpt-4o-mini" in by_model and ">1,234<" in by_model
    for foreign in ("o4-mini", "gpt-4.1", "o3", "999,999", "888,888", "777,777"):
        assert foreign not in by_model
    assert "1 request, 1,234 micro-credits" in body


def test_models_are_the_courses_policy(world):
    from catalog.services import catalog_load_defaults, connection_configure
    from core.localcache import clear_all

    catalog_load_defaults()
    connection_configure(
        provider_slug="direct", base_url="https://api.direct.example/v1", api_key="k"
    )
    clear_all()
    course = world["course"]
    overlay = {
        "services": {"chat_completions": {"params": {"model": {"allowed": ["gpt-4o-mini"]}}}}
    }
    course_update(course=course, changes={"policy": overlay})
    body = text(signed_in(world["user"]).get(page_of(course)))
    models = body.split('id="models"')[1].split("</table>")[0]
    assert "<code>gpt-4o-mini</code>" in models
    assert "text-embedding-3-small" not in models and "gpt-4.1<" not in models
    # The overview still lists the license's models.
    overview = text(signed_in(world["user"]).get("/portal/"))
    assert "text-embedding-3-small" in overview.split('id="models"')[1]
    # The teacher reads the overlay in words.
    teacher = text(signed_in(world["teacher"]).get(page_of(course)))
    allowed = teacher.split('id="allowed"')[1].split("</table>")[0]
    assert "Chat (chat completions)" in allowed and "gpt-4o-mini" in allowed
    assert "chat_completions" not in allowed  # the service in words, not its code name
    assert "embeddings" not in allowed


def test_state_closed_until_in_the_institutions_zone(world):
    course = world["course"]
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    starts = starts.replace(hour=7, minute=0, second=0)  # 08:00 in Berlin (winter time)
    course_window_add(course=course, starts_at=starts, ends_at=starts + timedelta(hours=2))
    body = text(signed_in(world["user"]).get(page_of(course)))
    state = body.split('id="course-state"')[1].split("</section>")[0]
    assert "Closed until" in state and ", 08:00." in state
    teacher = text(signed_in(world["teacher"]).get(page_of(course)))
    windows = teacher.split('id="windows"')[1].split("</table>")[0]
    assert "08:00" in windows and "10:00" in windows and "Open" in windows


def test_state_paused_and_exam(world):
    course, end_user = world["course"], world["end_user"]
    member = course.members.get(end_user=end_user)
    course_member_update(member=member, changes={"paused": True})
    body = text(signed_in(world["user"]).get(page_of(course)))
    assert "paused your access" in body.split('id="course-state"')[1].split("</section>")[0]
    course_member_update(member=member, changes={"paused": False})
    course_update(course=course, changes={"exam_mode": True})
    body = text(signed_in(world["user"]).get(page_of(course)))
    state = body.split('id="course-state"')[1].split("</section>")[0]
    assert "Exam mode" in state and "Nothing can be used" in state


# --- course keys ----------------------------------------------------------------------------


def test_create_a_course_key_shown_once_and_revoke_it(world):
    course, end_user = world["course"], world["end_user"]
    client = signed_in(world["user"])
    answer = client.post(page_of(course), {"name": "lab"})
    assert answer.status_code == 302 and answer["Location"] == page_of(course)
    row = ApiKey.objects.get(end_user=end_user)
    assert (row.course_id, row.license_id, row.name, row.active) == (
        course.pk,
        course.license_id,
        "lab",
        True,
    )
    event = AuditEvent.objects.get(action=AuditEvent.Action.API_KEY_CREATED)
    assert event.actor == world["user"] and event.target == f"api_key:{row.pk}"
    assert (event.detail["via"], event.detail["course"]) == ("portal", course.pk)
    first = text(client.get(page_of(course)))
    (key,) = set(KEY_RE.findall(first))
    assert 'id="new-key"' in first
    again = text(client.get(page_of(course)))
    assert key not in again and 'id="new-key"' not in again and row.prefix in again
    # The portal's key list shows it too; another course's page does not.
    assert row.prefix in text(client.get("/portal/keys/"))

    revoke = f"/portal/courses/{course.pk}/keys/{row.pk}/revoke/"
    assert client.post(revoke).status_code == 302
    row.refresh_from_db()
    assert not row.active
    assert AuditEvent.objects.filter(action=AuditEvent.Action.API_KEY_REVOKED).count() == 1
    assert client.post(revoke).status_code == 404  # revoked already


def test_terms_come_first_for_course_keys(world):
    institution = world["course"].institution
    institution.terms_of_use = "Be kind."
    institution.save()
    client = signed_in(world["user"])
    body = text(client.get(page_of(world["course"])))
    assert 'id="key-form"' not in body and "accept the terms of use" in body
    answer = client.post(page_of(world["course"]), {"name": "early"})
    assert answer.status_code == 403
    assert not ApiKey.objects.exists()


def test_the_key_limit_counts_every_key_of_the_student(world):
    course, end_user = world["course"], world["end_user"]
    institution = course.institution
    institution.portal_key_limit = 2
    institution.save()
    client = signed_in(world["user"])
    assert client.post("/portal/keys/", {"name": "plain"}).status_code == 302
    assert client.post(page_of(course), {"name": "course"}).status_code == 302
    answer = client.post(page_of(course), {"name": "one too many"})
    assert answer.status_code == 409 and "revoke one first" in text(answer)
    assert ApiKey.objects.filter(end_user=end_user).count() == 2


@pytest.mark.parametrize("name", ["a\x00b", "x" * 101, "tab\there", "esc\x1b[31m"])
def test_hostile_key_names_are_refused(world, name):
    answer = signed_in(world["user"]).post(page_of(world["course"]), {"name": name})
    assert answer.status_code == 400
    assert not ApiKey.objects.exists()


def test_a_lone_surrogate_is_no_500(world):
    # Form data is UTF-8 decoded with replacement: a lone surrogate arrives as U+FFFD.
    client = signed_in(world["user"])
    form = "application/x-www-form-urlencoded"
    answer = client.post(page_of(world["course"]), "name=%ED%A0%80x", content_type=form)
    assert answer.status_code in (302, 400)
    teacher = signed_in(world["teacher"])
    url = f"/portal/courses/{world['course'].pk}/exam/"
    assert teacher.post(url, "exam_mode=%ED%A0%80", content_type=form).status_code == 400


def test_a_huge_body_is_no_500(world):
    answer = signed_in(world["user"]).post(page_of(world["course"]), {"name": "x" * 3_000_000})
    assert answer.status_code in (400, 413)
    assert not ApiKey.objects.exists()


def test_revoking_keys_that_are_not_this_courses(world):
    course, end_user = world["course"], world["end_user"]
    client = signed_in(world["user"])
    plain, _ = api_key_create(license=end_user.license, end_user=end_user)
    other = course_create(license=course.license, name="Other", code="OTHER")
    course_member_add(course=other, end_user=end_user)
    other_key, _ = course_key_create(course=other, end_user=end_user, via="test")
    _, classmate = make_student()
    course_member_add(course=course, end_user=classmate)
    theirs, _ = course_key_create(course=course, end_user=classmate, via="test")
    for key in (plain, other_key, theirs):
        answer = client.post(f"/portal/courses/{course.pk}/keys/{key.pk}/revoke/")
        assert answer.status_code == 404
        key.refresh_from_db()
        assert key.active
    for key_id in (str(2**64), "-1", "abc", "%00"):
        answer = client.post(f"/portal/courses/{course.pk}/keys/{key_id}/revoke/")
        assert answer.status_code == 404
    # A teacher cannot revoke a student's key either.
    answer = signed_in(world["teacher"]).post(
        f"/portal/courses/{course.pk}/keys/{theirs.pk}/revoke/"
    )
    assert answer.status_code == 404


def test_a_removed_member_cannot_make_a_course_key(world):
    from licensing.courses.services import course_member_remove

    course, end_user = world["course"], world["end_user"]
    course_member_remove(member=course.members.get(end_user=end_user))
    client = signed_in(world["user"])
    assert client.get(page_of(course)).status_code == 404
    assert client.post(page_of(course), {"name": "late"}).status_code == 404
    assert not ApiKey.objects.exists()


# --- the instructor view ----------------------------------------------------------------------


def test_per_student_usage_table(world):
    course, end_user = world["course"], world["end_user"]
    ledger_row(end_user, course, credits=4_000, model="gpt-4o-mini")
    ledger_row(end_user, course, credits=0, status=403, outcome="denied")
    body = text(signed_in(world["teacher"]).get(page_of(course)))
    table = body.split('id="student-usage"')[1].split("</table>")[0]
    row = [r for r in table.split("<tr>") if "student" in r and "hill.example" in r]
    assert row, table
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row[0], re.S)
    assert cells[1:5] == ["1", "1", "4,000", "0.0040 EUR"], cells
    assert cells[7] == "0 of 2,000,000", cells  # rows made here charge no wallet
    assert "gpt-4o-mini" in cells[5]
    assert "prompts" in body  # says what it never shows


def test_the_exam_switch(world):
    course = world["course"]
    client = signed_in(world["teacher"])
    answer = client.post(f"/portal/courses/{course.pk}/exam/", {"exam_mode": "on"})
    assert answer.status_code == 302 and answer["Location"] == page_of(course)
    course.refresh_from_db()
    assert course.exam_mode
    event = AuditEvent.objects.get(action=AuditEvent.Action.EXAM_MODE_CHANGED)
    assert event.actor == world["teacher"] and event.detail["exam_mode"] is True
    assert "Switch exam mode off" in text(client.get(page_of(course)))
    assert (
        client.post(f"/portal/courses/{course.pk}/exam/", {"exam_mode": "off"}).status_code == 302
    )
    course.refresh_from_db()
    assert not course.exam_mode


@pytest.mark.parametrize("value", ["", "yes", "\x00", "ON", "on" * 1000])
def test_the_exam_switch_refuses_other_values(world, value):
    client = signed_in(world["teacher"])
    answer = client.post(f"/portal/courses/{world['course'].pk}/exam/", {"exam_mode": value})
    assert answer.status_code == 400
    world["course"].refresh_from_db()
    assert not world["course"].exam_mode


def test_the_exam_switch_is_the_instructors_only_and_post_only(world):
    course = world["course"]
    url = f"/portal/courses/{course.pk}/exam/"
    for who in (world["user"], world["outsider"]):
        assert signed_in(who).post(url, {"exam_mode": "on"}).status_code == 404
    assert signed_in(world["teacher"]).get(url).status_code == 405
    assert Client().post(url, {"exam_mode": "on"}).status_code == 302  # to the login page
    course.refresh_from_db()
    assert not course.exam_mode
    # An instructor does not post keys.
    assert signed_in(world["teacher"]).post(page_of(course), {"name": "x"}).status_code == 405


def test_the_exam_switch_needs_the_csrf_token(world):
    course = world["course"]
    client = signed_in(world["teacher"], enforce_csrf=True)
    assert client.post(f"/portal/courses/{course.pk}/exam/", {"exam_mode": "on"}).status_code == 403
    client.get(page_of(course))
    token = client.cookies["csrftoken"].value
    answer = client.post(
        f"/portal/courses/{course.pk}/exam/",
        {"exam_mode": "on", "csrfmiddlewaretoken": token},
    )
    assert answer.status_code == 302
    course.refresh_from_db()
    assert course.exam_mode
