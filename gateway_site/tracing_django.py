"""The Django instrumentation's middleware, made async (imported only when tracing is on).

Its own middleware is sync only, so under ASGI Django would run it on a thread and the rest of
the request through async_to_sync: two thread hops per request on the /v1 path, which otherwise
has none (gateway_site.handler). Its hooks do no I/O, so they run inline here; everything else
(the server span, its attributes, context propagation) is the instrumentation's own.
"""

from __future__ import annotations

import logging

from asgiref.sync import markcoroutinefunction
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.django.middleware.otel_middleware import _DjangoMiddleware

logger = logging.getLogger("gateway")


class AsyncDjangoMiddleware(_DjangoMiddleware):
    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        super().__init__(get_response)
        markcoroutinefunction(self)

    async def __call__(self, request):
        try:
            self.process_request(request)
        except Exception:  # a trace is never worth a failed request
            logger.exception("server span not started")
        response = await self.get_response(request)
        try:
            return self.process_response(request, response)
        except Exception:
            logger.exception("server span not ended")
            return response

    async def process_view(self, request, view_func, *args, **kwargs):
        return super().process_view(request, view_func, *args, **kwargs)

    async def process_exception(self, request, exception):
        return super().process_exception(request, exception)


class AsyncDjangoInstrumentor(DjangoInstrumentor):
    """DjangoInstrumentor, inserting the async middleware into settings.MIDDLEWARE."""

    _opentelemetry_middleware = f"{AsyncDjangoMiddleware.__module__}.AsyncDjangoMiddleware"
