"""The portal's course page in a real browser (Debian's chromium driven by Playwright), on a
server started the way the README starts it (`bash scripts/run.sh`) with a fake LMS on
127.0.0.1 (fake_upstreams/lti.py) registered by `manage.py configure_lti`, as
tests/lti/test_browser_lti.py does.

An instructor opens the tool (the course is made) and lands on the instructor view; a learner
launched from the LMS lands on the learner view, creates a course key (shown once), uses it with
the openai SDK and sees the usage and their allowance go down; the page fits a phone; the
instructor sees the student's usage, switches exam mode on, and the key's next request is the
spec's 403. Screenshots: var/screenshots/portal-course-*.png (docs/ holds copies)."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import openai
import pytest

from fake_upstreams.lti import INSTRUCTOR, LEARNER
from tests.browser import BROWSER_TEST, assert_accessible, browser_page, shot

pytestmark = BROWSER_TEST

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")
CONTEXT = {"id": "moodle-course-31", "label": "CHEM1", "title": "Chemistry 1"}
SET_INSTRUCTIONS = (
    "from licensing.courses.services import course_update; "
    "from licensing.models import Course; "
    "course_update(course=Course.objects.get(code='CHEM1'), changes={'instructions': "
    "'You tutor Chemistry 1. Ask one question at a time.\\nNever <b>answer</b> for them.'})"
)


@pytest.fixture(scope="module")
def lms(readme_lms):
    return readme_lms


@pytest.fixture(scope="module")
def server(lms_readme_server):
    """The session's README server with the LMS configured (tests/conftest.py,
    `lms_readme_server`: the school in Europe/Berlin, counting in euros), shared with
    tests/lti/test_browser_lti.py: this module's course and people are its own."""
    return lms_readme_server


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as page:
        yield page


def _open_tool(page, server, lms, sub: str, roles, **claims) -> None:
    """What the LMS does when the course's link is clicked: the login initiation."""
    page.context.clear_cookies()
    lms.launch_next(sub, roles=roles, context=CONTEXT, **claims)
    query = {
        "iss": lms.issuer,
        "login_hint": sub,
        "target_link_uri": server.url + "/lti/launch/",
        "client_id": "gw-moodle",
        "lti_deployment_id": "7",
    }
    page.goto(server.url + "/lti/login/?" + urlencode(query))
    page.wait_for_url("**/portal/courses/*/")


def test_the_course_page_for_a_learner_and_an_instructor(server, lms, page):
    # The instructor opens the tool first: the course is made, they land on its page.
    _open_tool(page, server, lms, "teacher-7", INSTRUCTOR, email="curie@demo-school.example")
    page.wait_for_selector("#student-usage")
    course_url = page.url
    assert "CHEM1" in page.inner_text("h1")
    assert "No windows" in page.inner_text("#content")

    # The teacher's instructions for the assistant (set here through the course service).
    server.manage("shell", "-c", SET_INSTRUCTIONS)

    # A learner launched from the LMS lands on the learner view, the instructions on it.
    _open_tool(page, server, lms, "pupil-7", LEARNER, email="ada@demo-school.example")
    assert page.url == course_url
    page.wait_for_selector("#allowance")
    instructions = page.inner_text("#course-instructions")
    assert "Ask one question at a time." in instructions and "<b>" in instructions
    assert_accessible(page, "a course page with the course's instructions")
    assert "500,000 of 500,000 micro-credits left" in page.inner_text("#allowance")
    assert page.inner_text("#course-state .portal-big") == "Open"
    assert "gpt-4o-mini" in page.inner_text("#models")

    # A course key, shown once.
    page.fill("#id_name", "lab")
    page.click("#key-form input[type=submit]")
    page.wait_for_selector("#new-key")
    key = page.inner_text("#new-key-value").strip()
    assert KEY_RE.fullmatch(key)
    assert f'base_url="{server.url}/v1"' in page.inner_text("#sdk-example")

    # Used with the openai SDK against the README's server (its simulator behind).
    sdk = openai.OpenAI(api_key=key, base_url=server.url + "/v1", max_retries=0, timeout=30)
    answer = sdk.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello from Chemistry 1"}]
    )
    assert answer.choices[0].message.content
    info = sdk.get("/license", cast_to=object)
    assert isinstance(info, dict)
    used = info["course"]["allowance"]["used"]
    assert info["course"]["code"] == "CHEM1" and used > 0

    # The page now shows the request and the allowance it spent.
    page.goto(course_url)
    page.wait_for_selector("#usage-by-model")
    assert key not in page.content()  # shown once only
    assert "gpt-4o-mini" in page.inner_text("#usage-by-model")
    assert f"{500_000 - used:,} of 500,000 micro-credits left" in page.inner_text("#allowance")
    assert "lab" in page.inner_text("#key-list")
    shot(page, "portal-course-learner")

    # On a phone: nothing wider than the screen but the tables' own scroll boxes.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(course_url)
    page.wait_for_selector("#allowance")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    shot(page, "portal-course-learner-phone")
    page.set_viewport_size({"width": 1440, "height": 900})

    # The instructor sees the student's usage and switches exam mode on.
    _open_tool(page, server, lms, "teacher-7", INSTRUCTOR, email="curie@demo-school.example")
    page.wait_for_selector("#student-usage")
    usage = page.inner_text("#student-usage")
    # Named as the LMS names them (the launch's `name` claim), not by a digest or an e-mail.
    assert "Person pupil-7" in usage and "gpt-4o-mini" in usage
    page.click("#exam-form input[type=submit]")
    page.wait_for_selector("#exam-form input[value='Switch exam mode off']")
    assert "On" in page.inner_text("#exam")
    assert page.inner_text("#course-state .portal-big") == "Exam mode"
    shot(page, "portal-course-instructor")

    # In force on /v1 at once: the spec's 403 for the student's key.
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "during the exam"}]
        )
    assert "course 'CHEM1' is in exam mode" in str(refused.value)

    # On a phone the instructor's page fits too.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(course_url)
    page.wait_for_selector("#student-usage")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    shot(page, "portal-course-instructor-phone")
    page.set_viewport_size({"width": 1440, "height": 900})
