"""LTI 1.3 launches from a fake platform (docs/lti.md): instructor and learner, and every
refusal (a page, an audit row, never a session)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fake_upstreams.lti import CLAIM, INSTRUCTOR, LEARNER, LIS
from licensing.models import (
    AdminProfile,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    LtiIdentity,
    LtiLaunchState,
)
from licensing.signin import lti

from .conftest import at_platform, initiate, launch, login_params, query_of, refusals, signed_in

User = get_user_model()


def assert_refused(response, status: int, reason: str, client) -> None:
    assert response.status_code == status, response.content[:800]
    assert reason.encode() in response.content
    assert b"Launch refused" in response.content
    assert not signed_in(client)
    assert "sessionid" not in response.cookies
    assert refusals()[-1] == reason


# --- the login initiation -----------------------------------------------------------------------


def test_login_redirects_to_the_platform_with_state_and_nonce(world, browser):
    url = initiate(browser, world.fake)
    assert url.startswith(world.fake.auth_url + "?")
    query = query_of(url)
    row = LtiLaunchState.objects.get()
    assert query == {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": "gw-tool",
        "redirect_uri": "http://127.0.0.1:8000/lti/launch/",
        "login_hint": "hint-42",
        "lti_message_hint": "msg-7",
        "state": row.state,
        "nonce": row.nonce,
    }
    assert row.platform == world.platform and row.used_at is None
    # The GET form of the initiation works the same.
    response = browser.get("/lti/login/", login_params(world.fake))
    assert response.status_code == 302
    assert LtiLaunchState.objects.count() == 2
    assert not signed_in(browser)


@pytest.mark.parametrize(
    "override, status, reason",
    [
        ({"iss": "https://unknown.example"}, 403, "unknown_platform"),
        ({"client_id": "another-tool"}, 403, "unknown_platform"),
        ({"lti_deployment_id": "dep-9"}, 403, "unknown_deployment"),
        ({"login_hint": None}, 400, "invalid_login"),
        ({"iss": "https://x\x00.example"}, 400, "invalid_login"),
        ({"target_link_uri": "x" * 5000}, 400, "invalid_login"),
    ],
)
def test_login_refusals(world, browser, override, status, reason):
    response = browser.post("/lti/login/", login_params(world.fake, **override))
    assert_refused(response, status, reason, browser)
    assert not LtiLaunchState.objects.exists()


# --- instructor and learner -------------------------------------------------------------------


def test_instructor_launch_creates_the_course_and_the_teacher(world, browser):
    response = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    course = Course.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/portal/courses/{course.pk}/"
    assert (course.code, course.name, course.lti_context_id) == ("CS101", "Programming 1", "ctx-1")
    assert course.institution == world.institution and course.license == world.license
    assert (course.allowance, course.allowance_period) == (5_000_000, "week")
    identity = LtiIdentity.objects.get()
    user = identity.user
    assert (identity.platform, identity.subject, identity.name) == (
        world.platform,
        "teacher-1",
        "Person teacher-1",
    )
    assert user.is_staff and not user.is_superuser
    profile = AdminProfile.objects.get(user=user)
    assert (profile.institution, profile.role) == (world.institution, "teacher")
    assert list(CourseTeacher.objects.values_list("course", "user")) == [(course.pk, user.pk)]
    assert not EndUser.objects.filter(user=user).exists()
    assert int(browser.session["_auth_user_id"]) == user.pk
    event = AuditEvent.objects.get(action=AuditEvent.Action.SIGN_IN)
    assert event.actor == user and event.institution == world.institution
    assert event.detail == {
        "method": "lti",
        "platform": world.platform.pk,
        "course": course.pk,
        "role": "instructor",
        "course_created": True,
    }
    assert LtiLaunchState.objects.get().used_at is not None
    # Where the launch lands: the instructor's view of the course (a staff teacher without an
    # end user is let in there, and only there).
    page = browser.get(response["Location"])
    assert page.status_code == 200 and b'id="student-usage"' in page.content
    assert browser.get("/portal/").status_code == 403


def test_a_second_instructor_launch_reuses_the_course(world, browser):
    from django.test import Client

    launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    again = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    other = Client()
    second = launch(
        other,
        world.fake,
        "teacher-2",
        roles=[LIS + "institution/person#Instructor"],
        context={"id": "ctx-1", "label": "CS101-renamed", "title": "Other title"},
    )
    course = Course.objects.get()
    assert again["Location"] == second["Location"] == f"/portal/courses/{course.pk}/"
    assert (course.code, course.name) == ("CS101", "Programming 1")
    assert CourseTeacher.objects.filter(course=course).count() == 2
    assert LtiIdentity.objects.count() == 2
    created = [e.detail["course_created"] for e in AuditEvent.objects.filter(action="sign_in")]
    assert sorted(created) == [False, False, True]


def test_a_colliding_label_gets_a_unique_code(world, browser):
    Course.objects.create(institution=world.institution, license=world.license, code="CS101")
    launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    course = Course.objects.get(lti_context_id="ctx-1")
    assert course.code == "CS101-2"
    # The same label in another institution is no collision.
    assert Course.objects.filter(code="CS101").count() == 1


def test_learner_launch_joins_the_course_and_lands_on_the_portal(world, browser):
    from django.test import Client

    launch(Client(), world.fake, "teacher-1", roles=INSTRUCTOR)
    response = launch(browser, world.fake, "student-1", roles=LEARNER)
    course = Course.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/portal/courses/{course.pk}/"
    user = LtiIdentity.objects.get(subject="student-1").user
    assert not user.is_staff and not AdminProfile.objects.filter(user=user).exists()
    # The LMS's name for the person: what teachers' usage tables show (not the digest username).
    assert user.get_full_name() == "Person student-1"
    end_user = EndUser.objects.get(user=user)
    assert (end_user.license, end_user.subject, end_user.issuer, end_user.active) == (
        world.license,
        "student-1",
        None,
        True,
    )
    assert CourseMember.objects.get().end_user == end_user
    assert CourseMember.objects.get().course == course
    assert int(browser.session["_auth_user_id"]) == user.pk
    portal = browser.get("/portal/")
    assert portal.status_code == 200
    assert b"Alpha School" in portal.content
    # Where the launch lands: the learner's view of the course.
    page = browser.get(response["Location"])
    assert page.status_code == 200
    assert b'id="allowance"' in page.content and b'id="key-form"' in page.content
    assert f"/portal/courses/{course.pk}/".encode() in portal.content  # listed on the overview
    # A second launch of the same learner changes nothing.
    launch(browser, world.fake, "student-1", roles=["Learner"])
    assert EndUser.objects.filter(user=user).count() == 1
    assert CourseMember.objects.count() == 1


def test_an_admin_launching_as_instructor_keeps_the_admin_role(world, browser):
    admin = User.objects.create_user("head", is_staff=True)
    AdminProfile.objects.create(user=admin, institution=world.institution, role="admin")
    LtiIdentity.objects.create(platform=world.platform, subject="head-1", user=admin)
    launch(browser, world.fake, "head-1", roles=INSTRUCTOR)
    assert AdminProfile.objects.get(user=admin).role == "admin"
    assert CourseTeacher.objects.get().user == admin


def test_launch_with_a_csrf_enforcing_browser_needs_no_token(world, browser):
    # The LMS posts cross-site: the view is CSRF-exempt (its state and signature protect it).
    response = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    assert response.status_code == 302


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure, status, reason",
    [
        ("wrong_key", 403, "bad_signature"),
        ("expired", 403, "expired"),
        ("wrong_aud", 403, "wrong_audience"),
        ("unknown_deployment", 403, "unknown_deployment"),
    ],
)
def test_platform_failures_are_refused(world, browser, failure, status, reason):
    world.fake.failure = failure
    response = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    assert_refused(response, status, reason, browser)
    assert not Course.objects.exists() and not LtiIdentity.objects.exists()
    assert not User.objects.exists()
    event = AuditEvent.objects.get(action=AuditEvent.Action.SIGN_IN_REFUSED)
    assert event.institution == world.institution
    assert event.target == f"lti_platform:{world.platform.pk}"


def test_es256_tokens_are_accepted(world, browser):
    world.fake.alg = "ES256"
    response = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    assert response.status_code == 302 and signed_in(browser)


def test_a_replayed_nonce_is_refused(world, browser):
    from django.test import Client

    launch(Client(), world.fake, "teacher-1", roles=INSTRUCTOR)
    world.fake.failure = "replayed_nonce"
    response = launch(browser, world.fake, "teacher-1", roles=INSTRUCTOR)
    assert_refused(response, 403, "nonce_replayed", browser)


def test_a_replayed_launch_is_refused(world, browser):
    from django.test import Client

    world.fake.launch_next("teacher-1", roles=INSTRUCTOR)
    path, fields = at_platform(initiate(browser, world.fake))
    assert Client().post(path, fields).status_code == 302
    response = browser.post(path, fields)
    assert_refused(response, 400, "state_reused", browser)


def test_a_token_with_another_launch_state_is_refused(world, browser):
    world.fake.launch_next("teacher-1", roles=INSTRUCTOR)
    _, first = at_platform(initiate(browser, world.fake))
    initiate(browser, world.fake)  # a second login: a second state
    other = LtiLaunchState.objects.order_by("-id").first()
    response = browser.post("/lti/launch/", {"id_token": first["id_token"], "state": other.state})
    assert_refused(response, 403, "wrong_nonce", browser)


@pytest.mark.parametrize(
    "state, reason",
    [("made-up", "state_mismatch"), ("", "no_state"), ("a\x00b", "state_mismatch")],
)
def test_an_unknown_state_is_refused(world, browser, state, reason):
    world.fake.launch_next("teacher-1", roles=INSTRUCTOR)
    _, fields = at_platform(initiate(browser, world.fake))
    response = browser.post("/lti/launch/", {"id_token": fields["id_token"], "state": state})
    assert_refused(response, 400, reason, browser)


def test_a_launch_after_ten_minutes_is_refused(world, browser, monkeypatch):
    world.fake.launch_next("teacher-1", roles=INSTRUCTOR)
    path, fields = at_platform(initiate(browser, world.fake))
    now = lti.clock()
    monkeypatch.setattr(lti, "clock", lambda: now + 601)
    response = browser.post(path, fields)
    assert_refused(response, 400, "launch_expired", browser)


def test_an_inactive_platform_is_refused(world, browser):
    world.fake.launch_next("teacher-1", roles=INSTRUCTOR)
    path, fields = at_platform(initiate(browser, world.fake))
    world.platform.active = False
    world.platform.save()
    response = browser.post(path, fields)
    assert_refused(response, 403, "unknown_platform", browser)
    assert_refused(
        browser.post("/lti/login/", login_params(world.fake)), 403, "unknown_platform", browser
    )


def test_a_learner_before_any_instructor_is_refused(world, browser):
    response = launch(browser, world.fake, "student-1", roles=LEARNER)
    assert_refused(response, 403, "course_not_open", browser)
    event = AuditEvent.objects.get(action=AuditEvent.Action.SIGN_IN_REFUSED)
    assert event.actor_name == "student-1" and event.actor is None
    assert b"Your teacher has not opened this course" in response.content
    assert not User.objects.exists() and not EndUser.objects.exists()


def test_a_launch_without_a_known_role_is_refused(world, browser):
    response = launch(browser, world.fake, "x-1", roles=[LIS + "institution/person#Administrator"])
    assert_refused(response, 403, "no_lti_role", browser)


def test_a_superuser_identity_is_refused(world, browser):
    root = User.objects.create_superuser("root", password="pw")
    LtiIdentity.objects.create(platform=world.platform, subject="root-1", user=root)
    response = launch(browser, world.fake, "root-1", roles=INSTRUCTOR)
    assert_refused(response, 403, "superuser_launch", browser)


def test_a_user_of_another_institution_is_refused(world, browser):
    user = User.objects.create_user("beta-admin", is_staff=True)
    AdminProfile.objects.create(user=user, institution=world.other, role="admin")
    LtiIdentity.objects.create(platform=world.platform, subject="b-1", user=user)
    response = launch(browser, world.fake, "b-1", roles=INSTRUCTOR)
    assert_refused(response, 403, "role_in_other_institution", browser)
    assert not Course.objects.exists()


@pytest.mark.parametrize(
    "claims",
    [
        {"context": {"id": "ctx-1", "label": "CS\x00101", "title": "T"}},
        {"context": {"id": "ctx-\ud800", "label": "CS101", "title": "T"}},
        {"context": {"id": "ctx-1", "label": "L" * 10_000, "title": "T"}},
        {"context": {"id": 17, "label": "CS101", "title": "T"}},
        {"context": {"id": "ctx-1", "label": ["CS101"], "title": "T"}},
        {"context": "ctx-1"},
        {"roles": "Instructor"},
        {"roles": [INSTRUCTOR[0], 5]},
        {"sub": "a\x00b"},
        {"sub": "\udfff"},
        {"sub": 12},
        {"nonce": 5},
        {"nonce": "\ud800"},
        {"nonce": "n\x00"},
        {"exp": "tomorrow"},
        {CLAIM + "message_type": "LtiDeepLinkingRequest"},
        {CLAIM + "version": "1.1"},
        {CLAIM + "deployment_id": ["dep-1"]},
        {"iss": "https://elsewhere.example"},
    ],
)
def test_hostile_claims_are_refused(world, browser, claims):
    extra = dict(claims)
    roles = extra.pop("roles", INSTRUCTOR)
    context = extra.pop("context", None)
    response = launch(browser, world.fake, "t-1", roles=roles, context=context, **extra)
    assert response.status_code in (400, 403), response.content[:800]
    assert b"Launch refused" in response.content
    assert not signed_in(browser) and "sessionid" not in response.cookies
    assert len(refusals()) == 1
    assert not Course.objects.exists() and not User.objects.exists()


@pytest.mark.parametrize(
    "token",
    ["", "garbage", "a.b.c", "x" * 40_000, "e30.e30.", "eyJhbGciOiJub25lIn0.e30."],
)
def test_hostile_tokens_are_refused(world, browser, token):
    initiate(browser, world.fake)
    state = LtiLaunchState.objects.get().state
    response = browser.post("/lti/launch/", {"id_token": token, "state": state})
    assert response.status_code in (400, 403), response.content[:800]
    assert not signed_in(browser)
    assert len(refusals()) == 1


def test_undecodable_bytes_are_no_500(world, browser):
    # A lone surrogate cannot travel in a form: its UTF-8 bytes are invalid and arrive replaced.
    body = b"id_token=%ED%A0%80.a.b&state=%ED%A0%80%00"
    response = browser.post("/lti/launch/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    query = "iss=%ED%A0%80&login_hint=%FF&target_link_uri=%00"
    assert browser.get("/lti/login/?" + query).status_code == 400
    assert not signed_in(browser)


def test_the_launch_answers_post_only(world, browser):
    assert browser.get("/lti/launch/").status_code == 405
    assert browser.put("/lti/login/").status_code == 405


def test_a_student_synced_by_the_roster_is_the_same_end_user_at_their_first_launch(world, browser):
    """REST roster sync names students by the LMS's user id; their first launch (the same
    `sub`) takes that end user, with its membership, rather than making a second one."""
    from django.test import Client

    from licensing.courses.services import course_roster_sync

    launch(Client(), world.fake, "teacher-1", roles=INSTRUCTOR)
    course = Course.objects.get()
    course_roster_sync(course=course, students=["student-9"], actor_name="sync")
    synced = EndUser.objects.get(subject="student-9")
    assert synced.user is None

    response = launch(browser, world.fake, "student-9", roles=LEARNER)
    assert response.status_code == 302
    user = LtiIdentity.objects.get(subject="student-9").user
    synced.refresh_from_db()
    assert synced.user == user and synced.active
    assert EndUser.objects.filter(subject="student-9").count() == 1
    assert list(CourseMember.objects.values_list("end_user", flat=True)) == [synced.pk]
