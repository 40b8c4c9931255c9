"""The course page in the admin (licensing.courses.admin, docs/teachers.md), through
the Django test client: the overlay edited through the policy form under the license type's
policy (only what it allows is offered, a forged widening is refused with the reason, rules the
form does not cover survive), exam mode and what it allows, windows in the institution's time
zone, "try a request" by the course's rules now, the per-student usage (equal to the ledger)
and its CSV, teacher vs admin fields, every save through the course services (one audit row
per change), and hostile posts (form errors or 404s, never a 500)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Count, Sum
from django.test import Client
from django.urls import reverse

from core import clock
from core.text import is_storable_text
from licensing.courses.services import course_create
from licensing.ledger.budget import course_window_start
from licensing.models import (
    AdminProfile,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    CourseWindow,
    EndUser,
    Outcome,
    Transaction,
    Wallet,
)
from tests.kit import fresh, rows_made_once

from .test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

OV, EX = "overlayform-", "examform-"
CEILING = {
    "version": 1,
    "services": {
        "chat_completions": {
            "params": {
                "model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                "max_tokens": {"max": 4000},
            }
        },
        "embeddings": {},
    },
}
# The course's overlay as an institution admin left it: two models, and a rule only the JSON
# view writes (the form must keep it).
OVERLAY = {
    "version": 1,
    "services": {
        "chat_completions": {
            "params": {
                "model": {"allowed": ["gpt-4o-mini", "gpt-4.1"]},
                "user": {"patterns": ["s[0-9]+"]},
            }
        },
        "embeddings": {},
    },
}


@pytest.fixture(scope="module")
def _found(django_db_setup, django_db_blocker):
    with rows_made_once(django_db_blocker, make_found) as rows:
        yield rows


@pytest.fixture
def found(db, _found):
    """An institution, its license type under CEILING and the course Intro under OVERLAY, made
    once for the module (tests/kit.py)."""
    return fresh(_found)


def make_found() -> dict:
    from catalog.services import catalog_load_defaults

    catalog_load_defaults()  # the checklists' models and providers
    found = make_licensing("cp")
    institution = found["institution"]
    institution.timezone, institution.currency = "Europe/Berlin", "EUR"
    institution.save()
    license_type = found["license"].license_type
    license_type.policy = CEILING
    license_type.save()
    found["course"] = course_create(
        license=found["license"],
        name="Intro",
        code="CS101",
        allowance=1_000_000,
        allowance_period="week",
        policy=OVERLAY,
    )
    return found


def teacher_client(course: Course, name: str = "teach") -> Client:
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    AdminProfile.objects.create(user=user, institution=course.institution, role="teacher")
    CourseTeacher.objects.create(course=course, user=user)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def teacher(found) -> Client:
    return teacher_client(found["course"])


def _page(client, course):
    response = client.get(url(Course, "change", course.pk))
    assert response.status_code == 200
    return response, form_data(response)


def _errors(response) -> str:
    form = response.context["adminform"].form
    return f"{form.errors!r} {form.overlay_form.errors!r} {form.exam_form.errors!r}"


def _post(client, course, data):
    return client.post(url(Course, "change", course.pk), data)


def _audit(action) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("pk"))


# --- the page ------------------------------------------------------------------------------


def test_the_page_shows_the_forms_the_ceiling_the_zone_the_panel_and_the_usage(found, teacher):
    course = found["course"]
    response, data = _page(teacher, course)
    page = response.content.decode()
    for part in ('id="overlay-form"', 'id="exam-form"', 'id="course-beside"'):
        assert part in page
    assert 'id="try-request"' in page and 'id="course-usage"' in page
    assert "<strong>Europe/Berlin</strong>" in page  # the windows' zone, named
    # Beside the form: what the license type allows and what the course keeps.
    beside = response.context["beside"]
    assert beside[0]["service"] == "chat_completions"
    assert beside[0]["license_type"] == "models: gpt-4o-mini, gpt-4.1; max_tokens ≤ 4000"
    assert beside[0]["course"].startswith("models: gpt-4o-mini, gpt-4.1; max_tokens ≤ 4000")
    assert beside[0]["exam"] == "off"
    # The overlay's models ticked; exam mode "all services off".
    assert sorted(data[OV + "chat_completions__models"]) == ["gpt-4.1", "gpt-4o-mini"]
    assert data["exam_does"] == "off"
    # The allowance entered and shown in money at the institution's rate, the micro-credits
    # in its help.
    assert data["allowance"] == "1.00"
    assert "In EUR: 1 EUR = 1,000,000 micro-credits. Now 1.00 EUR = 1,000,000" in page


def test_only_what_the_license_type_allows_is_offered(found, teacher):
    response, _ = _page(teacher, found["course"])
    form = response.context["adminform"].form.overlay_form
    assert [s["service"] for s in form.sections] == ["chat_completions", "embeddings"]
    offered = sorted(v for v, _ in form.fields["chat_completions__models"].choices)
    assert offered == ["gpt-4.1", "gpt-4o-mini"]  # gpt-4o: the license type does not allow it
    assert form.fields["chat_completions__max_tokens__max"].max_value == 4000


def test_a_new_course_with_an_empty_overlay_shows_the_license_types_services_on(found):
    course = course_create(license=found["license"], name="Plain", code="PLAIN")
    client = teacher_client(course)
    _, data = _page(client, course)
    assert data[OV + "chat_completions__enabled"] == "on"
    assert data[OV + "embeddings__enabled"] == "on"
    assert OV + "chat_completions__models" not in data  # none ticked: the license type's
    # Saved unchanged, the overlay stays empty (no rule written for nothing).
    assert _post(client, course, data).status_code == 302
    course.refresh_from_db()
    assert course.policy == {}
    assert not _audit(AuditEvent.Action.COURSE_CHANGED)


# --- the overlay form ----------------------------------------------------------------------


def test_the_teacher_unticks_a_model_and_the_document_is_what_the_json_would_be(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    data[OV + "chat_completions__models"] = ["gpt-4o-mini"]
    data[OV + "chat_completions__max_tokens__max"] = "500"
    data[OV + "embeddings__enabled"] = ""
    answer = _post(teacher, course, data)
    assert answer.status_code == 302, _errors(answer)
    course.refresh_from_db()
    assert course.policy == {
        "version": 1,
        "services": {
            "chat_completions": {
                "params": {
                    "model": {"allowed": ["gpt-4o-mini"]},
                    "user": {"patterns": ["s[0-9]+"]},  # the JSON view's rule survives
                    "max_tokens": {"max": 500},
                }
            }
        },
    }
    # The same document posted through the JSON view alone saves the same.
    other = course_create(license=found["license"], name="Other", code="CS102", policy=OVERLAY)
    client = teacher_client(other, "teach2")
    _, data = _page(client, other)
    for name in list(data):
        if name.startswith(OV):
            del data[name]  # a post without the form: the JSON view as it is
    data["policy"] = json.dumps(course.policy)
    assert _post(client, other, data).status_code == 302
    other.refresh_from_db()
    assert other.policy == course.policy
    # One audit row for the change, with before and after.
    changed = [
        e for e in _audit(AuditEvent.Action.COURSE_CHANGED) if e.target == f"course:{course.pk}"
    ]
    assert len(changed) == 1
    assert changed[0].detail["after"]["policy"] == course.policy
    assert changed[0].detail["before"]["policy"] == OVERLAY


def test_a_forged_model_the_license_type_forbids_is_refused_with_the_reason(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    data[OV + "chat_completions__models"] = ["gpt-4o"]
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    assert "gpt-4o is not one of the available choices" in _errors(answer)
    # Through the JSON view (the form untouched): overlay_widenings' reason.
    _, data = _page(teacher, course)
    widened = json.loads(json.dumps(OVERLAY))
    widened["services"]["chat_completions"]["params"]["model"]["allowed"] = ["gpt-4o"]
    widened["services"]["image_generation"] = {}
    data["policy"] = json.dumps(widened)
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    page = answer.content.decode()
    assert "It may only narrow what it overlays" in page
    assert "services.chat_completions.params.model.allowed: &#x27;gpt-4o&#x27; is not among" in page
    assert "services.image_generation: not enabled by the license type" in page
    # A limit above the license type's, forged into the form.
    _, data = _page(teacher, course)
    data[OV + "chat_completions__max_tokens__max"] = "8000"
    answer = _post(teacher, course, data)
    assert answer.status_code == 200 and "less than or equal to 4000" in _errors(answer)
    course.refresh_from_db()
    assert course.policy == OVERLAY
    assert not _audit(AuditEvent.Action.COURSE_CHANGED)


def _chat(params: str) -> str:
    return '{"version": 1, "services": {"chat_completions": {"params": ' + params + "}}}"


@pytest.mark.parametrize(
    "policy",
    [
        _chat('{"user": {"patterns": ["\\u0000"]}}'),
        _chat('{"user": {"patterns": ["\\ud800"]}}'),
        _chat('{"max_tokens": {"max": 1e400}}'),
        _chat('{"max_tokens": {"max": 18446744073709551616}}'),
        _chat('{"nonsense": {"max": 1}}'),
        "[1, 2]",
        "not json",
    ],
)
def test_hostile_json_overlays_are_form_errors(found, teacher, policy):
    course = found["course"]
    _, data = _page(teacher, course)
    data["policy"] = policy
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    assert answer.context["adminform"].form.errors
    course.refresh_from_db()
    assert course.policy == OVERLAY


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", "nul\x00name"),
        ("allowance", str(2**64)),
        ("allowance", "-1"),
        ("allowance", "1e400"),
        ("allowance", "abc"),
        ("pool_limit", str(2**63)),
        ("allowance_period", "fortnight"),
        (OV + "chat_completions__max_tokens__max", str(2**64)),
        (OV + "chat_completions__max_tokens__max", "\x00"),
        (OV + "chat_completions__models", "\x00"),
        ("exam_does", "sometimes"),
    ],
)
def test_hostile_form_values_are_form_errors(found, teacher, field, value):
    course = found["course"]
    _, data = _page(teacher, course)
    data[field] = value
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    course.refresh_from_db()
    assert course.name == "Intro" and course.allowance == 1_000_000 and course.policy == OVERLAY


def test_a_lone_surrogate_on_the_wire_is_a_form_error(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    body = urlencode(data, doseq=True) + f"&{OV}chat_completions__models=%ED%A0%80"
    answer = teacher.post(
        url(Course, "change", course.pk), body, content_type="application/x-www-form-urlencoded"
    )
    assert answer.status_code == 200
    course.refresh_from_db()
    assert course.policy == OVERLAY


# --- the instructions ----------------------------------------------------------------------


def test_a_teacher_writes_the_instructions_and_the_panel_shows_the_request_as_sent(found, teacher):
    course = found["course"]
    response, data = _page(teacher, course)
    assert 'name="instructions"' in response.content.decode()
    data["instructions"] = "Ask questions.\nNever write the essay."
    answer = _post(teacher, course, data)
    assert answer.status_code == 302, _errors(answer)
    course.refresh_from_db()
    assert course.instructions == "Ask questions.\nNever write the essay."
    (event,) = _audit(AuditEvent.Action.COURSE_CHANGED)
    assert event.detail["after"] == {"instructions": course.instructions}

    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert result["outcome"] == "allowed"
    assert result["sent"]["messages"][0] == {"role": "system", "content": course.instructions}
    assert result["sent"]["messages"][1:] == json.loads("{" + CHAT + "}")["messages"]
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", "user": "bob", ' + CHAT + "}")
    assert result["outcome"] == "denied" and "sent" not in result


@pytest.mark.parametrize("value", ["nul\x00text", "x" * 4001])
def test_hostile_instructions_are_form_errors(found, teacher, value):
    course = found["course"]
    _, data = _page(teacher, course)
    data["instructions"] = value
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    assert "instructions" in answer.context["adminform"].form.errors
    course.refresh_from_db()
    assert course.instructions == ""


def test_a_lone_surrogate_in_the_instructions_is_no_500(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    data.pop("instructions", None)
    body = urlencode(data, doseq=True) + "&instructions=%ED%A0%80"
    answer = teacher.post(
        url(Course, "change", course.pk), body, content_type="application/x-www-form-urlencoded"
    )
    assert answer.status_code in (200, 302)
    course.refresh_from_db()
    assert is_storable_text(course.instructions)


# --- exam mode -----------------------------------------------------------------------------


def test_exam_mode_all_off_then_allow_only_one_model(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    data["exam_mode"] = "on"
    assert _post(teacher, course, data).status_code == 302
    course.refresh_from_db()
    assert course.exam_mode is True and course.exam_policy is None
    assert len(_audit(AuditEvent.Action.EXAM_MODE_CHANGED)) == 1
    assert not _audit(AuditEvent.Action.COURSE_CHANGED)  # the switch is its own row

    # The exam form's ceiling is the course's own policy: its two models, nothing else.
    response, data = _page(teacher, course)
    exam_form = response.context["adminform"].form.exam_form
    offered = sorted(v for v, _ in exam_form.fields["chat_completions__models"].choices)
    assert offered == ["gpt-4.1", "gpt-4o-mini"]
    data["exam_does"] = "only"
    data[EX + "chat_completions__enabled"] = "on"
    data[EX + "chat_completions__models"] = ["gpt-4.1"]
    answer = _post(teacher, course, data)
    assert answer.status_code == 302, _errors(answer)
    course.refresh_from_db()
    assert course.exam_policy == {
        "version": 1,
        "services": {"chat_completions": {"params": {"model": {"allowed": ["gpt-4.1"]}}}},
    }
    response, data = _page(teacher, course)
    assert data["exam_does"] == "only"
    assert response.context["beside"][0]["exam"].startswith("models: gpt-4.1;")
    assert response.context["beside"][1]["exam"] == "off"

    # Back to "all services off": the exam policy is emptied.
    data["exam_does"] = "off"
    assert _post(teacher, course, data).status_code == 302
    course.refresh_from_db()
    assert course.exam_policy is None and course.exam_mode is True


def test_an_exam_policy_wider_than_the_course_is_refused(found, teacher):
    course = found["course"]
    course.policy = {"version": 1, "services": {"chat_completions": {}}}
    course.save()
    _, data = _page(teacher, course)
    data["exam_does"] = "only"
    data[EX + "embeddings__enabled"] = "on"  # the course keeps no embeddings: not offered
    answer = _post(teacher, course, data)
    # Not offered, so not in the form: nothing is enabled by it.
    course.refresh_from_db()
    assert "embeddings" not in (course.exam_policy or {}).get("services", {})
    _, data = _page(teacher, course)
    data["exam_policy"] = '{"version": 1, "services": {"embeddings": {}}}'
    del data["exam_does"]  # the JSON view alone
    for name in [n for n in data if n.startswith(EX)]:
        del data[name]
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    assert "services.embeddings: not enabled by the license type" in answer.content.decode()


# --- windows -------------------------------------------------------------------------------


def _inline(data: dict, prefix: str, rows: list[dict]) -> dict:
    initial = int(data[f"{prefix}-INITIAL_FORMS"])
    for i, row in enumerate(rows, start=initial):
        for key, value in row.items():
            data[f"{prefix}-{i}-{key}"] = value
        data[f"{prefix}-{i}-course"] = ""
    data[f"{prefix}-TOTAL_FORMS"] = str(initial + len(rows))
    return data


W = "windows"


def test_a_window_is_entered_in_the_institutions_time_and_stored_as_the_instant(found, teacher):
    course = found["course"]
    _, data = _page(teacher, course)
    row = {
        "kind": "exam",
        "starts_at_0": "2026-07-01",
        "starts_at_1": "09:00:00",
        "ends_at_0": "2026-07-01",
        "ends_at_1": "11:00:00",
    }
    answer = _post(teacher, course, _inline(data, W, [row]))
    assert answer.status_code == 302, answer.context and answer.context["inline_admin_formsets"]
    window = CourseWindow.objects.get(course=course)
    # Berlin in July is UTC+2.
    assert window.starts_at == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)
    assert window.ends_at == datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
    assert window.kind == "exam"
    rows = _audit(AuditEvent.Action.COURSE_WINDOW_CHANGED)
    assert len(rows) == 1 and rows[0].detail["added"]["kind"] == "exam"
    # Shown again in Berlin time.
    _, data = _page(teacher, course)
    assert data[f"{W}-0-starts_at_1"] == "09:00:00"

    # Moved by an hour: removed and added (no update service), each audited once.
    data[f"{W}-0-ends_at_1"] = "12:00:00"
    assert _post(teacher, course, data).status_code == 302
    window = CourseWindow.objects.get(course=course)
    assert window.ends_at == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
    rows = _audit(AuditEvent.Action.COURSE_WINDOW_CHANGED)
    assert [("removed" in r.detail, "added" in r.detail) for r in rows[1:]] == [
        (True, False),
        (False, True),
    ]
    # Deleted.
    _, data = _page(teacher, course)
    data[f"{W}-0-DELETE"] = "on"
    assert _post(teacher, course, data).status_code == 302
    assert not CourseWindow.objects.filter(course=course).exists()
    assert len(_audit(AuditEvent.Action.COURSE_WINDOW_CHANGED)) == 4


@pytest.mark.parametrize(
    "start, end",
    [
        (("2026-03-29", "02:30:00"), ("2026-03-29", "04:00:00")),  # no 02:30 in Berlin that day
        (("2026-07-01", "11:00:00"), ("2026-07-01", "09:00:00")),  # ends before it starts
        (("99999-01-01", "00:00:00"), ("2026-07-01", "09:00:00")),
        (("2026-07-01\x00", "00:00:00"), ("2026-07-01", "09:00:00")),
        (("abc", "abc"), ("", "")),
    ],
)
def test_impossible_windows_are_form_errors(found, teacher, start, end):
    course = found["course"]
    _, data = _page(teacher, course)
    row = {
        "kind": "access",
        "starts_at_0": start[0],
        "starts_at_1": start[1],
        "ends_at_0": end[0],
        "ends_at_1": end[1],
    }
    answer = _post(teacher, course, _inline(data, W, [row]))
    assert answer.status_code == 200
    assert not CourseWindow.objects.filter(course=course).exists()
    assert not _audit(AuditEvent.Action.COURSE_WINDOW_CHANGED)


# --- members -------------------------------------------------------------------------------

M = "members"


def _members(found, n=2):
    course = found["course"]
    out = []
    for i in range(n):
        end_user = EndUser.objects.create(license=course.license, subject=f"s{i}")
        out.append(CourseMember.objects.create(course=course, end_user=end_user))
    return out


def test_a_teacher_pauses_and_tops_up_through_the_services(found, teacher):
    course = found["course"]
    first, _ = _members(found)
    _, data = _page(teacher, course)
    data[f"{M}-0-paused"] = "on"
    data[f"{M}-1-top_up"] = "0.50"  # EUR: 500,000 micro-credits
    data[f"{M}-1-top_up_window_start_0"] = "2026-03-09"
    data[f"{M}-1-top_up_window_start_1"] = "00:00:00"
    answer = _post(teacher, course, data)
    assert answer.status_code == 302, answer.context and answer.context["inline_admin_formsets"]
    first.refresh_from_db()
    assert first.paused is True
    second = CourseMember.objects.exclude(pk=first.pk).get(course=course)
    assert second.top_up == 500_000
    assert second.top_up_window_start == datetime(2026, 3, 8, 23, 0, tzinfo=UTC)  # Berlin
    rows = _audit(AuditEvent.Action.COURSE_MEMBER_CHANGED)
    assert len(rows) == 2
    assert rows[0].detail["after"] == {"paused": True}


def test_another_courses_member_id_in_the_formset_is_refused(found, teacher):
    course = found["course"]
    _members(found, 1)
    other = course_create(license=found["license"], name="Other", code="OTHER")
    stranger = EndUser.objects.create(license=course.license, subject="stranger")
    foreign = CourseMember.objects.create(course=other, end_user=stranger)
    _, data = _page(teacher, course)
    data[f"{M}-0-id"] = str(foreign.pk)
    data[f"{M}-0-paused"] = "on"
    answer = _post(teacher, course, data)
    assert answer.status_code == 200
    foreign.refresh_from_db()
    assert foreign.paused is False and foreign.course_id == other.pk
    for hostile in (str(2**64), "-1", "abc", "\x00"):
        data[f"{M}-0-id"] = hostile
        assert _post(teacher, course, data).status_code == 200, hostile
    assert not _audit(AuditEvent.Action.COURSE_MEMBER_CHANGED)


def test_an_admin_adding_a_student_of_another_license_gets_a_form_error(found, admin_client):
    course = found["course"]
    elsewhere = make_licensing("far")
    _, data = _page(admin_client, course)
    row = {"end_user": str(elsewhere["end_user"].pk), "top_up": "0"}
    answer = _post(admin_client, course, _inline(data, M, [row]))
    assert answer.status_code == 200
    # Not one of the course's candidates (the end users of its license): no such choice.
    assert "Select a valid choice" in answer.content.decode()
    assert not CourseMember.objects.filter(course=course).exists()
    # One of the license's own end users is added, audited once.
    _, data = _page(admin_client, course)
    row = {"end_user": str(found["end_user"].pk), "top_up": "0"}
    assert _post(admin_client, course, _inline(data, M, [row])).status_code == 302
    assert CourseMember.objects.filter(course=course).count() == 1
    assert len(_audit(AuditEvent.Action.COURSE_MEMBER_CHANGED)) == 1


def test_an_admin_removing_a_member_goes_through_the_service(found, admin_client):
    course = found["course"]
    _members(found, 1)
    _, data = _page(admin_client, course)
    data[f"{M}-0-DELETE"] = "on"
    assert _post(admin_client, course, data).status_code == 302
    assert not CourseMember.objects.filter(course=course).exists()
    rows = _audit(AuditEvent.Action.COURSE_MEMBER_CHANGED)
    assert len(rows) == 1 and rows[0].detail["removed"] is True


# --- teacher vs admin ----------------------------------------------------------------------


def test_what_a_teacher_may_change_and_what_stays_with_the_admins(found, teacher, admin_client):
    course = found["course"]
    response, _ = _page(teacher, course)
    form = response.context["adminform"].form
    assert {"name", "allowance", "allowance_period", "pool_limit", "policy", "exam_mode"} <= set(
        form.fields
    )
    assert not {"license", "code", "active", "institution", "lti_context_id"} & set(form.fields)
    assert not any(f.disabled for f in form.overlay_form.fields.values())
    response, _ = _page(admin_client, course)
    form = response.context["adminform"].form
    assert {"license", "code", "active"} <= set(form.fields)
    # Another teacher's course is a 404 on the page, the panel and the CSV.
    other = course_create(license=found["license"], name="Other", code="OTHER")
    assert teacher.get(url(Course, "change", other.pk)).status_code == 404
    try_url = reverse("admin:licensing_course_try", args=[other.pk])
    assert teacher.post(try_url, {"service": "chat_completions", "body": "{}"}).status_code == 404
    csv_url = reverse("admin:licensing_course_usage_csv", args=[other.pk])
    assert teacher.get(csv_url).status_code == 404


def test_an_admin_creates_a_course_through_the_service(found, admin_client):
    page = admin_client.get(url(Course, "add"))
    data = form_data(page)
    # EUR, the institution's (the license chosen decides; USD is the gateway's default).
    data.update(license=str(found["license"].pk), code="NEW1", name="New", allowance="0.00001")
    answer = admin_client.post(url(Course, "add"), data)
    assert answer.status_code == 302, answer.context and answer.context["adminform"].form.errors
    course = Course.objects.get(code="NEW1")
    assert course.institution_id == found["institution"].pk and course.allowance == 10
    assert len(_audit(AuditEvent.Action.COURSE_CREATED)) == 2  # the fixture's and this one
    # A duplicate code is a form error, on the add page and on a course's page.
    answer = admin_client.post(url(Course, "add"), data)
    assert answer.status_code == 200
    assert "has a course with this code already" in answer.content.decode()
    assert Course.objects.filter(code="NEW1").count() == 1
    _, change = _page(admin_client, course)
    change["code"] = "CS101"
    assert _post(admin_client, course, change).status_code == 200
    course.refresh_from_db()
    assert course.code == "NEW1"
    # A widening overlay on the add page is refused with the reason, not a 500.
    data.update(code="NEW2", policy='{"version": 1, "services": {"image_generation": {}}}')
    answer = admin_client.post(url(Course, "add"), data)
    assert answer.status_code == 200
    assert "services.image_generation: not enabled by the license type" in answer.content.decode()
    assert not Course.objects.filter(code="NEW2").exists()
    assert len(_audit(AuditEvent.Action.COURSE_CREATED)) == 2


# --- try a request -------------------------------------------------------------------------

CHAT = '"messages": [{"role": "user", "content": "hi"}]'


def _try(client, course, body, service="chat_completions"):
    answer = client.post(
        reverse("admin:licensing_course_try", args=[course.pk]), {"service": service, "body": body}
    )
    return answer.status_code, answer.json()


def test_try_a_request_is_judged_by_the_courses_rules_now(found, teacher):
    course = found["course"]
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert status == 200 and result["outcome"] == "allowed"
    assert result["decided_by"] == "the course's overlay on the license type's policy"
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", "user": "bob", ' + CHAT + "}")
    assert result["outcome"] == "denied"
    assert result["rule"].startswith("services.chat_completions.params.user:")
    status, result = _try(teacher, course, '{"input": "x", "model": "x"}', service="embeddings")
    assert result["outcome"] in ("allowed", "denied", "invalid")

    course.exam_mode = True
    course.save()
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert result["outcome"] == "denied" and result["status"] == 403
    assert result["body"]["error"]["message"] == "course 'CS101' is in exam mode"
    assert (
        result["rule"] == "course 'CS101': exam mode (the exam switch is on) with every service off"
    )

    course.exam_policy = {
        "version": 1,
        "services": {"chat_completions": {"params": {"model": {"allowed": ["gpt-4.1"]}}}},
    }
    course.save()
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert (
        result["outcome"] == "denied"
        and "'model' must be one of" in result["body"]["error"]["message"]
    )
    assert result["decided_by"] == "the exam policy (the exam switch is on)"
    status, result = _try(teacher, course, '{"model": "gpt-4.1", ' + CHAT + "}")
    assert result["outcome"] == "allowed"

    course.exam_mode = False
    course.save()
    now = clock.utcnow()
    CourseWindow.objects.create(
        course=course, starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=2)
    )
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert result["outcome"] == "denied"
    assert result["body"]["error"]["message"].startswith("course 'CS101' is closed until ")
    assert result["rule"] == "course 'CS101': outside every access window"


@pytest.mark.parametrize(
    "service, body, status",
    [
        ("nonsense", "{}", 400),
        ("chat_completions\x00", "{}", 400),
        ("chat_completions", "\x00", 200),
        ("chat_completions", '{"model": "\\ud800"}', 200),
        ("chat_completions", '{"max_tokens": 1e400}', 200),
        ("chat_completions", "[" * 10000, 200),
        ("chat_completions", "x" * 200_000, 200),
    ],
)
def test_try_a_request_with_hostile_input_never_fails(found, teacher, service, body, status):
    code, result = _try(teacher, found["course"], body, service=service)
    assert code == status
    assert result["outcome"] in ("invalid", "denied")


@pytest.mark.parametrize("object_id", [str(2**64), "-1", "abc", "%00", "1%00"])
def test_try_and_csv_on_impossible_ids_are_404(found, teacher, object_id):
    base = reverse("admin:licensing_course_changelist")
    answer = teacher.post(f"{base}{object_id}/try/", {"service": "chat_completions", "body": "{}"})
    assert answer.status_code == 404
    assert teacher.get(f"{base}{object_id}/usage.csv").status_code == 404
    assert teacher.get(f"{base}{object_id}/change/").status_code in (302, 404)


# --- per-student usage ---------------------------------------------------------------------


def _ledger(course, end_user, n, *, credits, model="gpt-4o-mini", outcome=Outcome.SUCCESS):
    return Transaction.objects.create(
        request_id=f"u{end_user.pk if end_user else 0}-{n}",
        license=course.license,
        end_user=end_user,
        course=course,
        service="chat",
        requested_model=model,
        provider="direct",
        status_code=200 if outcome == Outcome.SUCCESS else 403,
        credits=credits,
        outcome=outcome,
    )


def test_the_usage_table_and_its_csv_equal_the_ledger(found, teacher):
    course = found["course"]
    ada, bob = _members(found)
    ada.paused = True
    ada.save()
    for n in range(3):
        _ledger(course, ada.end_user, n, credits=250_000)
    _ledger(course, ada.end_user, 9, credits=0, outcome=Outcome.DENIED)
    _ledger(course, bob.end_user, 0, credits=1_500, model="gpt-4.1")
    period = course_window_start("week", clock.utcnow(), "Europe/Berlin")
    Wallet.objects.create(
        license=course.license,
        holder=f"course:{course.pk}:user:{ada.end_user_id}",
        period="week",
        window_start=period,
        unit="micro_credits",
        spent=750_000,
    )
    response, _ = _page(teacher, course)
    usage = response.context["usage"]
    by_student = {row["student"]: row for row in usage["rows"]}
    assert by_student["s0"]["requests"] == 3 and by_student["s0"]["refusals"] == 1
    assert by_student["s0"]["credits"] == "750,000" and by_student["s0"]["money"] == "0.75 EUR"
    assert by_student["s0"]["period_used"] == "750,000"
    assert by_student["s0"]["allowance"] == "1,000,000" and by_student["s0"]["paused"]
    assert by_student["s1"]["models"] == "gpt-4.1"
    ledger = Transaction.objects.filter(course=course).aggregate(n=Count("id"), c=Sum("credits"))
    assert usage["requests"] + usage["refusals"] == ledger["n"]
    assert usage["credits"] == f"{ledger['c']:,}"
    page = response.content.decode()
    assert "prompt" not in "".join(str(r) for r in usage["rows"])
    assert "0.75 EUR" in page

    answer = teacher.get(reverse("admin:licensing_course_usage_csv", args=[course.pk]))
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert [r["student"] for r in rows] == ["s0", "s1"]
    assert sum(int(r["credits"]) for r in rows) == ledger["c"]
    assert rows[0]["money (EUR)"] == "0.75" and rows[0]["paused"] == "yes"
    assert rows[0]["period used"] == "750000" and rows[0]["period allowance"] == "1000000"


def test_a_formula_like_student_name_is_quoted_in_the_csv(found, teacher):
    course = found["course"]
    end_user = EndUser.objects.create(license=course.license, subject="=HYPERLINK(1)")
    CourseMember.objects.create(course=course, end_user=end_user)
    answer = teacher.get(reverse("admin:licensing_course_usage_csv", args=[course.pk]))
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert rows[0]["student"] == "'=HYPERLINK(1)"


# --- the part pages ------------------------------------------------------------------------


def test_the_part_pages_change_and_delete_through_the_services(found, teacher):
    course = found["course"]
    (member,) = _members(found, 1)
    page = teacher.get(url(CourseMember, "change", member.pk))
    assert page.status_code == 200
    data = form_data(page)
    data["paused"] = "on"
    assert teacher.post(url(CourseMember, "change", member.pk), data).status_code == 302
    member.refresh_from_db()
    assert member.paused
    assert len(_audit(AuditEvent.Action.COURSE_MEMBER_CHANGED)) == 1
    window = CourseWindow.objects.create(
        course=course,
        starts_at=datetime(2026, 7, 1, 7, tzinfo=UTC),
        ends_at=datetime(2026, 7, 1, 9, tzinfo=UTC),
    )
    answer = teacher.post(url(CourseWindow, "delete", window.pk), {"post": "yes"})
    assert answer.status_code == 302
    assert not CourseWindow.objects.filter(pk=window.pk).exists()
    assert len(_audit(AuditEvent.Action.COURSE_WINDOW_CHANGED)) == 1
    assert teacher.get(url(CourseWindow, "add")).status_code == 403


@pytest.mark.parametrize("broken", [["not", "a", "policy"], {"services": []}, "text", 7])
def test_a_broken_stored_overlay_or_exam_policy_still_opens_the_page(found, teacher, broken):
    course = found["course"]
    # Written past the checks (an old row, a script): the page must still open and say why.
    Course.objects.filter(pk=course.pk).update(policy=broken, exam_policy=broken, exam_mode=True)
    response, _ = _page(teacher, course)
    assert response.context["beside"] == []
    status, result = _try(teacher, course, '{"model": "gpt-4o-mini", ' + CHAT + "}")
    assert status == 200 and result["outcome"] == "error" and result["status"] == 503
