"""Django's ASGI handler, without its per-request OS thread on /v1.

Django's ASGIHandler runs every request in a fresh `ThreadSensitiveContext` and calls the
request_started / request_finished receivers and `response.close()` through `sync_to_async`,
which starts (and later stops) one OS thread per request: about 1 ms of CPU each on this path.
Their only work is `close_old_connections` (and `reset_queries` under DEBUG) for the calling
thread's database connections. The /v1 path opens no connection on its own thread (ORM work
runs on core.db's worker threads, which look after their own connections, and the hot
statements go through core.pgpool), so on /v1 the handler skips the thread and the
started and finished signals and closes the response inline; a 4xx/5xx answer is logged inline
too (Django hands `log_response` to the loop's default executor, a thread hop per error answer
whose first use starts a thread). Everything else (the admin) is Django's own.
"""

from __future__ import annotations

import asyncio

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.asgi import get_script_prefix as _script_prefix
from django.http import HttpResponse
from django.urls import ResolverMatch, get_resolver, set_script_prefix, set_urlconf
from django.utils.log import log_response

from core import metrics

from .middleware import API_PREFIX

RESOLVED_MAX = 64  # /v1 has fewer fixed paths than that


class GatewayASGIHandler(ASGIHandler):
    def __init__(self):
        super().__init__()
        check_django(self)
        self._resolver = None  # the URL conf's resolver the matches below were made by
        self._resolved: dict[str, ResolverMatch] = {}  # /v1 path -> its match

    def resolve_request(self, request):
        """Django's, with the match of a fixed /v1 path (a route without a parameter) kept:
        resolving walks /v1's routes in order, ~8 µs a request (docs/performance.md). A
        ResolverMatch is not changed once made; the matches go with the resolver, which Django
        makes anew for a new URL conf. At most `RESOLVED_MAX` paths are kept."""
        path = request.path_info
        if hasattr(request, "urlconf") or not path.startswith(API_PREFIX):
            return super().resolve_request(request)
        resolver = get_resolver()
        if resolver is not self._resolver:
            self._resolver, self._resolved = resolver, {}
        match = self._resolved.get(path)
        if match is None:
            match = resolver.resolve(path)
            if match.route == path[1:] and len(self._resolved) < RESOLVED_MAX:
                self._resolved[path] = match
        request.resolver_match = match
        return match

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path", "").startswith(API_PREFIX):
            await self.handle_api(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def handle_api(self, scope, receive, send):
        if not metrics.ENABLED:
            return await self._handle_api(scope, receive, send)
        # Until the last byte of the answer (a stream's too).
        metrics.in_flight(1)
        try:
            await self._handle_api(scope, receive, send)
        finally:
            metrics.in_flight(-1)

    async def _handle_api(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            assert error_response is not None  # create_request returns one or the other
            body_file.close()
            await self.send_response(error_response, send)
            error_response.close()
            return
        response = await self._respond_or_abort(request, receive, send)
        if response is not None:
            _close(response)
        body_file.close()

    async def _respond_or_abort(self, request, receive, send):
        """Django's race between the view and the client's disconnect, as in `handle`: a client
        that goes away cancels the view (a stream then closes its upstream request)."""

        async def process_request():
            response = await self._api_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass
            return response

        listener = asyncio.create_task(_until_disconnect(receive))
        worker = asyncio.create_task(process_request())
        await asyncio.wait((listener, worker), return_when=asyncio.FIRST_COMPLETED)
        if not worker.done():  # the client went away
            worker.cancel()
        if not listener.done():
            listener.cancel()
        try:
            return await worker
        except asyncio.CancelledError:
            return None
        finally:
            del listener, worker  # no cycle through this frame: the request is freed at once

    async def _api_response(self, request):
        """`get_response_async` with its error-answer log line written on the loop: the
        `django.request` logger is a level check and, for a 5xx, one line to the console, which
        every other log line of /v1 writes from the loop as well."""
        set_urlconf(settings.ROOT_URLCONF)
        # Django's private chain (BaseHandler.load_middleware builds it); untyped in the stubs.
        response = await self._middleware_chain(request)  # type: ignore[attr-defined]
        response._resource_closers.append(request.close)
        if response.status_code >= 400:
            log_response(
                "%s: %s",
                response.reason_phrase,
                request.path,
                response=response,
                request=request,
            )
        response._handler_class = self.__class__
        return response


def _close(response) -> None:
    """`response.close()` without its request_finished signal: the receivers (closing this
    context's database connections and caches, resetting the URL conf) have nothing to do on
    /v1, which opens neither here, and asking cost ~25 µs a request (docs/performance.md,
    "The workarounds")."""
    for closer in response._resource_closers:
        try:
            closer()
        except Exception:  # as Django's own close: a closer's failure is not the client's
            pass
    response._resource_closers.clear()
    response.closed = True


async def _until_disconnect(receive) -> None:
    """Returns at the client's disconnect. Django's `listen_for_disconnect` raises
    RequestAborted instead, on every request (the server reports a disconnect once the answer
    is sent), and that exception's traceback ties the request's objects into a reference cycle
    that only the cyclic garbage collector frees: ~80 objects per request, at 32 connections a
    30 ms collection every second (docs/performance.md, "The workarounds")."""
    while (await receive())["type"] != "http.disconnect":
        pass


def check_django(handler: ASGIHandler) -> None:
    """At start: the parts of Django this handler reuses are there, or the server does not
    start (a renamed one would otherwise fail on every /v1 request, or, for the response's
    closers, leak silently). tests/ops/test_upgrade_guards.py checks their signatures as well."""
    missing = [
        f"ASGIHandler.{name}"
        for name in ("read_body", "create_request", "send_response")
        if not callable(getattr(ASGIHandler, name, None))
    ]
    if not callable(getattr(handler, "_middleware_chain", None)):
        missing.append("BaseHandler._middleware_chain (built by load_middleware)")
    probe = HttpResponse()
    if not isinstance(getattr(probe, "_resource_closers", None), list):
        missing.append("HttpResponseBase._resource_closers")
    if not hasattr(probe, "_handler_class"):
        missing.append("HttpResponseBase._handler_class")
    if missing:
        raise ImproperlyConfigured(
            f"Django {django.get_version()} has no {', '.join(missing)}: gateway_site/handler.py "
            'relies on them (docs/performance.md, "The workarounds")'
        )
