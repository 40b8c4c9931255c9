"""An ASGI wrapper that refuses oversized /v1 request bodies before Django reads them.

Django's ASGI handler reads the whole body (spooling it to a temporary file past
FILE_UPLOAD_MAX_MEMORY_SIZE) before any view or middleware runs, so a size check in Django comes
after the bytes were received and stored. Here:
- a `Content-Length` above the limit is answered 413 at once, without reading the body;
- a chunked (or under-announced) body is counted as it arrives, and the 413 is sent the moment
  it passes the limit; Django then stops reading (RequestAborted), so no worker holds more than
  the limit in memory or on disk.
Only paths under /v1/ are limited; the admin keeps Django's own limits.
"""

from __future__ import annotations

import uuid

from django.core.exceptions import RequestAborted

from core.jsonio import dumps

TOO_LARGE = dumps({"error": {"message": "Request body is too large"}})
API_PREFIX = "/v1/"


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            return await self.app(scope, receive, send)
        announced = _content_length(scope)
        if announced is not None and announced > self.max_bytes:
            return await _too_large(send)
        received = 0
        refused = False

        async def limited_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not refused:
                    refused = True
                    await _too_large(send)
                    raise RequestAborted()
            return message

        return await self.app(scope, limited_receive, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(TOO_LARGE)).encode()),
                (b"connection", b"close"),
                (b"x-request-id", uuid.uuid4().hex.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": TOO_LARGE})
