"""The site's error pages (gateway_site.errors), with DEBUG off as in production: each status
through real URLs (a missing page, a page of another institution, a role without the page, a
form without its CSRF token, a bad Host, a body over the limit, a view that raises, the database
down), what each page says to do, that none leaks what went wrong, and that /v1 and /manage/v1
keep their JSON. The browser's view of them: test_browser_error_pages.py."""

from __future__ import annotations

import logging
import re

import httpx
import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gateway_site.logs import RequestIdFilter
from licensing.models import ApiKey, Course, License
from tests.live_helpers import session_cookie, staff_user

from ..console.test_admin import make_licensing, url
from ..portal.conftest import make_student, signed_in

SECRET = "sk-svc-the-secret-detail"


@pytest.fixture(autouse=True)
def production(settings):
    settings.DEBUG = False  # pytest-django's default too: said here, as it is the point


@pytest.fixture
def two(db):
    return {"a": make_licensing("a"), "b": make_licensing("b")}


def role_client(world: dict, role: str, name: str) -> Client:
    user = staff_user(name, institution=world["institution"], role=role)
    client = Client()
    client.force_login(user)
    return client


def page_text(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


def assert_page(response, status: int, heading: str, *, start: str = "/admin/") -> str:
    """An error page in the site's frame: its status, heading, start link; nothing leaked."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert f"<h1>{heading}</h1>" in body
    assert f'href="{start}" id="error-start"' in body
    assert "/static/admin/css/base.css" in body  # the site's look
    for leak in ("Traceback", "Exception", SECRET, "DEBUG", "settings."):
        assert leak not in body, leak
    return page_text(response)


def test_a_missing_page_says_so_and_where_to_go(two):
    text = assert_page(Client().get("/no/such/page/"), 404, "Page not found")
    assert "ask your institution's admin" in text and "Error 404" in text
    signed_in_admin = role_client(two["a"], "admin", "admin-a")
    assert_page(signed_in_admin.get("/admin/no-such-page/"), 404, "Page not found")


def test_a_page_of_another_institution_is_the_same_404(two):
    client = role_client(two["a"], "admin", "admin-a")
    other = two["b"]
    for path in (
        url(License, "change", other["license"].pk),
        url(ApiKey, "change", other["api_key"].pk),
        url(Course, "change", other["course"].pk),
    ):
        response = client.get(path)
        text = assert_page(response, 404, "Page not found")
        assert "another institution" in text
        assert other["license"].name not in text and "Institution b" not in text


def test_a_teachers_other_course_is_a_404_in_the_admin_and_the_portal(two):
    teacher = role_client(two["a"], "teacher", "teach-a")
    course_b = two["b"]["course"]
    assert_page(teacher.get(url(Course, "change", course_b.pk)), 404, "Page not found")
    response = teacher.get(f"/portal/courses/{course_b.pk}/")
    text = assert_page(response, 404, "Page not found", start="/portal/")
    assert "Student portal" in text


def test_a_student_gets_the_portals_404(db):
    user, _ = make_student()
    response = signed_in(user).get("/portal/courses/999999/")
    text = assert_page(response, 404, "Page not found", start="/portal/")
    assert "Student portal" in text
    # Signed in: a sign-out button, with its CSRF token, to come back with another account.
    body = response.content.decode()
    assert '<form method="post" action="/portal/logout/"' in body
    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', body).group(1)
    assert len(token) == 64
    anonymous = Client().get("/portal/courses/999999/?x=1")  # the login page for them
    assert anonymous.status_code == 302


def test_signed_out_a_page_offers_to_sign_in(db):
    body = Client().get("/no/such/page/?a=b").content.decode()
    assert 'href="/admin/login/" id="error-sign-in"' in body and "error-sign-out" not in body
    # A 404 is the same page whatever the path: nothing tells one missing page from another.
    assert Client().get("/metrics-or-not/").content == Client().get("/no/such/page/").content


def test_a_role_without_the_page_gets_403_saying_whom_to_ask(two):
    reviewer = role_client(two["a"], "reviewer", "rev-a")
    response = reviewer.get(url(ApiKey, "add"))
    text = assert_page(response, 403, "You cannot open this page")
    assert "ask your institution's admin" in text and "sign out and sign in" in text
    assert '<form method="post" action="/admin/logout/"' in response.content.decode()
    teacher = role_client(two["a"], "teacher", "teach-a")
    assert_page(teacher.get(url(License, "changelist")), 403, "You cannot open this page")


def test_a_form_without_its_csrf_token_says_to_reload(db):
    client = Client(enforce_csrf_checks=True)
    response = client.post("/admin/login/", {"username": "x", "password": "y"})
    text = assert_page(response, 403, "The form has expired")
    assert "reload the page" in text and "Nothing was saved" in text
    assert "CSRF cookie" not in text and "Referer" not in text  # never Django's reason
    portal = Client(enforce_csrf_checks=True).post("/portal/logout/")
    assert_page(portal, 403, "The form has expired", start="/portal/")


def test_a_bad_host_and_a_body_over_the_limit(db, settings):
    settings.ALLOWED_HOSTS = ["gateway.example"]
    text = assert_page(
        Client(HTTP_HOST="evil.example").get("/admin/login/"),
        400,
        "The request could not be understood",
    )
    assert "evil.example" not in text
    settings.ALLOWED_HOSTS = ["*"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = Client().post("/admin/login/", {"username": "x" * 2000, "password": "y"})
    assert_page(big, 413, "What you sent is too large")


def test_the_apis_keep_their_json(two, settings, monkeypatch):
    assert Client().get("/v1/nope").json() == {"error": {"message": "Not found"}}
    monkeypatch.setattr("licensing.console.manage_api.licenses_usage", boom)
    superuser = get_user_model().objects.create_superuser("root", password="pw")
    client = Client(raise_request_exception=False)
    client.force_login(superuser)
    failed = client.get("/manage/v1/licenses")
    assert (failed.status_code, failed.json()) == (500, {"detail": "A server error occurred."})
    manage = Client().get("/manage/v1/no-such-endpoint")
    assert (manage.status_code, manage.json()) == (404, {"detail": "Not found."})
    settings.ALLOWED_HOSTS = ["gateway.example"]
    bad_host = Client(HTTP_HOST="evil.example").get("/manage/v1/licenses")
    assert (bad_host.status_code, bad_host.json()) == (400, {"detail": "Bad request."})


# --- 500: a view that raises, and the database down, through the real server -----------------


def boom(*args, **kwargs):
    raise RuntimeError(f"something internal {SECRET}")


@pytest.fixture
def logged(transactional_db):
    """The `django.request` records of the requests, with the request id the console's
    handler adds (gateway_site.logs)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep()
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def assert_500_page(response: httpx.Response, records, cause=RuntimeError) -> str:
    assert response.status_code == 500
    body = response.text
    request_id = response.headers["X-Request-Id"]
    assert f'<code id="error-request-id">{request_id}</code>' in body
    assert "<h1>Something went wrong on our side</h1>" in body
    for leak in ("Traceback", "RuntimeError", "OperationalError", SECRET, "something internal"):
        assert leak not in body, leak
    logged = [r for r in records if r.request_id == request_id]  # what IT finds with the id
    assert logged and logged[0].levelname == "ERROR", records
    assert logged[0].exc_info and logged[0].exc_info[0] is cause
    return body


def test_a_view_that_raises_shows_the_request_id_of_its_log_line(
    gateway, logged, monkeypatch, transactional_db
):
    root = get_user_model().objects.create_superuser("root", password="pw")
    monkeypatch.setattr(admin.site.__class__, "get_app_list", boom)  # the index
    with httpx.Client(base_url=gateway.url, headers={"Cookie": session_cookie(root)}) as http:
        assert_500_page(http.get("/admin/"), logged)
    user, _ = make_student()
    monkeypatch.setattr("licensing.portal.selectors.portal_end_user", boom)
    with httpx.Client(base_url=gateway.url, headers={"Cookie": session_cookie(user)}) as http:
        body = assert_500_page(http.get("/portal/"), logged)
        assert 'href="/portal/" id="error-start"' in body


def database_down(monkeypatch):
    """Every connection the ORM opens or uses is refused, as with the server stopped."""

    def refused(self):
        raise OperationalError("connection refused (the test stopped the database)")

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refused)


def test_the_500_page_renders_with_the_database_down(gateway, logged, transactional_db):
    root = get_user_model().objects.create_superuser("root", password="pw")
    cookie = session_cookie(root)
    with pytest.MonkeyPatch.context() as patch, httpx.Client(base_url=gateway.url) as http:
        database_down(patch)
        response = http.get("/admin/", headers={"Cookie": cookie})  # the session needs it
    body = assert_500_page(response, logged, cause=OperationalError)
    assert "/static/admin/css/base.css" in body


def test_rendering_an_error_page_makes_no_query(db, rf):
    from gateway_site import errors

    signed_out = rf.get("/admin/anything/")
    signed_in = rf.get("/portal/anything/", HTTP_COOKIE="sessionid=stale-or-not")
    with CaptureQueriesContext(connection) as queries:
        for request in (signed_out, signed_in):
            request.request_id = "0123abcd"
            for response in (
                errors.server_error(request),
                errors.page_not_found(request, Exception("x")),
                errors.permission_denied(request, Exception("x")),
                errors.bad_request(request, Exception("x")),
                errors.csrf_failure(request, reason="CSRF cookie not set."),
            ):
                assert response.status_code in (400, 403, 404, 500)
    assert len(queries) == 0
    assert b"error-sign-out" in errors.page_not_found(signed_in, Exception("x")).content
