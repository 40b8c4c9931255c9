"""The first run as the README starts it (`bash scripts/run.sh`, the session's README server),
with the development identity provider and the LMS simulator it starts, in a real browser
(Debian's chromium driven by Playwright): a student signs in through the identity provider's
page and reaches the portal, a teacher signs in and sees the demo course's page, an admin
reaches the admin, and launches from the LMS simulator land in the course. The people and the
course are fake_upstreams/demo.py's. Screenshots in var/screenshots/first-run-*.png."""

from __future__ import annotations

import re

import pytest

from fake_upstreams import demo
from tests.browser import BROWSER_TEST, assert_accessible, shot

pytestmark = BROWSER_TEST

STUDENT, OTHER_STUDENT, TEACHER, ADMIN = demo.PEOPLE
COURSE_TITLE = f"{demo.COURSE.title} ({demo.COURSE.code})"


@pytest.fixture(scope="module")
def guide(server) -> dict[str, str]:
    """The sign-in lines run.sh printed, by who they are for."""
    text = "".join(server.output)
    found = dict(
        re.findall(r"^  (As a student|As a teacher|As an admin|From the LMS):\s+(\S+)", text, re.M)
    )
    assert set(found) == {"As a student", "As a teacher", "As an admin", "From the LMS"}, text
    return found


def _fresh(page):
    page.context.clear_cookies()


def _sign_in_as(page, person: demo.DemoPerson, shot_name: str | None = None):
    """On the identity provider's page: it says what it is, lists the people; one is chosen."""
    page.wait_for_selector(".dev-banner")
    assert page.inner_text(".dev-banner") == demo.BANNER
    listed = page.inner_text("main table")
    for someone in demo.PEOPLE:
        assert someone.name in listed and someone.email in listed
    if shot_name:
        assert_accessible(page, "the development identity provider's sign-in page")
        shot(page, shot_name)
    page.click(f"button:has-text('Sign in as {person.name}')")


def test_run_sh_prints_how_to_sign_in_as_everyone(server, guide):
    text = "".join(server.output)
    assert "DEVELOPMENT tools" in text and "not for real use" in text
    assert guide["As a student"] == server.url + "/portal/"
    assert guide["As an admin"] == server.url + "/admin/"
    assert re.fullmatch(re.escape(server.url) + r"/portal/courses/\d+/", guide["As a teacher"])
    assert guide["From the LMS"] == server.lms_url + "/"
    assert f"Identity provider: {server.idp_url}/" in text


def test_a_student_signs_in_through_the_identity_providers_page(server, page, guide):
    _fresh(page)
    page.goto(guide["As a student"])
    page.click(f"a.button:has-text('Sign in with {demo.INSTITUTION}')")
    page.wait_for_url(server.idp_url + "/authorize?*")
    _sign_in_as(page, STUDENT, "first-run-01-identity-provider")
    page.wait_for_selector("#wallet")
    assert page.url == server.url + "/portal/"
    assert demo.STUDENT_LICENSE in page.inner_text("h1")
    shot(page, "first-run-02-student-portal")


def test_a_teacher_signs_in_and_sees_the_course_page(server, page, guide):
    _fresh(page)
    page.goto(guide["As a teacher"])
    page.click(f"a.button:has-text('Sign in with {demo.INSTITUTION}')")
    _sign_in_as(page, TEACHER)
    page.wait_for_selector("#student-usage")
    assert page.url == guide["As a teacher"]
    assert demo.COURSE.code in page.inner_text("h1")
    members = page.inner_text("#student-usage")
    assert STUDENT.name in members and OTHER_STUDENT.name in members
    shot(page, "first-run-03-teacher-course")


def test_an_admin_signs_in_to_the_admin(server, page, guide):
    _fresh(page)
    page.goto(guide["As an admin"])
    page.click(f"a.sso-button:has-text('Sign in with {demo.INSTITUTION}')")
    _sign_in_as(page, ADMIN)
    page.wait_for_url(server.url + "/admin/")
    page.wait_for_selector("#content-main")
    assert ADMIN.name.lower() in page.inner_text("#user-tools").lower()
    page.goto(server.url + "/admin/licensing/license/")
    licenses = page.inner_text("#result_list")
    assert demo.STUDENT_LICENSE in licenses and "demo" in licenses
    shot(page, "first-run-04-admin")


def test_launches_from_the_lms_simulator_land_in_the_course(server, page, guide):
    _fresh(page)
    page.goto(guide["From the LMS"])
    assert page.inner_text(".dev-banner") == demo.LMS_BANNER
    assert COURSE_TITLE in page.inner_text("main h2")
    assert_accessible(page, "the LMS simulator's launch page")
    shot(page, "first-run-05-lms")
    page.click(f"button:has-text('Launch as {STUDENT.name} (student)')")
    page.wait_for_url(server.url + "/portal/courses/*/")
    page.wait_for_selector("#allowance")
    assert demo.COURSE.code in page.inner_text("h1")
    shot(page, "first-run-06-lms-student-course")
    # The student is one person whichever way they came in: the same course, as a member.
    assert page.url == guide["As a teacher"]

    _fresh(page)
    page.goto(guide["From the LMS"])
    page.click(f"button:has-text('Launch as {TEACHER.name} (teacher)')")
    page.wait_for_url(guide["As a teacher"])
    page.wait_for_selector("#student-usage")
    shot(page, "first-run-07-lms-teacher-course")
