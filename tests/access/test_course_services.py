"""licensing.courses.services: every course change validated, saved and audited once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from licensing.access.scoping import TEACHER, Scope
from licensing.access.services import license_create
from licensing.courses.services import (
    course_create,
    course_delete,
    course_key_create,
    course_member_add,
    course_member_remove,
    course_member_update,
    course_update,
    course_window_add,
    course_window_remove,
)
from licensing.models import ApiKey, AuditEvent, Course, CourseWindow, EndUser

T0 = datetime(2026, 3, 10, 8, tzinfo=UTC)
T1 = datetime(2026, 3, 10, 10, tzinfo=UTC)


@pytest.fixture
def lic(db):
    lic = license_create(name="lic", institution="Inst", limit=None, period="monthly")
    lic.license_type.policy = {"version": 1, "services": {"embeddings": {}}}
    lic.license_type.save()
    return lic


def actions():
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def test_create_update_delete_each_audited_and_exam_mode_apart(lic):
    course = course_create(license=lic, name="Intro", code="CS101", allowance=10, actor_name="op")
    assert course.institution_id == lic.institution_id
    course_update(course=course, changes={"exam_mode": True, "allowance": 20}, actor_name="op")
    course.refresh_from_db()
    assert course.exam_mode and course.allowance == 20
    course_update(course=course, changes={"allowance": 20}, actor_name="op")  # nothing changed
    course_delete(course=course, actor_name="op")
    assert not Course.objects.exists()
    assert actions() == ["course_created", "exam_mode_changed", "course_changed", "course_deleted"]
    changed = AuditEvent.objects.get(action="course_changed")
    assert changed.detail["before"] == {"allowance": 10}
    assert changed.detail["after"]["allowance"] == 20


def test_refusals_name_the_field_and_change_nothing(lic):
    course = course_create(license=lic, name="Intro", code="CS101")
    with pytest.raises(ValidationError) as exc:
        course_create(license=lic, name="Again", code="CS101")
    assert "__all__" in exc.value.message_dict or "code" in exc.value.message_dict
    with pytest.raises(ValidationError) as exc:
        course_update(course=course, changes={"policy": {"services": {"image_generation": {}}}})
    assert "policy" in exc.value.message_dict
    assert "image_generation" in " ".join(exc.value.message_dict["policy"])
    teacher = Scope(superuser=False, institution_id=lic.institution_id, role=TEACHER, user_id=1)
    with pytest.raises(ValidationError) as exc:
        course_update(course=course, changes={"code": "X", "allowance": 5}, scope=teacher)
    assert list(exc.value.message_dict) == ["code"]
    with pytest.raises(ValidationError):
        course_update(course=course, changes={"allowance": -1})
    course.refresh_from_db()
    assert (course.code, course.allowance, course.policy) == ("CS101", None, {})
    assert actions() == ["course_created"]


def test_windows_members_and_keys(lic):
    course = course_create(license=lic, name="Intro", code="CS101")
    with pytest.raises(ValidationError) as exc:
        course_window_add(course=course, starts_at=T1, ends_at=T0)
    assert "ends_at" in exc.value.message_dict
    window = course_window_add(course=course, starts_at=T0, ends_at=T1, kind="exam")
    assert CourseWindow.objects.get().kind == "exam"
    course_window_remove(window=window)
    assert not CourseWindow.objects.exists()

    student = EndUser.objects.create(license=lic, subject="s1")
    with pytest.raises(ValidationError):
        course_key_create(course=course, end_user=student, via="test")
    member, created = course_member_add(course=course, end_user=student)
    assert created and not course_member_add(course=course, end_user=student)[1]
    row, key = course_key_create(course=course, end_user=student, name="k", via="test")
    assert (row.course_id, row.end_user_id, row.license_id) == (course.pk, student.pk, lic.pk)
    assert key.startswith("sk-") and key not in str(ApiKey.objects.values())
    course_member_update(member=member, changes={"paused": True, "top_up": 5})
    with pytest.raises(ValidationError):
        course_member_update(member=member, changes={"course": None})
    assert course_member_remove(member=member) == 1
    assert not ApiKey.objects.get(pk=row.pk).active

    other = license_create(name="other", institution="Inst", limit=None)
    stranger = EndUser.objects.create(license=other, subject="s2")
    with pytest.raises(ValidationError):
        course_member_add(course=course, end_user=stranger)
    assert actions() == [
        "course_created",
        "course_window_changed",
        "course_window_changed",
        "course_member_changed",
        "api_key_created",
        "course_member_changed",
        "api_key_revoked",
        "course_member_changed",
    ]
