"""/static/ served by WhiteNoise, on the admin stack only (never consulted for /v1).

WhiteNoise's middleware is synchronous and answers with a file-streaming response, which
Django's ASGI handler can only consume with a warning per request. This async wrapper asks
WhiteNoise which file (and which variant: gzip/brotli, range, 304) answers a path under
STATIC_URL, reads it on a worker thread and returns it whole; every other request passes
straight on, so admin pages pay nothing for it.
"""

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from whitenoise.middleware import WhiteNoiseMiddleware


def _read(static_file, method: str, meta: dict):
    answer = static_file.get_response(method, meta)
    body = b""
    if answer.file is not None:
        try:
            body = answer.file.read()
        finally:
            answer.file.close()
    return int(answer.status), answer.headers, body


class StaticFilesMiddleware:
    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        self.get_response = get_response
        self.whitenoise = WhiteNoiseMiddleware(get_response=lambda request: None)
        # WhiteNoise's lookup, used without its middleware's __call__: at start, not on the
        # first static request (docs/performance.md, "The workarounds").
        missing = [
            name
            for name in ("static_prefix", "autorefresh", "files", "find_file")
            if not hasattr(self.whitenoise, name)
        ]
        if missing:
            raise ImproperlyConfigured(
                f"WhiteNoiseMiddleware has no {', '.join(missing)}: gateway_site/staticfiles.py "
                'relies on them (docs/performance.md, "The workarounds")'
            )
        self.prefix = self.whitenoise.static_prefix
        markcoroutinefunction(self)

    def _find(self, path: str):
        if self.whitenoise.autorefresh:
            return self.whitenoise.find_file(path)
        return self.whitenoise.files.get(path)

    async def __call__(self, request):
        if request.path_info.startswith(self.prefix):
            static_file = await sync_to_async(self._find)(request.path_info)
            if static_file is not None:
                status, headers, body = await sync_to_async(_read)(
                    static_file, request.method, request.META
                )
                response = HttpResponse(body, status=status)
                del response["Content-Type"]
                for name, value in headers:
                    response[name] = value
                return response
        return await self.get_response(request)
