"""/static/ served by WhiteNoise, on the admin stack only (never consulted for /v1).

WhiteNoise's middleware is synchronous; this async wrapper answers paths under STATIC_URL from
it and passes every other request straight on, so admin pages pay nothing for it and static
files are looked up without a thread hop (an in-memory dict) unless autorefresh (DEBUG) has to
look at the disk.
"""

from asgiref.sync import markcoroutinefunction, sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware:
    async_capable = True
    sync_capable = False

    def __init__(self, get_response):
        self.get_response = get_response
        self.whitenoise = WhiteNoiseMiddleware(get_response=lambda request: None)
        self.prefix = self.whitenoise.static_prefix
        markcoroutinefunction(self)

    def _find(self, path: str):
        if self.whitenoise.autorefresh:
            return self.whitenoise.find_file(path)
        return self.whitenoise.files.get(path)

    async def __call__(self, request):
        if request.path_info.startswith(self.prefix):
            if self.whitenoise.autorefresh:
                static_file = await sync_to_async(self._find)(request.path_info)
            else:
                static_file = self._find(request.path_info)
            if static_file is not None:
                return self.whitenoise.serve(static_file, request)
        return await self.get_response(request)
