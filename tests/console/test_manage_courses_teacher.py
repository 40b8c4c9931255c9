"""A teacher on the management API: the courses they teach and nothing else, walked URL by URL
and method by method like tests/access/test_teacher_scoping.py walks the admin, with a session
and with the teacher's own management token. Another teacher's course of the same institution
and another institution's course are 404 (403 where the role may not act at all), and nothing of
them changes; their own course answers every route a teacher may use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.access.tokens import management_token_rotate
from licensing.courses.services import course_key_create
from licensing.models import (
    AdminProfile,
    ApiKey,
    Course,
    CourseMember,
    CourseTeacher,
    CourseWindow,
    EndUser,
)

from .test_admin import make_licensing
from .test_manage_api import BASE

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)


@pytest.fixture
def world(db):
    found = {"a": make_licensing("a"), "b": make_licensing("b")}
    a = found["a"]
    # Course B: the same institution's, another teacher's (staff-a teaches CS-a and OTHER).
    other = Course.objects.create(
        institution=a["institution"], license=a["license"], code="OTHER", name="Other"
    )
    CourseTeacher.objects.create(course=other, user=a["course_teacher"].user)
    student = EndUser.objects.create(license=a["license"], subject="other-student")
    member = CourseMember.objects.create(course=other, end_user=student)
    window = CourseWindow.objects.create(course=other, starts_at=T0, ends_at=T0.replace(hour=9))
    course_key_create(course=other, end_user=student, via="test")
    found["other"] = {"course": other, "course_member": member, "course_window": window}
    b = found["b"]
    course_key_create(course=b["course"], end_user=b["end_user"], via="test")
    return found


def teacher(world):
    user = get_user_model().objects.create_user("prof", password="pw", is_staff=True)
    AdminProfile.objects.create(user=user, institution=world["a"]["institution"], role="teacher")
    CourseTeacher.objects.create(course=world["a"]["course"], user=user)
    return user


def client_of(user, how: str) -> Client:
    if how == "session":
        client = Client()
        client.force_login(user)
        return client
    return Client(headers={"Authorization": f"Token {management_token_rotate(user=user)}"})


def routes(course, window, member, student_id):
    """Every course route a teacher might call, with a body a teacher may send."""
    c = f"{BASE}/courses/{course.pk}"
    when = {"starts_at": "2026-12-01T08:00:00Z", "ends_at": "2026-12-01T10:00:00Z"}
    return [
        ("get", c, None),
        ("patch", c, {"name": "Taken over", "exam_mode": True}),
        ("delete", c, None),
        ("get", f"{c}/windows", None),
        ("post", f"{c}/windows", when),
        ("delete", f"{c}/windows/{window.pk}", None),
        ("get", f"{c}/members", None),
        ("post", f"{c}/members", {"student": "newcomer"}),
        ("put", f"{c}/members", {"students": []}),
        ("patch", f"{c}/members/{member.pk}", {"paused": True}),
        ("delete", f"{c}/members/{member.pk}", None),
        ("get", f"{c}/keys", None),
        ("post", f"{c}/keys", {"student": student_id, "name": "taken"}),
        ("get", f"{c}/usage", None),
        ("get", f"{c}/usage?format=csv", None),
    ]


def call(client, method, path, body):
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, content_type="application/json")


def snapshot(course: Course) -> tuple:
    return (
        tuple(Course.objects.filter(pk=course.pk).values_list("name", "exam_mode", "code")),
        tuple(CourseWindow.objects.filter(course=course).values_list("pk", "starts_at")),
        tuple(CourseMember.objects.filter(course=course).values_list("pk", "paused")),
        tuple(ApiKey.objects.filter(course=course).values_list("pk", "active")),
        EndUser.objects.count(),
    )


@pytest.mark.parametrize("how", ["session", "token"])
@pytest.mark.parametrize("whose", ["other teacher", "other institution"])
def test_a_course_the_teacher_does_not_teach_is_404_on_every_route(world, how, whose):
    client = client_of(teacher(world), how)
    found = world["other"] if whose == "other teacher" else world["b"]
    course = found["course"]
    student = CourseMember.objects.filter(course=course).first().end_user_id
    before = snapshot(course)
    for method, path, body in routes(
        course, found["course_window"], found["course_member"], student
    ):
        answer = call(client, method, path, body)
        # Deleting a course is no teacher's: refused before the course is looked up.
        expected = 403 if (method, path) == ("delete", f"{BASE}/courses/{course.pk}") else 404
        assert answer.status_code == expected, (method, path, answer.status_code)
    assert snapshot(course) == before
    listed = client.get(f"{BASE}/courses").json()["results"]
    assert [row["id"] for row in listed] == [world["a"]["course"].pk]
    assert client.get(f"{BASE}/courses", {"code": course.code}).json()["results"] == []


@pytest.mark.parametrize("how", ["session", "token"])
def test_another_courses_rows_through_the_teachers_own_course_are_404(world, how):
    client = client_of(teacher(world), how)
    own = world["a"]["course"]
    before = snapshot(world["other"]["course"])
    for found in (world["other"], world["b"]):
        c = f"{BASE}/courses/{own.pk}"
        assert client.delete(f"{c}/windows/{found['course_window'].pk}").status_code == 404
        member = found["course_member"]
        assert client.delete(f"{c}/members/{member.pk}").status_code == 404
        answer = client.patch(f"{c}/members/{member.pk}", {"paused": True}, "application/json")
        assert answer.status_code == 404
        key = client.post(f"{c}/keys", {"student": member.end_user_id}, "application/json")
        assert key.status_code == 400 and "student" in key.json()
        roster = client.put(f"{c}/members", {"students": [member.end_user_id]}, "application/json")
        assert roster.status_code == 400 if found is world["b"] else roster.status_code == 200
    assert snapshot(world["other"]["course"])[:4] == before[:4]


@pytest.mark.parametrize("how", ["session", "token"])
def test_the_teacher_runs_their_own_course(world, how):
    client = client_of(teacher(world), how)
    course = world["a"]["course"]
    student = world["a"]["end_user"].pk
    expected = {
        ("get", ""): 200,
        ("patch", ""): 200,
        ("delete", ""): 403,
        ("get", "/windows"): 200,
        ("post", "/windows"): 201,
        ("delete", "/windows/"): 204,
        ("get", "/members"): 200,
        ("post", "/members"): 201,
        ("put", "/members"): 200,
        ("patch", "/members/"): 200,
        ("delete", "/members/"): 404,  # the roster sync before removed that row (see below)
        ("get", "/keys"): 200,
        ("post", "/keys"): 201,
        ("get", "/usage"): 200,
        ("get", "/usage?format=csv"): 200,
    }
    member = world["a"]["course_member"]
    for method, path, body in routes(course, world["a"]["course_window"], member, student):
        answer = call(client, method, path, body)
        tail = path.removeprefix(f"{BASE}/courses/{course.pk}")
        tail = tail.rstrip("0123456789") if tail.startswith(("/windows/", "/members/")) else tail
        if (method, tail) == ("patch", "/members/"):
            # The roster sync removed the member: add them back, then pause them.
            client.post(path.rsplit("/", 1)[0], {"student": student}, "application/json")
            new = CourseMember.objects.get(course=course, end_user_id=student)
            answer = call(client, method, path.rsplit("/", 1)[0] + f"/{new.pk}", body)
        assert answer.status_code == expected[(method, tail)], (method, path, answer.content[:300])
    course.refresh_from_db()
    assert (course.name, course.exam_mode) == ("Taken over", True)
    assert CourseMember.objects.get(course=course, end_user_id=student).paused is True
    assert ApiKey.objects.get(course=course, name="taken").end_user_id == student
    assert not CourseWindow.objects.filter(pk=world["a"]["course_window"].pk).exists()
    assert Course.objects.filter(pk=course.pk).exists()


@pytest.mark.parametrize("how", ["session", "token"])
def test_the_teacher_cannot_change_what_stays_with_the_admins(world, how):
    client = client_of(teacher(world), how)
    course = world["a"]["course"]
    path = f"{BASE}/courses/{course.pk}"
    for body in (
        {"code": "HACKED"},
        {"license": world["b"]["license"].pk},
        {"active": False},
        {"name": "ok", "code": "HACKED"},
    ):
        answer = client.patch(path, body, content_type="application/json")
        assert answer.status_code == 400, answer.content
        for name in body:
            if name != "name":
                assert answer.json()[name] == ["This field cannot be changed here."]
    create = client.post(
        f"{BASE}/courses",
        {"name": "x", "code": "NEW", "license": course.license_id},
        content_type="application/json",
    )
    assert create.status_code == 403
    course.refresh_from_db()
    assert (course.code, course.active, course.name) == ("CS-a", True, "Course a")
    assert not Course.objects.filter(code="NEW").exists()
    for other in ("licenses", "keys", "end-users", "transactions", "audit", "connections"):
        assert client.get(f"{BASE}/{other}").status_code == 403, other
