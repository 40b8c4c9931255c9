"""The site's error answers (urls.py's handler400/403/404/500 and settings.CSRF_FAILURE_VIEW).

People get a page in the site's style that says what happened and what to do: the admin's and
the teacher's pages under the admin's header, the portal's under the portal's, with a link to
the right start page and sign-in page, and for a 500 the request id (the `X-Request-Id` of the
answer and the `request_id` of every log line written for the request, gateway_site.logs) so
that IT can find what went wrong. A page never shows the exception, the path's details or a
setting, DEBUG or not (DEBUG shows Django's own technical pages before these are asked).

The pages are rendered from an explicit context, without the request's context processors: no
user, session or message lookup, so no database query. A 500 caused by the database being down
renders like any other (tests/ops/test_error_pages.py checks it with the database refused).

The APIs keep their JSON: `/v1` the contract's (gateway_site.middleware: an unknown path is a
route there already, and a framework-made 404/500 is turned into the contract's shapes), and
`/manage/v1` DRF's `{"detail": ...}` (an unknown path, a body over the limit, an error outside
a view).
"""

from __future__ import annotations

import datetime
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.template import loader
from django.urls import reverse

from core.errors import internal_server_error
from licensing.console.manage_parsers import too_large_detail

from . import logs
from .middleware import API_PREFIX, api_not_found

MANAGE_PREFIX = "/manage/v1/"
PORTAL_PREFIX = "/portal/"

# DRF's own wording for each status (rest_framework.exceptions), so that an error made outside
# a view reads like one made inside. English, like the rest of the API's messages.
MANAGE_DETAIL = {
    400: "Bad request.",
    403: "You do not have permission to perform this action.",
    404: "Not found.",
    500: "A server error occurred.",
}


def _api(status: int, message: str) -> JsonResponse:
    """The contract's router-error shape (the spec's "Errors"), for what the framework refuses
    before any /v1 view (a Host header not in ALLOWED_HOSTS, ...)."""
    return JsonResponse({"error": {"message": message}}, status=status)


def _manage(status: int, detail: str | None = None) -> JsonResponse:
    return JsonResponse({"detail": detail or MANAGE_DETAIL[status]}, status=status)


def _area(request: HttpRequest, come_back: bool) -> dict[str, str | bool]:
    """Which part of the site the page belongs to: its start page, and how to change accounts
    (the sign-in page brings them back here if `come_back`). Whether someone is signed in is
    read from the session cookie's presence, not the session (a query): a stale cookie only
    means a sign-out button that signs out nobody."""
    portal = request.path.startswith(PORTAL_PREFIX)
    login = reverse("portal:login" if portal else "admin:login")
    if come_back and request.method == "GET":
        login += "?" + urlencode({"next": request.get_full_path()})
    signed_in = settings.SESSION_COOKIE_NAME in request.COOKIES
    return {
        "portal": portal,
        "start_url": reverse("portal:dashboard" if portal else "admin:index"),
        "sign_in_url": login,
        "signed_in": signed_in,
        "sign_out_url": reverse("portal:logout" if portal else "admin:logout"),
        # The sign-out form's token (the cookie's, or a new one the CSRF middleware sets).
        "csrf_token": get_token(request) if signed_in else "",
    }


def error_page(request: HttpRequest, template: str, status: int, **context) -> HttpResponse:
    """The page, rendered with no request context: nothing in it may need the database. A 404
    is the same page whatever the path (nothing in it tells one missing page from another:
    gateway_site.metrics hands a refused /metrics to Django's 404 for that reason), so its
    sign-in link does not come back to the path."""
    context = {**_area(request, come_back=status != 404), "status": status, **context}
    return HttpResponse(loader.render_to_string(template, context), status=status)


def bad_request(request, exception=None, template_name="400.html"):
    too_large = isinstance(exception, RequestDataTooBig)
    if request.path.startswith(API_PREFIX):
        return _api(400, "Bad request")
    if request.path.startswith(MANAGE_PREFIX):
        return _manage(413, too_large_detail()) if too_large else _manage(400)
    return error_page(request, template_name, 413 if too_large else 400, too_large=too_large)


def permission_denied(request, exception=None, template_name="403.html"):
    if request.path.startswith(API_PREFIX):
        return _api(403, "Forbidden")
    if request.path.startswith(MANAGE_PREFIX):
        return _manage(403)
    return error_page(request, template_name, 403)


def page_not_found(request, exception=None, template_name="404.html"):
    if request.path.startswith(API_PREFIX):
        return api_not_found(request)
    if request.path.startswith(MANAGE_PREFIX):
        return _manage(404)
    return error_page(request, template_name, 404)


def server_error(request, template_name="500.html"):
    if request.path.startswith(API_PREFIX):
        return internal_server_error()
    if request.path.startswith(MANAGE_PREFIX):
        return _manage(500)
    return error_page(
        request,
        template_name,
        500,
        request_id=getattr(request, "request_id", None) or logs.request_id.get() or "",
        when=f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}",
    )


def csrf_failure(request, reason="", template_name="403_csrf.html"):
    """A form sent without its CSRF token, or with an old one (a page left open past a sign-out
    or a sign-in elsewhere, cookies blocked): what to do, never Django's reason."""
    if request.path.startswith(API_PREFIX):
        return _api(403, "Forbidden")
    if request.path.startswith(MANAGE_PREFIX):
        return _manage(403, f"CSRF Failed: {reason}")  # DRF's own words for its CSRF check
    return error_page(request, template_name, 403)
