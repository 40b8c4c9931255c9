"""The connection pool of one provider connection row: aiohttp's, behind httpx's interface.

aiohttp's pool costs a quarter of httpcore's CPU per call here, and it learns at once (an
asyncio protocol callback) when an upstream closes an idle kept-alive connection, so a request
is not sent on a connection that is already gone. Plain request/response calls go to aiohttp
directly and come back as an `httpx.Response` (httpx's request building, URL parsing and cookie
handling were a fifth of the gateway's CPU per request), and so are SSE streams
(`StreamedAnswer`); httpx over the same aiohttp pool (httpx-aiohttp's transport) is left for
what needs httpx itself (downloads). A protocol that signs the exact %-encoded path (SigV4),
which aiohttp would re-quote, uses httpcore instead (`aiohttp=False`).

Bounds (docs/decisions/README.md, "Upstream bounds"): a call waits at most
`UPSTREAM_POOL_WAIT` seconds for a connection (its license's share of the pool, then a free slot
of the pool, both ours: UpstreamBusy past it; then the connect itself: UpstreamTimeout), each the
spec's 503; one license holds at most
`UPSTREAM_LICENSE_SHARE` of the pool's slots, so its slow streams cannot starve another license;
an answer is read up to the byte cap its caller gives (UpstreamTooLarge past it), counted as it
arrives, decompressed.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from contextvars import ContextVar

import aiohttp
import httpx
from django.conf import settings
from httpx_aiohttp import AiohttpTransport

from core import tracing
from core.outbound import provider_ssl_context


class UpstreamTimeout(Exception):
    pass


class UpstreamUnreachable(Exception):
    pass


class UpstreamBusy(Exception):
    """No slot of our own pool came free within the pool-wait budget: the license's share, or
    the worker's pool of the connection. The provider was not called, so this says nothing of
    its health: it must never count against the connection's circuit (docs/routing.md)."""


class UpstreamTooLarge(Exception):
    """The answer was longer than the caller's byte cap (read no further)."""


# The license a request is served for (set when its credentials are known, inference.api): the
# key of its share of each pool. None (no request, e.g. a management command): no share applies.
current_license: ContextVar[int | None] = ContextVar("upstream_license", default=None)


class Upstream:
    def __init__(self, *, timeout: float | None, aiohttp_transport: bool):
        gateway = settings.GATEWAY
        self.read_timeout = timeout or gateway["UPSTREAM_TIMEOUT"]
        self.connect_timeout = gateway["UPSTREAM_CONNECT_TIMEOUT"]
        self.limit = gateway["UPSTREAM_MAX_CONNECTIONS"]
        self.keepalive = gateway["UPSTREAM_KEEPALIVE"]
        self.pool_wait = gateway["UPSTREAM_POOL_WAIT"]
        # Slots one license may hold at once; at least one, so a pool of 1 still serves.
        self.share = max(1, math.ceil(self.limit * gateway["UPSTREAM_LICENSE_SHARE"]))
        self._shares: dict[int, asyncio.Semaphore] = {}  # by license id (as many as licenses)
        self._pool = asyncio.Semaphore(self.limit)  # the pool's slots (aiohttp's path)
        self.uses_aiohttp = aiohttp_transport
        self.ssl = provider_ssl_context()  # certifi's, or with an institution's own CA
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        timeout_config = httpx.Timeout(
            self.read_timeout, connect=self.connect_timeout, pool=self.pool_wait
        )
        transport: httpx.AsyncBaseTransport
        if aiohttp_transport:
            transport = AiohttpTransport(client=self.session)
        else:
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=self.limit, keepalive_expiry=self.keepalive),
                verify=self.ssl,
            )
        self.http = httpx.AsyncClient(
            transport=transport, timeout=timeout_config, follow_redirects=False, trust_env=False
        )
        if not aiohttp_transport:
            tracing.instrument_httpx(self.http)  # aiohttp's own spans cover the other clients
        # aiohttp's `connect` is the wait for a pool slot plus the connect; `sock_connect` the
        # TCP/TLS connect alone.
        self._aiohttp_timeout = self._timeout(self.pool_wait)

    def _timeout(self, pool_wait: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            connect=pool_wait + self.connect_timeout,
            sock_connect=self.connect_timeout,
            sock_read=self.read_timeout,
        )

    async def _take_slots(self, pool: bool = True) -> tuple[_Slots, aiohttp.ClientTimeout]:
        """The request's license's slot of this pool, then (`pool`: aiohttp's path) one of the
        pool's own, both waited for within the pool-wait budget, else UpstreamBusy; and the
        aiohttp time-out for the rest of that budget (the connect). The pool's slot is ours, not
        aiohttp's queue, so that a full pool is told apart from a provider slow to connect.
        Uncontended (the usual case) this waits for nothing."""
        share = self._share_of(current_license.get())
        slots = _Slots(share, self._pool if pool else None)
        if (share is None or not share.locked()) and not (pool and self._pool.locked()):
            # Both free: taken at once (acquiring a semaphore that is not locked never suspends).
            if share is not None:
                await share.acquire()
            if pool:
                await self._pool.acquire()
            return slots, self._aiohttp_timeout
        started = time.monotonic()
        await slots.wait(self.pool_wait)
        left = max(0.0, self.pool_wait - (time.monotonic() - started))
        return slots, self._timeout(left)

    def _share_of(self, license_id: int | None) -> asyncio.Semaphore | None:
        if license_id is None:
            return None
        share = self._shares.get(license_id)
        if share is None:
            share = self._shares[license_id] = asyncio.Semaphore(self.share)
        return share

    def session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the serving event loop."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.limit, keepalive_timeout=self.keepalive, ssl=self.ssl
            )
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=False, trace_configs=tracing.aiohttp_trace_configs()
            )
            self._session_loop = asyncio.get_running_loop()
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        content: bytes,
        headers: dict,
        params: dict | None,
        max_bytes: int,
    ) -> httpx.Response:
        """One call, its whole answer read (at most `max_bytes`, decompressed). Raises
        UpstreamTimeout / UpstreamUnreachable / UpstreamTooLarge."""
        slots, timeout = await self._take_slots(pool=self.uses_aiohttp)
        try:
            if not self.uses_aiohttp:
                return await self._request_httpx(method, url, content, headers, params, max_bytes)
            return await self._request_aiohttp(
                method, url, content, headers, params, max_bytes, timeout
            )
        finally:
            slots.release()

    async def _request_aiohttp(self, method, url, content, headers, params, max_bytes, timeout):
        try:
            async with self.session().request(
                method,
                url,
                data=content or None,
                headers=headers,
                params=params,
                timeout=timeout,
                allow_redirects=False,
                # aiohttp inflates in bounded steps, so the cap counts the bytes really held.
                auto_decompress=True,
            ) as answer:
                body = await _read_capped(answer.content.iter_chunked(65536), max_bytes)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc
        raw_headers = answer.raw_headers
        if answer.headers.get("Content-Encoding"):
            raw_headers = _decoded_headers(raw_headers)
        return read_answer(answer.status, raw_headers, body)

    async def stream(self, url: str, *, content: bytes, headers: dict, max_bytes: int):
        """POST, and return once the answer's headers are in: a `StreamedAnswer` for a success
        (which holds the license's slot until it is closed, and reads at most `max_bytes`), an
        `httpx.Response` with its body read for a failure status (or on the httpcore path, which
        no streaming adapter uses). Raises UpstreamBusy / UpstreamTimeout / UpstreamUnreachable."""
        if not self.uses_aiohttp:
            return await self._stream_httpx(url, content, headers)
        slots: _Slots | None
        slots, timeout = await self._take_slots()
        try:
            answer = await self.session().request(
                "POST",
                url,
                data=content,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
                auto_decompress=False,
            )
            if answer.status < 300:
                streamed, slots = StreamedAnswer(answer, slots, max_bytes), None
                return streamed
            async with answer:
                body = await _read_capped(answer.content.iter_chunked(65536), max_bytes)
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc
        finally:
            if slots is not None:  # not handed to a StreamedAnswer
                slots.release()
        return read_answer(answer.status, answer.raw_headers, body)

    async def download(self, url: str, *, max_bytes: int) -> httpx.Response:
        """GET a pre-signed URL (redirects followed, no credentials), at most `max_bytes`.
        Raises httpx's errors, UpstreamBusy and UpstreamTooLarge. It takes a slot of the pool
        (not of a share: its request has just had its call) so that aiohttp's own queue, which
        a wait could not be told apart in, stays empty."""
        slots = _Slots(None, self._pool if self.uses_aiohttp else None)
        await slots.wait(self.pool_wait)
        try:
            async with self.http.stream("GET", url, follow_redirects=True) as response:
                body = await _read_capped(response.aiter_bytes(), max_bytes)
                raw_headers = _decoded_headers(response.headers.raw)
                return read_answer(response.status_code, raw_headers, body)
        finally:
            slots.release()

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
        except httpx.PoolTimeout as exc:
            raise UpstreamBusy("the pool") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc

    async def _request_httpx(self, method, url, content, headers, params, max_bytes):
        request = self.http.build_request(
            method, url, content=content or None, headers=headers, params=params
        )
        try:
            response = await self.http.send(request, stream=True)
            try:
                body = await _read_capped(response.aiter_bytes(), max_bytes)
            finally:
                await response.aclose()
            raw_headers = _decoded_headers(response.headers.raw)
            return httpx.Response(
                response.status_code, headers=raw_headers, content=body, request=request
            )
        except httpx.PoolTimeout as exc:
            raise UpstreamBusy("the pool") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(type(exc).__name__) from exc
        except httpx.TransportError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self.http.aclose()
        session = self._session
        if session is None:
            return
        loop = self._session_loop
        if loop is None or loop is asyncio.get_running_loop():
            await session.close()
        elif loop.is_running():
            # Made on another server's loop (two in one process: the tests): closed there, as
            # aiohttp requires; not waited for.
            asyncio.run_coroutine_threadsafe(session.close(), loop)

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


class _Slots:
    """What one call holds of its pool: its license's share (None: no license) and a slot of
    the pool (None: httpx's path, whose own pool bounds it)."""

    __slots__ = ("share", "pool")

    def __init__(self, share: asyncio.Semaphore | None, pool: asyncio.Semaphore | None):
        self.share, self.pool = share, pool

    async def wait(self, budget: float) -> None:
        """The share, then the pool's slot, within `budget` seconds: else UpstreamBusy, holding
        nothing (so too when the client leaves meanwhile)."""
        share = None
        try:
            async with asyncio.timeout(budget):
                if self.share is not None:
                    await self.share.acquire()
                    share = self.share
                if self.pool is not None:
                    await self.pool.acquire()
        except BaseException as exc:
            if share is not None:
                share.release()
            if isinstance(exc, TimeoutError):
                where = (
                    "the pool" if share is not None or self.share is None else "the license's share"
                )
                raise UpstreamBusy(where) from exc
            raise

    def release(self) -> None:
        if self.share is not None:
            self.share.release()
        if self.pool is not None:
            self.pool.release()


class StreamTooLarge(httpx.ReadError):
    """A stream past its byte cap: for the relay a broken stream (its in-stream 503); before its
    first byte reached the client an answer too large, not retried (inference.failover: the
    next connection's would be as large)."""


class StreamedAnswer:
    """A successful streamed answer read straight from aiohttp, with the part of httpx's
    Response the relay uses (inference.streaming): httpx's request building, cookie handling
    and transport shim were a tenth of the gateway's CPU per stream."""

    def __init__(
        self,
        answer: aiohttp.ClientResponse,
        share: _Slots | asyncio.Semaphore | None,
        max_bytes: int,
    ):
        self._answer = answer
        # The call's slots (its license's, the pool's), held until the stream is closed; given
        # back through the loop by the garbage collector too (from whatever thread it runs
        # in), should a stream never be relayed (a client gone before its start).
        self._share = share
        self._finalizer = None
        if share is not None:
            loop = asyncio.get_running_loop()
            self._finalizer = weakref.finalize(self, loop.call_soon_threadsafe, share.release)
        self._max_bytes = max_bytes
        self.status_code = answer.status

    async def aiter_raw(self):
        """The body's bytes as they arrive; a broken or stalled upstream raises httpx's
        ReadError / ReadTimeout, as httpx itself would, and so does a stream longer than its
        byte cap (the relay ends it with its in-stream 503)."""
        left = self._max_bytes
        try:
            async for chunk in self._answer.content.iter_any():
                left -= len(chunk)
                if left < 0:
                    raise StreamTooLarge(f"stream over {self._max_bytes} bytes")
                yield chunk
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise httpx.ReadTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise httpx.ReadError(type(exc).__name__) from exc

    async def aclose(self) -> None:
        # Back to the pool when the body was read to its end; closed (the upstream stops
        # generating) when the client left before.
        self._answer.release()
        share = self._share  # not None whenever there is a finalizer
        if share is not None and self._finalizer is not None and self._finalizer.detach():
            share.release()  # detach() is true once only


def read_answer(status: int, raw_headers, body: bytes) -> httpx.Response:
    """An httpx answer whose body is already read, as `httpx.Response(content=body)` makes it
    but without that body's second read through httpx's decoder chain (its content decoder,
    chunker and generators: ~20 µs a call, docs/performance.md "The workarounds"): the body
    is set where httpx's own `read()` puts it."""
    response = httpx.Response(status, headers=raw_headers, stream=httpx.ByteStream(body))
    response._content = body
    response.is_stream_consumed = response.is_closed = True
    return response


async def _read_capped(chunks, max_bytes: int) -> bytes:
    """The chunks joined, or UpstreamTooLarge as soon as they pass `max_bytes`."""
    parts = []
    left = max_bytes
    async for chunk in chunks:
        left -= len(chunk)
        if left < 0:
            raise UpstreamTooLarge(f"answer over {max_bytes} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _decoded_headers(raw_headers):
    """The headers of an answer whose body is already decompressed (httpx must not decode it
    again, and its length is no longer the one sent)."""
    return [
        (name, value)
        for name, value in raw_headers
        if name.lower() not in (b"content-encoding", b"content-length")
    ]


_retired: dict[asyncio.Task, Upstream] = {}


async def close_retired() -> None:
    """Close this event loop's replaced pools now (shutdown, tests). Another loop's (a second
    server in the same process, as the tests run) are its own to close: an aiohttp pool is
    closed on the loop it was made on."""
    loop = asyncio.get_running_loop()
    for task, upstream in list(_retired.items()):
        if task.get_loop() is not loop:
            continue
        task.cancel()
        await upstream.aclose()
