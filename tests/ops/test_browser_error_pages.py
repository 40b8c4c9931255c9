"""The error pages in a real browser (Debian's chromium driven by Playwright), DEBUG off as in
production: 404, 403 and the expired form on the server started the way the README starts it
(`bash scripts/run.sh`, shared by the session's browser modules; this module acts in schools of
its own), each styled like the site and its links working; the 500, a view that raises and the
database down, on the suite's in-process gateway, the only server a fault can be put into.
Screenshots land in var/screenshots/errors-*.png (git-ignored)."""

from __future__ import annotations

import re

import httpx
import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

from tests.browser import BROWSER_TEST, browser_page, login, shot
from tests.live_helpers import session_cookie

from .test_error_pages import boom, database_down

pytestmark = BROWSER_TEST

SCHOOL, ELSEWHERE = "Errors school", "Errors elsewhere"
ADMIN = ("erin", "an-admin-password-1")
REVIEWER = ("rex", "a-reviewer-password-1")
LICENSE_ID = "from licensing.models import License; print('ID', License.objects.get(name='{}').pk)"


@pytest.fixture(scope="module")
def other_license(server) -> int:
    *_, printed = server.manage_many(
        ("create_license", "errors-class", "--institution", SCHOOL),
        ("create_license", "errors-other", "--institution", ELSEWHERE),
        (
            ("create_institution_admin", SCHOOL, ADMIN[0], "--role", "admin", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": ADMIN[1]},
        ),
        (
            ("create_institution_admin", SCHOOL, REVIEWER[0], "--role", "reviewer", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": REVIEWER[1]},
        ),
        ("shell", "-c", LICENSE_ID.format("errors-other")),
    )
    return int(re.search(r"ID (\d+)", printed).group(1))


def fresh(page):
    """A new browser context (no cookies) on the same browser."""
    new = page.context.browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    new.set_default_timeout(20_000)
    return new


def assert_error_page(page, heading: str, status: int) -> str:
    assert page.inner_text("h1") == heading
    assert page.eval_on_selector("#header", "e => getComputedStyle(e).display") == "flex"
    text = page.inner_text("#content")
    assert f"Error {status}" in text and "What you can do" in text
    return text


def test_404_403_and_the_expired_form(server, page, other_license):
    response = page.goto(server.url + "/no/such/page/")
    assert response.status == 404
    assert "ask your institution's admin" in assert_error_page(page, "Page not found", 404)
    shot(page, "errors-01-404")
    page.click("#error-start")  # the start page: the admin's, which asks to sign in
    page.wait_for_selector("#id_username")

    response = page.goto(server.url + "/portal/no-such-page/")
    assert response.status == 404
    assert_error_page(page, "Page not found", 404)
    assert "Student portal" in page.inner_text("#site-name")
    shot(page, "errors-02-404-portal")

    # An institution admin opens a license of another school: the same 404, nothing of it shown.
    login(page, server, *ADMIN)
    response = page.goto(f"{server.url}/admin/licensing/license/{other_license}/change/")
    assert response.status == 404
    text = assert_error_page(page, "Page not found", 404)
    assert "another institution" in text and "errors-other" not in page.content()
    shot(page, "errors-03-404-other-institution")
    page.click("#error-start")
    page.wait_for_selector("#content-main")
    assert page.url == server.url + "/admin/"

    # A reviewer opens a page their role does not include.
    reviewer = fresh(page)
    login(reviewer, server, *REVIEWER)
    response = reviewer.goto(server.url + "/admin/licensing/apikey/add/")
    assert response.status == 403
    text = assert_error_page(reviewer, "You cannot open this page", 403)
    assert "ask your institution's admin" in text
    shot(reviewer, "errors-04-403")
    reviewer.click("#error-sign-out")  # to come back with another account
    reviewer.wait_for_load_state()
    reviewer.goto(server.url + "/admin/login/")
    reviewer.wait_for_selector("#id_username")  # signed out: the form, not the admin
    reviewer.close()

    # A form whose CSRF cookie is gone (another tab signed out, cookies cleared): say what to do.
    stale = fresh(page)
    stale.goto(server.url + "/admin/login/")
    stale.context.clear_cookies()
    stale.fill("#id_username", ADMIN[0])
    stale.fill("#id_password", ADMIN[1])
    with stale.expect_response(lambda r: r.request.method == "POST") as posted:
        stale.click("input[type=submit]")
    assert posted.value.status == 403
    text = assert_error_page(stale, "The form has expired", 403)
    assert "reload the page" in text and "CSRF" not in text
    shot(stale, "errors-05-csrf")
    stale.close()


@pytest.mark.django_db(transaction=True)
def test_500_a_view_that_raises_and_the_database_down(gateway, monkeypatch):
    root = get_user_model().objects.create_superuser("root", password="pw")
    cookie = session_cookie(root).split("=", 1)
    with browser_page(1280, 800) as page:
        page.context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": gateway.url}])
        with monkeypatch.context() as patch:
            patch.setattr(admin.site.__class__, "get_app_list", boom)
            response = page.goto(gateway.url + "/admin/")
        assert response.status == 500
        text = assert_error_page(page, "Something went wrong on our side", 500)
        request_id = response.headers["x-request-id"]
        assert page.inner_text("#error-request-id") == request_id
        assert "sk-svc" not in page.content() and "RuntimeError" not in page.content()
        assert "give them this reference" in text
        shot(page, "errors-06-500")

        with monkeypatch.context() as patch:
            database_down(patch)
            response = page.goto(gateway.url + "/admin/")
        assert response.status == 500
        assert_error_page(page, "Something went wrong on our side", 500)
        assert page.inner_text("#error-request-id") == response.headers["x-request-id"]
        shot(page, "errors-07-500-database-down")
    # The server answers again once the database is back.
    with httpx.Client(base_url=gateway.url) as http:
        assert http.get("/admin/", headers={"Cookie": "=".join(cookie)}).status_code == 200
