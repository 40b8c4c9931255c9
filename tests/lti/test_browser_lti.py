"""An LTI 1.3 launch in a real browser (Debian's chromium driven by Playwright): the server
started as the README starts it (`bash scripts/run.sh`), a fake LMS on 127.0.0.1
(fake_upstreams/lti.py) registered with `manage.py configure_lti`. The instructor opens the
tool first (the course is made), then a learner's launch: both land on the portal page of the
course (the instructor's view and the learner's); a forged launch shows the refusal page. The
whole course flow in a browser is tests/portal/test_browser_course.py. Screenshots in
var/screenshots/lti-*.png."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from fake_upstreams.lti import INSTRUCTOR, LEARNER
from tests.browser import BROWSER_TEST, assert_accessible, browser_page, shot

pytestmark = BROWSER_TEST


@pytest.fixture(scope="module")
def lms(readme_lms):
    return readme_lms


@pytest.fixture(scope="module")
def server(lms_readme_server, lms):
    """The session's README server with the LMS configured (tests/conftest.py,
    `lms_readme_server`), shared with tests/portal/test_browser_course.py: this module's course
    and people are its own."""
    public = lms_readme_server.url
    assert lms_readme_server.configured.splitlines() == [
        f"login_url: {public}/lti/login/",
        f"launch_url: {public}/lti/launch/",
    ]
    return lms_readme_server


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as page:
        yield page


def _open_tool(page, server, lms, login_hint: str) -> None:
    """What the LMS does when a course's link is clicked: the login initiation."""
    query = {
        "iss": lms.issuer,
        "login_hint": login_hint,
        "target_link_uri": server.url + "/lti/launch/",
        "client_id": "gw-moodle",
        "lti_deployment_id": "7",
    }
    page.goto(server.url + "/lti/login/?" + urlencode(query))


CONTEXT = {"id": "moodle-course-12", "label": "BIO2", "title": "Biology 2"}


def test_launches_land_on_the_course_page(server, lms, page):
    page.context.clear_cookies()
    lms.launch_next("teacher-9", roles=INSTRUCTOR, context=CONTEXT)
    _open_tool(page, server, lms, "teacher-9")
    page.wait_for_url("**/portal/courses/*/")
    page.wait_for_selector("#student-usage")
    assert "BIO2" in page.inner_text("h1")
    shot(page, "lti-01-instructor-landing")
    page.context.clear_cookies()
    lms.launch_next("pupil-3", roles=LEARNER, context=CONTEXT)
    _open_tool(page, server, lms, "pupil-3")
    page.wait_for_url("**/portal/courses/*/")
    page.wait_for_selector("#allowance")
    assert "BIO2" in page.inner_text("h1")
    shot(page, "lti-02-learner-course")


def test_a_forged_launch_is_refused(server, lms, page):
    page.context.clear_cookies()
    lms.failure = "wrong_key"
    try:
        lms.launch_next("pupil-3", roles=LEARNER, context=CONTEXT)
        with page.expect_response(lambda r: r.url.endswith("/lti/launch/")) as answer:
            _open_tool(page, server, lms, "pupil-3")
        assert answer.value.status == 403
        page.wait_for_selector(".sso-refused")
        text = page.inner_text("#content")
        assert "Launch refused" in text and "bad_signature" in text
        shot(page, "lti-03-refused")
        assert_accessible(page, "a refused launch")
        page.goto(server.url + "/portal/")
        assert "#wallet" not in page.content()
        assert page.locator("#wallet").count() == 0
    finally:
        lms.failure = None
