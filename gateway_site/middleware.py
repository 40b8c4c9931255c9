"""Outer request handling: request ids, the access log, and the /v1 error envelope.

Only async-native code runs on the /v1 path; the admin's middleware stack (sessions,
CSRF, auth, messages) is applied to everything else by `AdminStack`.
"""

import asyncio
import logging
import time
import uuid
from inspect import iscoroutine

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpResponse, JsonResponse
from django.urls import Resolver404, get_resolver
from django.utils.module_loading import import_string

from core import metrics
from core.errors import internal_server_error, validation_error_body

from . import logs

access_log = logging.getLogger("gateway.access")
API_PREFIX = "/v1/"
# Answers that never reach the ledger (the caller is not identified, or the request is not one):
# the access log is where they are counted. The pipeline sets `request.error_code` for the rest.
UNLEDGERED = {
    400: "invalid_header",  # X-Service-Provider / X-Service-Metadata (check 4)
    401: "unauthenticated",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    422: "validation_error",
    499: "client_closed_request",
}
CLIENT_CLOSED = 499  # nginx's status for a client that left before the answer


def _method_not_allowed(request, response) -> JsonResponse:
    allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
    item = {
        "type": "method_not_allowed",
        "loc": ["request", "method"],
        "msg": "Method Not Allowed",
        "input": request.method,
        "ctx": {"allowed": allowed},
    }
    fixed = JsonResponse(validation_error_body([item]), status=405)
    if allowed:
        fixed["Allow"] = ", ".join(allowed)
    return fixed


def _is_html(response) -> bool:
    return response.get("Content-Type", "").startswith("text/html")


def normalize_api_response(request, response):
    """Give framework-made 404/405/500 pages under /v1/ the contract's shapes."""
    status = response.status_code
    if status == 405:
        return _method_not_allowed(request, response)
    if status == 404 and _is_html(response):
        return api_not_found(request)
    if status == 500 and _is_html(response):
        return internal_server_error()
    return response


def api_not_found(request, *args, **kwargs) -> JsonResponse:
    return JsonResponse({"error": {"message": "Not found"}}, status=404)


async def api_not_found_view(request, *args, **kwargs) -> JsonResponse:
    """The last /v1/ route: an unknown path answered as a view, not as Django's Resolver404,
    whose exception is turned into a page on the loop's default executor (a thread)."""
    return api_not_found(request)


class RequestContextMiddleware:
    """Assigns the request id, writes one access-log line, normalizes /v1 error pages."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request):
        started = time.perf_counter()
        request_id = uuid.uuid4().hex
        request.request_id = request_id
        logs.request_id.set(request_id)
        request.started_at = started
        is_api = request.path.startswith(API_PREFIX)
        try:
            response = await self.get_response(request)
        except asyncio.CancelledError:
            # The client went away before the answer (gateway_site.handler cancels the view): the
            # request still gets its line, nginx's 499, with how long it had run.
            if access_log.isEnabledFor(logging.INFO):
                _log_access(request, HttpResponse(status=CLIENT_CLOSED), started)
            raise
        except Exception:  # pragma: no cover - Django converts exceptions before this
            logging.getLogger("gateway").exception("unhandled error request_id=%s", request_id)
            response = internal_server_error()
        if is_api:
            response = normalize_api_response(request, response)
            metrics.http_response(response.status_code)
        response["X-Request-Id"] = request_id
        if access_log.isEnabledFor(logging.INFO):
            _log_access(request, response, started)
        return response


def _log_access(request, response, started: float) -> None:
    """One line per request (never a credential or a prompt); its fields are the record's own
    attributes, so that a JSON line has them at the top level (gateway_site.logs)."""
    principal = getattr(request, "principal", None)
    latency = round((time.perf_counter() - started) * 1000, 2)
    status = response.status_code
    fields = {
        "event": "request",
        "request_id": request.request_id,
        "method": request.method,
        "path": request.path,
        "status": status,
        "latency_ms": latency,
        "license": principal.license_name if principal else None,
        "error_code": getattr(request, "error_code", None) or UNLEDGERED.get(status),
    }
    access_log.info("%s %s %s %s ms", request.method, request.path, status, latency, extra=fields)


class AdminStack:
    """Runs settings.ADMIN_MIDDLEWARE for everything outside /v1/."""

    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        from django.conf import settings

        self.get_response = get_response
        # Django's handler calls the `process_view` hooks of settings.MIDDLEWARE only, so the
        # stack's own (CsrfViewMiddleware's: the CSRF check of every POST outside /v1) run
        # here, innermost, after sessions and auth, as Django would run them.
        self.view_hooks: list = []
        handler = self._view_hooks_then_view
        for path in reversed(settings.ADMIN_MIDDLEWARE):
            handler = import_string(path)(handler)
            if not iscoroutinefunction(handler):  # pragma: no cover - all built-ins adapt
                raise RuntimeError(f"{path} must support async")
            if hasattr(handler, "process_view"):
                self.view_hooks.insert(0, handler.process_view)
        self.admin_chain = handler
        markcoroutinefunction(self)

    async def _view_hooks_then_view(self, request):
        if self.view_hooks:
            try:
                match = get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
            except Resolver404:
                match = None  # the handler answers its 404
            if match is not None:
                for hook in self.view_hooks:
                    answer = hook(request, match.func, match.args, match.kwargs)
                    if iscoroutine(answer):
                        answer = await answer
                    if answer is not None:
                        return answer
        return await self.get_response(request)

    async def __call__(self, request):
        if request.path.startswith(API_PREFIX):
            return await self.get_response(request)
        return await self.admin_chain(request)
