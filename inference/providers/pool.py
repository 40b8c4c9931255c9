"""The connection pool of one provider connection row: aiohttp's, behind httpx's interface.

aiohttp's pool costs a quarter of httpcore's CPU per call here, and it learns at once (an
asyncio protocol callback) when an upstream closes an idle kept-alive connection, so a request
is not sent on a connection that is already gone. Plain request/response calls go to aiohttp
directly and come back as an `httpx.Response` (httpx's request building, URL parsing and cookie
handling were a fifth of the gateway's CPU per request), and so are SSE streams
(`StreamedAnswer`); httpx over the same aiohttp pool (httpx-aiohttp's transport) is left for
what needs httpx itself (downloads). A protocol that signs the exact %-encoded path (SigV4),
which aiohttp would re-quote, uses httpcore instead (`aiohttp=False`).
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
from django.conf import settings
from httpx_aiohttp import AiohttpTransport

from core import tracing


class UpstreamTimeout(Exception):
    pass


class UpstreamUnreachable(Exception):
    pass


class Upstream:
    def __init__(self, *, timeout: float | None, aiohttp_transport: bool):
        gateway = settings.GATEWAY
        self.read_timeout = timeout or gateway["UPSTREAM_TIMEOUT"]
        self.connect_timeout = gateway["UPSTREAM_CONNECT_TIMEOUT"]
        self.limit = gateway["UPSTREAM_MAX_CONNECTIONS"]
        self.keepalive = gateway["UPSTREAM_KEEPALIVE"]
        self.uses_aiohttp = aiohttp_transport
        self._session: aiohttp.ClientSession | None = None
        timeout_config = httpx.Timeout(self.read_timeout, connect=self.connect_timeout)
        if aiohttp_transport:
            transport = AiohttpTransport(client=self.session)
        else:
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=self.limit, keepalive_expiry=self.keepalive)
            )
        self.http = httpx.AsyncClient(
            transport=transport, timeout=timeout_config, follow_redirects=False, trust_env=False
        )
        if not aiohttp_transport:
            tracing.instrument_httpx(self.http)  # aiohttp's own spans cover the other clients
        self._aiohttp_timeout = aiohttp.ClientTimeout(
            sock_connect=self.connect_timeout, sock_read=self.read_timeout
        )

    def session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the serving event loop."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.limit, keepalive_timeout=self.keepalive)
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, trace_configs=tracing.aiohttp_trace_configs()
            )
        return self._session

    async def request(
        self, method: str, url: str, *, content: bytes, headers: dict, params: dict | None
    ) -> httpx.Response:
        """One call, its whole answer read. Raises UpstreamTimeout / UpstreamUnreachable."""
        if not self.uses_aiohttp:
            return await self._request_httpx(method, url, content, headers, params)
        try:
            async with self.session().request(
                method,
                url,
                data=content or None,
                headers=headers,
                params=params,
                timeout=self._aiohttp_timeout,
                allow_redirects=False,
                auto_decompress=False,  # httpx.Response decodes by Content-Encoding
            ) as answer:
                body = await answer.read()
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc
        return httpx.Response(answer.status, headers=answer.raw_headers, content=body)

    async def stream(self, url: str, *, content: bytes, headers: dict):
        """POST, and return once the answer's headers are in: a `StreamedAnswer` for a success,
        an `httpx.Response` with its body read for a failure status (or on the httpcore path).
        Raises UpstreamTimeout / UpstreamUnreachable."""
        if not self.uses_aiohttp:
            return await self._stream_httpx(url, content, headers)
        try:
            answer = await self.session().request(
                "POST",
                url,
                data=content,
                headers=headers,
                timeout=self._aiohttp_timeout,
                allow_redirects=False,
                auto_decompress=False,
            )
            if answer.status < 300:
                return StreamedAnswer(answer)
            async with answer:
                body = await answer.read()
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc
        return httpx.Response(answer.status, headers=answer.raw_headers, content=body)

    async def _stream_httpx(self, url, content, headers) -> httpx.Response:
        request = self.http.build_request("POST", url, content=content, headers=headers)
        try:
            response = await self.http.send(request, stream=True)
            if response.status_code >= 300:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
            return response
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc

    async def _request_httpx(self, method, url, content, headers, params) -> httpx.Response:
        try:
            return await self.http.request(
                method, url, content=content or None, headers=headers, params=params
            )
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._session is not None:
            await self._session.close()

    def close_when_idle(self) -> None:
        """Close a pool that an edit of its connection row replaced, once the requests it may
        still be serving have had their time-out to finish (closing it at once would cut them)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return

        async def close_later():
            await asyncio.sleep(self.read_timeout + 5)
            await self.aclose()

        task = loop.create_task(close_later())
        _retired[task] = self  # referenced until closed: not left to the garbage collector
        task.add_done_callback(_retired.pop)


class StreamedAnswer:
    """A successful streamed answer read straight from aiohttp, with the part of httpx's
    Response the relay uses (inference.streaming): httpx's request building, cookie handling
    and transport shim were a tenth of the gateway's CPU per stream."""

    def __init__(self, answer: aiohttp.ClientResponse):
        self._answer = answer
        self.status_code = answer.status

    async def aiter_raw(self):
        """The body's bytes as they arrive; a broken or stalled upstream raises httpx's
        ReadError / ReadTimeout, as httpx itself would."""
        try:
            async for chunk in self._answer.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(type(exc).__name__) from exc

    async def aclose(self) -> None:
        # Back to the pool when the body was read to its end; closed (the upstream stops
        # generating) when the client left before.
        self._answer.release()


_retired: dict[asyncio.Task, Upstream] = {}


async def close_retired() -> None:
    """Close the replaced pools now (shutdown, tests)."""
    for task, upstream in list(_retired.items()):
        task.cancel()
        await upstream.aclose()
