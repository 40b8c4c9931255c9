"""The portal and the teacher's pages used with the keyboard only (Tab, Shift+Tab, Enter, Space;
no mouse, no `click`), in Debian's chromium on the session's README server: a student accepts
the terms, creates a key, copies it and revokes it; a teacher signs in, switches exam mode on
and off in the portal, and adds an exam window and switches exam mode on in the admin. At every
stop the focus is visible and on screen (tests/browser.py's `tab_to`), the skip link leads to
the main content, Tab and Shift+Tab go round each page and back (no trap), and each state the
actions reach passes axe-core's WCAG 2.1 A/AA rules (`assert_accessible`). What the actions did
is checked where it counts: on /v1 (a revoked key refused, exam mode refusing the course key)
and in the clipboard."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta

import httpx
import pytest

from tests.browser import BROWSER_TEST, assert_accessible, focused, shot, tab_round, tab_to

from .setup_school import School, make_school

pytestmark = BROWSER_TEST

SKIP_LINK = ".skip-to-content-link"


@pytest.fixture(scope="module")
def school(server) -> School:
    return make_school(server, "Keyboard school", "keys")


def _chat(server, key: str) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]},
        timeout=30,
    )


def _skip_to_content(page) -> None:
    """The first Tab reaches the skip link, shown; Enter on it moves the focus to the main
    content, so that the next Tab lands there, past the header and the navigation."""
    tab_to(page, SKIP_LINK, limit=1)
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    inside = page.evaluate(
        "() => document.getElementById('content-start').contains(document.activeElement)"
    )
    assert inside, f"after the skip link the focus is on {focused(page)}"


def _no_trap(page) -> None:
    """Tab and Shift+Tab go round the page back to where they started, through the same
    controls (the browser may stop on the page itself between the last and the first)."""
    forward = Counter(tab_round(page))
    backward = Counter(tab_round(page, backwards=True))
    forward.pop("(the page)", None)
    backward.pop("(the page)", None)
    assert forward == backward, (forward, backward)


def test_a_student_uses_the_portal_with_the_keyboard_only(server, school, page):
    page.context.add_cookies(
        [{"name": "sessionid", "value": school.sessions["student"], "url": server.url}]
    )
    page.goto(server.url + "/portal/")
    _skip_to_content(page)
    _no_trap(page)

    # The terms: the overview's link, the box ticked with Space, the button pressed with Enter.
    tab_to(page, "#content a[href$='/portal/terms/']")
    page.keyboard.press("Enter")
    page.wait_for_selector("#terms-text")
    tab_to(page, "input[name=accept]")
    page.keyboard.press("Space")
    assert page.is_checked("input[name=accept]")
    tab_to(page, "input[type=submit][value=Accept]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#key-form")
    assert_accessible(page, "the keys page, terms accepted")

    # A key: its name typed, the form sent with Enter; shown once.
    tab_to(page, "#id_name")
    page.keyboard.type("laptop")
    tab_to(page, "#key-form input[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#new-key")
    key = page.inner_text("#new-key-value").strip()
    assert _chat(server, key).status_code == 200
    assert_accessible(page, "a new key, shown once")
    shot(page, "a11y-keyboard-key-created")

    # Copied with the Copy button (Space), into the clipboard.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    tab_to(page, "#copy-key")
    page.keyboard.press("Space")
    page.wait_for_selector("#copy-state:has-text('Copied.')")
    assert page.evaluate("() => navigator.clipboard.readText()") == key
    _no_trap(page)

    # Revoked with Enter (the browser's own confirmation accepted), then refused on /v1.
    page.once("dialog", lambda dialog: dialog.accept())
    tab_to(page, "#key-list input[value=Revoke]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#key-list td:has-text('revoked')")
    assert _chat(server, key).status_code == 401
    assert_accessible(page, "the keys page, the key revoked")

    # The course page, round and back; then signed out with Enter.
    page.goto(server.url + f"/portal/courses/{school.course}/")
    _skip_to_content(page)
    _no_trap(page)
    tab_to(page, ".portal-nav button[type=submit]", backwards=True)  # Sign out
    page.keyboard.press("Enter")
    page.wait_for_url("**/portal/login/**")
    page.context.clear_cookies()


def _sign_in(page, server, school: School) -> None:
    """The admin's login form, typed: the name, Tab, the password, Enter."""
    page.goto(server.url + "/admin/login/")
    tab_to(page, "#id_username")
    page.keyboard.type(school.teacher)
    tab_to(page, "#id_password")
    page.keyboard.type(school.password)
    page.keyboard.press("Enter")
    page.wait_for_selector("#content-main")


def test_a_teacher_runs_the_course_with_the_keyboard_only(server, school, page):
    page.context.clear_cookies()
    _sign_in(page, server, school)
    assert _chat(server, school.course_key).status_code == 200

    # The portal's course page: exam mode on with Enter, refused at once on /v1, off with Space.
    page.goto(server.url + f"/portal/courses/{school.course}/")
    _skip_to_content(page)
    _no_trap(page)
    tab_to(page, "#exam-form input[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_selector("#exam-form input[value='Switch exam mode off']")
    refused = _chat(server, school.course_key)
    assert refused.status_code == 403 and "exam mode" in refused.json()["error"]["message"]
    assert_accessible(page, "the course page in exam mode")
    shot(page, "a11y-keyboard-exam-on")
    tab_to(page, "#exam-form input[type=submit]")
    page.keyboard.press("Space")
    page.wait_for_selector("#exam-form input[value='Switch exam mode on']")
    assert _chat(server, school.course_key).status_code == 200

    # The admin's course page: an exam window added (its kind chosen by typing, its dates
    # and times typed), exam mode ticked with Space, saved with Enter.
    page.goto(server.url + f"/admin/licensing/course/{school.course}/change/")
    _skip_to_content(page)
    tab_round(page)
    tab_to(page, "#windows-group .add-row a")
    page.keyboard.press("Enter")
    page.wait_for_selector("#id_windows-1-kind")
    assert_accessible(page, "the course page, a window row added")
    day = (date.today() + timedelta(days=40)).isoformat()
    tab_to(page, "#id_windows-1-kind", backwards=True)
    page.keyboard.type("Exam")
    for field, value in (("starts_at_0", day), ("starts_at_1", "06:00:00")) + (
        ("ends_at_0", day),
        ("ends_at_1", "12:00:00"),
    ):
        tab_to(page, f"#id_windows-1-{field}")
        page.keyboard.type(value)
    tab_to(page, "#id_exam_mode", backwards=True)
    page.keyboard.press("Space")
    tab_to(page, "input[name=_continue]")
    page.keyboard.press("Enter")
    page.wait_for_selector(".messagelist .success")
    assert page.input_value("#id_windows-1-kind") == "exam"
    assert page.input_value("#id_windows-1-starts_at_0") == day
    assert page.is_checked("#id_exam_mode")
    refused = _chat(server, school.course_key)
    assert refused.status_code == 403 and "exam mode" in refused.json()["error"]["message"]
    assert_accessible(page, "the course page, saved")
    shot(page, "a11y-keyboard-course-saved")


# The institution admin's pages of our own making (the review, the usage page, the live feed,
# the policy form) and Django's with an autocomplete (the license form): Tab goes round each,
# the focus visible at every stop.
ADMIN_PAGES = [
    "/admin/",
    "/admin/licensing/license/add/",
    "/admin/licensing/transaction/",
    "/admin/licensing/transaction/usage/",
    "/admin/licensing/transaction/live/",
    "/admin/licensing/licensetype/{license_type}/change/",
]


def test_the_admins_pages_go_round_with_the_focus_always_visible(server, school, page):
    page.context.clear_cookies()
    page.goto(server.url + "/admin/login/")
    page.fill("#id_username", school.admin)
    page.fill("#id_password", school.password)
    page.press("#id_password", "Enter")
    page.wait_for_selector("#content-main")
    for path in ADMIN_PAGES:
        page.goto(server.url + path.format(license_type=school.license_type))
        if focused(page) is None:  # an add form starts in its first field instead
            _skip_to_content(page)
        tab_round(page)
