"""A teacher's admin: the courses they teach and nothing else. Walked URL by URL like the
institution scoping tests: another teacher's course in the same institution, another
institution's course, and every other licensing page are 404 or 403, nothing changes; their own
course opens and its allowed fields change, the fields that stay with the admins do not."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.access.scoping import ROLE_PERMISSIONS, TEACHER_PATHS
from licensing.models import AdminProfile, Course, CourseMember, CourseTeacher, CourseWindow

from ..console.test_admin import form_data, url
from .test_scoping import FIELD_OF, SCOPED_MODELS, _snapshot

# The admin's querysets, filters and search per institution: on CI's SQLite pass too.
pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

COURSE_FIELDS = {
    Course: "course",
    CourseWindow: "course_window",
    CourseMember: "course_member",
    CourseTeacher: "course_teacher",
}


def teacher_of(world, course: Course | None) -> tuple[Client, object]:
    user = get_user_model().objects.create_user("teacher-a", password="pw", is_staff=True)
    AdminProfile.objects.create(user=user, institution=world["a"]["institution"], role="teacher")
    if course is not None:
        CourseTeacher.objects.create(course=course, user=user)
    client = Client()
    client.force_login(user)
    return client, user


def another_course_of(found, code: str) -> dict:
    course = Course.objects.create(
        institution=found["institution"], license=found["license"], code=code, name=code
    )
    window = CourseWindow.objects.create(
        course=course,
        starts_at=found["course_window"].starts_at,
        ends_at=found["course_window"].ends_at,
    )
    return {"course": course, "course_window": window}


@pytest.mark.parametrize("model", list(COURSE_FIELDS), ids=lambda m: m.__name__)
@pytest.mark.parametrize("whose", ["other teacher", "other institution"])
def test_a_course_the_teacher_does_not_teach_is_404_everywhere(world, model, whose):
    client, _ = teacher_of(world, world["a"]["course"])
    if whose == "other teacher":
        other_course = another_course_of(world["a"], "OTHER")
        CourseMember.objects.create(course=other_course["course"], end_user=world["a"]["end_user"])
        other = {
            Course: other_course["course"],
            CourseWindow: other_course["course_window"],
            CourseMember: CourseMember.objects.get(course=other_course["course"]),
            CourseTeacher: world["a"]["course_teacher"],  # someone else's teaching row
        }[model]
        if model is CourseTeacher:
            other = CourseTeacher.objects.create(course=other_course["course"], user=other.user)
    else:
        other = world["b"][COURSE_FIELDS[model]]
    before = _snapshot(other)
    may = ROLE_PERMISSIONS["teacher"][model]
    if model is CourseMember:
        # A teacher adds and removes members through the API, not the admin (admin/courses.py).
        may = may - {"add", "delete"}

    listing = client.get(url(model, "changelist"))
    assert listing.status_code == 200
    assert other not in list(listing.context["cl"].result_list)
    for view in ("change", "delete", "history"):
        answer = client.get(url(model, view, other.pk))
        needed = {"change": "view", "delete": "delete", "history": "view"}[view]
        assert answer.status_code == (404 if needed in may else 403), view
    client.post(url(model, "change", other.pk), {"name": "stolen", "exam_mode": "on"})
    client.post(url(model, "delete", other.pk), {"post": "yes"})
    assert _snapshot(other) == before


@pytest.mark.parametrize("model", SCOPED_MODELS, ids=lambda m: m.__name__)
def test_no_other_licensing_page_opens_for_a_teacher(world, model):
    client, _ = teacher_of(world, world["a"]["course"])
    own = world["a"][FIELD_OF[model]]
    before = _snapshot(own)
    assert model not in TEACHER_PATHS
    assert client.get(url(model, "changelist")).status_code == 403
    assert client.get(url(model, "change", own.pk)).status_code == 403
    assert client.post(url(model, "change", own.pk), {"name": "x"}).status_code == 403
    assert _snapshot(own) == before


def test_a_teacher_without_courses_sees_an_empty_course_list(world):
    client, _ = teacher_of(world, None)
    listing = client.get(url(Course, "changelist"))
    assert listing.status_code == 200 and list(listing.context["cl"].result_list) == []


def test_the_teacher_changes_their_course_but_not_what_stays_with_the_admins(world):
    course = world["a"]["course"]
    client, _ = teacher_of(world, course)
    page = client.get(url(Course, "change", course.pk))
    assert page.status_code == 200
    data = form_data(page)
    data.update(
        name="Renamed by the teacher",
        allowance="0.25",  # 250,000 micro-credits at the default rate (USD)
        exam_mode="on",
        # The overlay is the teacher's to narrow (docs/teachers.md): all services off.
        policy='{"version": 1, "services": {}}',
        # Read-only for a teacher: ignored if forged into the post.
        code="HACKED",
        license=str(world["b"]["license"].pk),
        active="",
    )
    answer = client.post(url(Course, "change", course.pk), data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    course.refresh_from_db()
    assert course.name == "Renamed by the teacher"
    assert course.allowance == 250_000 and course.exam_mode is True
    assert course.code == "CS-a" and course.license_id == world["a"]["license"].pk
    assert course.active is True
    assert course.policy == {"version": 1, "services": {}}
    assert client.get(url(Course, "add")).status_code == 403


def test_a_widening_overlay_is_refused_on_save_with_the_reason(world, admin_client):
    course = world["a"]["course"]
    license_type = course.license.license_type
    license_type.policy = {"version": 1, "services": {"embeddings": {}}}
    license_type.save()
    page = admin_client.get(url(Course, "change", course.pk))
    data = form_data(page)
    data["policy"] = '{"services": {"image_generation": {}}}'
    answer = admin_client.post(url(Course, "change", course.pk), data)
    assert answer.status_code == 200  # the form again, with the reason
    body = answer.content.decode()
    assert "It may only narrow what it overlays" in body
    assert "services.image_generation: not enabled by the license type" in body
    course.refresh_from_db()
    assert course.policy == {}
    data["policy"] = '{"services": {"embeddings": {"params": {"dimensions": {"max": 256}}}}}'
    assert admin_client.post(url(Course, "change", course.pk), data).status_code == 302
    course.refresh_from_db()
    assert course.policy["services"]["embeddings"]["params"]["dimensions"]["max"] == 256
