"""Two schools for the safeguarding tests: School A (alerts on) with two courses, a student in
the first, each course's teacher, a safeguarding contact and an institution admin; School B
with a student, a teacher and a contact of its own. Students call /v1 with their course keys."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.access.credentials import api_key_create
from licensing.access.services import license_create
from licensing.models import (
    AdminProfile,
    ApiKey,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    SafeguardingSettings,
)
from licensing.safeguarding.rules import Verdict
from licensing.safeguarding.services import do_raise_alert

_serial = itertools.count(1)


def staff(institution, role: str, username: str, course: Course | None = None):
    user = get_user_model().objects.create_user(
        username, email=f"{username}@school.example", password="pw", is_staff=True
    )
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    if course is not None:
        CourseTeacher.objects.create(course=course, user=user)
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def school(name: str, prefix: str) -> dict:
    license = license_create(name=f"{prefix}-license", institution=name)
    institution = license.institution
    course = Course.objects.create(
        institution=institution, license=license, name=f"{prefix} course", code=f"{prefix}1"
    )
    other = Course.objects.create(
        institution=institution, license=license, name=f"{prefix} other", code=f"{prefix}2"
    )
    pupil = get_user_model().objects.create_user(f"{prefix}-pupil", first_name="Amira")
    student = EndUser.objects.create(license=license, user=pupil, subject=f"{prefix}-student")
    CourseMember.objects.create(course=course, end_user=student)
    row, key = api_key_create(license=license, end_user=student, name="course key")
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    return {
        "license": license,
        "institution": institution,
        "course": course,
        "other_course": other,
        "student": student,
        "pupil": pupil,
        "auth": {"Authorization": f"Bearer {key}"},
        "teacher": staff(institution, "teacher", f"{prefix}-teacher", course),
        "other_teacher": staff(institution, "teacher", f"{prefix}-teacher2", other),
        "contact": staff(institution, "safeguarding", f"{prefix}-contact"),
        "admin": staff(institution, "admin", f"{prefix}-admin"),
    }


def switch_on(institution, **fields) -> SafeguardingSettings:
    row, _ = SafeguardingSettings.objects.update_or_create(
        institution=institution, defaults={"enabled": True, **fields}
    )
    return row


def moderate(license, *, input=True, output=True) -> None:
    license.license_type.guardrails = {
        "input": {"moderation": input},
        "output": {"moderation": output},
    }
    license.license_type.save()


def _world() -> dict:
    a, b = school("School A", "a"), school("School B", "b")
    switch_on(a["institution"])
    switch_on(b["institution"])
    return {"a": a, "b": b}


@pytest.fixture
def world(db):
    """The two schools, alerts on in both (no live gateway)."""
    return _world()


@pytest.fixture
def committed_world(transactional_db):
    """The two schools, committed: what a thread of its own (the e-mail's) reads."""
    return _world()


@pytest.fixture
def live_world(catalog):
    """The two schools beside the live gateway and the fake upstreams, moderation on input and
    output of their (shared) license type."""
    found = _world()
    moderate(found["a"]["license"])
    return found


def raise_alert(found: dict, *, course=None, text="I want to hurt myself", direction="input"):
    """An alert as the pipeline raises it (the fake's self-harm verdict)."""
    verdict = Verdict(
        text=text,
        categories={"self-harm": True, "self-harm/intent": True},
        scores={"self-harm": 0.91, "self-harm/intent": 0.88, "violence": 0.0001},
    )
    return do_raise_alert(
        institution_id=found["institution"].pk,
        end_user_id=found["student"].pk,
        course_id=(course or found["course"]).pk,
        request_id=f"req-{next(_serial)}",
        direction=direction,
        verdicts=[verdict],
    )


def alert_url(alert) -> str:
    return f"/admin/licensing/safeguardingalert/{alert.pk}/change/"


LIST_URL = "/admin/licensing/safeguardingalert/"
