"""An ASGI wrapper that refuses oversized /v1 and /manage/v1 request bodies before Django reads
them.

Django's ASGI handler reads the whole body (spooling it to a temporary file past
FILE_UPLOAD_MAX_MEMORY_SIZE) before any view or middleware runs, so a size check in Django comes
after the bytes were received and stored. Here:
- a `Content-Length` above the limit is answered 413 at once, without reading the body;
- a chunked (or under-announced) body is counted as it arrives, and the 413 is sent the moment
  it passes the limit; Django then stops reading (RequestAborted), so no worker holds more than
  the limit in memory or on disk.
Paths under /v1/ get the contract's body, paths under /manage/v1/ DRF's (`{"detail": ...}`, as
licensing.console.manage_parsers answers a body over the same limit); the admin keeps Django's
own limits (its refusal is the site's 413 page, gateway_site.errors).
"""

from __future__ import annotations

import uuid

from django.core.exceptions import RequestAborted

from core.jsonio import dumps
from licensing.console.manage_parsers import too_large_detail

TOO_LARGE = dumps({"error": {"message": "Request body is too large"}})
API_PREFIX = "/v1/"
MANAGE_PREFIX = "/manage/v1/"


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes
        self.manage_too_large = dumps({"detail": too_large_detail(max_bytes)})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path.startswith(API_PREFIX):  # first: /v1 pays one test, as before
            answer = TOO_LARGE
        elif path.startswith(MANAGE_PREFIX):
            answer = self.manage_too_large
        else:
            return await self.app(scope, receive, send)
        announced = _content_length(scope)
        if announced is not None and announced > self.max_bytes:
            return await _too_large(send, answer)
        received = 0
        refused = False

        async def limited_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not refused:
                    refused = True
                    await _too_large(send, answer)
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


async def _too_large(send, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"x-request-id", uuid.uuid4().hex.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
