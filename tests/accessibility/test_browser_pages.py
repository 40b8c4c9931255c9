"""Every page a person uses passes axe-core's WCAG 2.1 A and AA rules (tests/browser.py's
`assert_accessible`), in the admin's light and dark themes, in Debian's chromium on the session's
README server (`bash scripts/run.sh`), as the person who uses it sees it: a visitor (the sign-in
pages, refusals, the error pages), an institution admin (every list and form of every model the
admin's index offers them, found by following its links, and the pages of their own), a teacher
(their course in the admin and in the portal), a student (the portal, their course) and a
signed-in person with no access. The states a page only has after an action (a key shown once,
a tried request's verdict, exam mode switched on) are checked by the keyboard tests
(test_browser_keyboard.py) as they reach them.

A new page is one line in PAGES; a new model of the admin is found by the crawl. What is known
not to pass is listed in tests/browser.py (KNOWN_VIOLATIONS) and docs/accessibility.md."""

from __future__ import annotations

import httpx
import pytest

from tests.browser import BROWSER_TEST, accessibility_report, assert_accessible, shot

from .setup_school import School, make_school

pytestmark = BROWSER_TEST

# The people of this module's school (setup_school.py); a visitor is signed out.
VISITOR, ADMIN, TEACHER, STUDENT, OUTSIDER = "visitor", "admin", "teacher", "student", "outsider"

# Every page a person uses, as (who, path); `{course}` is the school's course. The admin's lists
# and forms are found by test_every_admin_page_of_an_institution_admin.
PAGES = [
    # Signing in, and being refused.
    (VISITOR, "/admin/login/"),  # the password form and the school's sign-in button
    (VISITOR, "/portal/login/"),  # the student portal's sign-in choices
    (VISITOR, "/sso/find/?email=someone%40nowhere.example"),  # refused: no such institution
    (VISITOR, "/sso/0/login/"),  # refused: no such identity provider
    (VISITOR, "{invitation}"),  # an invited colleague sets their password
    # The error pages.
    (VISITOR, "/no-such-page/"),  # 404
    (TEACHER, "/admin/licensing/license/"),  # 403: not a teacher's page
    (STUDENT, "/portal/courses/0/"),  # the portal's 404
    # The institution admin's own pages (besides the lists and forms).
    (ADMIN, "/admin/licensing/transaction/"),  # the review page, with the school's rows
    (ADMIN, "/admin/licensing/transaction/?since=yesterday"),  # ... with a filter's error
    (ADMIN, "/admin/licensing/transaction/usage/"),
    (ADMIN, "/admin/licensing/transaction/usage/?since=2026-13-01"),  # ... with an error
    (ADMIN, "/admin/licensing/transaction/live/"),
    (ADMIN, "/admin/licensing/auditevent/"),
    (ADMIN, "/admin/licensing/licensetype/policy-docs/"),  # the policy help, rendered
    (ADMIN, "/manage/v1/docs"),  # the management API's docs page
    (ADMIN, "/admin/my-token/"),
    (ADMIN, "/admin/password_change/"),
    (ADMIN, "/admin/licensing/enduser/{student}/erase/"),  # erasing a person: the confirmation
    (ADMIN, "/admin/licensing/institution/{institution}/privacy/"),  # the privacy pack
    # The teacher's pages: the course in the admin (windows, exam switch, per-student usage)
    # and in the portal.
    (TEACHER, "/admin/"),
    (TEACHER, "/admin/licensing/course/"),
    (TEACHER, "/admin/licensing/course/{course}/change/"),
    (TEACHER, "/portal/courses/{course}/"),
    (TEACHER, "/admin/licensing/safeguardingalert/"),  # their courses' safeguarding alerts
    # The student portal.
    (STUDENT, "/portal/"),
    (STUDENT, "/portal/keys/"),
    (STUDENT, "/portal/terms/"),
    (STUDENT, "/portal/data/"),
    (STUDENT, "/portal/courses/{course}/"),
    (OUTSIDER, "/portal/"),  # signed in, no student access
]


@pytest.fixture(scope="module")
def school(server) -> School:
    school = make_school(server, "Access school", "pages", then=RENDER_500)
    # Ledger rows for the review page, the live feed, the usage page and the course's
    # per-student usage: an answer and two refusals by the policy.
    tries = (("gpt-4o-mini", 100), ("gpt-4o-audio-preview", 100), ("gpt-4.1", 9000))
    for model, max_tokens in tries:
        answer = httpx.post(
            server.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {school.course_key}"},
            json={"model": model, "max_tokens": max_tokens,
                  "messages": [{"role": "user", "content": "Hello"}]},
            timeout=30,
        )  # fmt: skip
        assert answer.status_code in (200, 403), answer.text
    return school


@pytest.fixture(scope="module")
def people(server, school, page):
    """A page for each person, signed in once (staff with their password, the others with the
    session the SSO callback would leave)."""
    browser = page.context.browser
    pages = {}

    def person(who: str):
        if who not in pages:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            new = context.new_page()
            new.set_default_timeout(20_000)
            if who in (ADMIN, TEACHER):
                name = school.admin if who == ADMIN else school.teacher
                new.goto(server.url + "/admin/login/")
                new.fill("#id_username", name)
                new.fill("#id_password", school.password)
                new.click("input[type=submit]")
                new.wait_for_selector("#content-main")
            elif who in school.sessions:
                context.add_cookies(
                    [{"name": "sessionid", "value": school.sessions[who], "url": server.url}]
                )
            pages[who] = new
        return pages[who]

    yield person
    for each in pages.values():
        each.context.close()


# Pages drawn by a script after they load: checked once what they draw is there.
DRAWN = {"/manage/v1/docs": ".opblock-summary-method"}  # Swagger UI, from the OpenAPI document
# Pages whose screenshot docs/ shows (var/screenshots/<name>.png).
SHOTS = {
    "/admin/licensing/enduser/{student}/erase/": "admin-erase-person",
    "/admin/licensing/institution/{institution}/privacy/": "admin-privacy-pack",
    "/portal/data/": "portal-06-data",
}


def _page_id(entry) -> str:
    who, path = entry.values if hasattr(entry, "values") else entry
    return f"{who}:{path}"


# WCAG 1.4.10 (Reflow): 320 CSS pixels wide (a 1,280-pixel screen zoomed to 400 %).
NARROW = {"width": 320, "height": 640}
WIDE = {"width": 1440, "height": 900}


@pytest.mark.parametrize(("who", "path"), PAGES, ids=[_page_id(entry) for entry in PAGES])
def test_page(server, school, people, who, path):
    """The page passes axe (both themes) and, narrowed to 320 pixels as a zoom to 400 % narrows
    it, does not scroll sideways (WCAG 1.4.10); a wide table scrolls in a box of its own. The
    narrow check is on the page already loaded (as zooming does), not on a second load of it:
    each page was loaded twice, ~0.6 s a load on the 2-core machine (docs/testing.md)."""
    page = people(who)
    page.goto(server.url + school.path_of(path))
    if path in DRAWN:
        page.wait_for_selector(DRAWN[path])
    if path in SHOTS:
        shot(page, SHOTS[path])
    assert_accessible(page)
    page.set_viewport_size(NARROW)
    try:
        width = page.evaluate("document.documentElement.scrollWidth")
    finally:
        page.set_viewport_size(WIDE)
    assert width <= NARROW["width"], f"{who} {path} scrolls sideways at 320 px: {width} px wide"


def test_every_admin_page_of_an_institution_admin(server, school, people):
    """Every list the admin's index links to, its add form and its first row's change form, as
    the institution admin sees them: a model added to the admin is checked without a line here.
    Every page is visited before the test fails, and the failure lists them all."""
    page = people(ADMIN)
    page.goto(server.url + "/admin/")
    assert_accessible(page)
    links = page.eval_on_selector_all(
        "#content-main a[href^='/admin/']", "links => links.map(a => a.getAttribute('href'))"
    )
    lists = sorted({href for href in links if not href.endswith("/add/")})
    assert len(lists) >= 15, lists  # the school's models, the catalog's, the apps' pages
    reports, visited = [], []
    for href in sorted(set(links)):
        visited.append(href)
        page.goto(server.url + href)
        reports.append(accessibility_report(page))
        first = page.locator("#result_list tbody th a").first
        if not href.endswith("/add/") and first.count():
            visited.append(first.get_attribute("href"))
            page.goto(server.url + visited[-1])
            reports.append(accessibility_report(page))
    failed = [report for report in reports if report]
    assert not failed, f"{len(failed)} of {len(visited)} pages fail:\n\n" + "\n\n".join(failed)


def test_the_admin_after_an_action(server, school, people):
    """States a page reaches only after an action: a form refused with its errors, a delete to
    confirm, an object's history, and the verdicts of "try a request" on a license type."""
    page = people(ADMIN)
    page.goto(server.url + "/admin/licensing/license/add/")
    page.click("input[name=_save]")
    page.wait_for_selector(".errornote")
    assert_accessible(page, "the license form with its errors")

    page.goto(server.url + "/admin/licensing/apikey/")
    page.click("#result_list tbody th a")
    page.click("a.deletelink")
    page.wait_for_selector("input[type=submit]")
    assert_accessible(page, "a delete to confirm")
    page.goto(page.url.replace("/delete/", "/history/"))
    assert_accessible(page, "an object's history")

    page.goto(server.url + f"/admin/licensing/licensetype/{school.license_type}/change/")
    for body, verdict in (
        ('{"model": "gpt-4o-audio-preview", "messages": [{"role": "user", "content": "Hi"}]}',
         "Denied"),
        ('{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}', "Allowed"),
        ('{"model": ', "Not evaluated"),
    ):  # fmt: skip
        page.fill("#try-body", body)
        page.click("#try-submit")
        page.wait_for_selector(f"#try-result:has-text('{verdict}')")
        assert_accessible(page, f"a tried request: {verdict}")
    page.locator("#try-request").scroll_into_view_if_needed()
    shot(page, "a11y-try-request")


def test_the_server_error_page(server, school, page):
    """The 500 page as the server renders it (no request can make the gateway fail on purpose),
    shown at the server's address so that its style sheets load. Rendered by the school's setup
    process (RENDER_500), not a `manage.py` of its own (Django's start, ~3-8 s)."""
    page.goto(server.url + "/v1/health")
    page.set_content(school.printed.split("<<<PAGE>>>", 1)[1])
    assert_accessible(page, "the 500 page")
    shot(page, "a11y-500")


RENDER_500 = """
from django.test import RequestFactory
from django.views.defaults import server_error
print("<<<PAGE>>>" + server_error(RequestFactory().get("/")).content.decode())
"""
