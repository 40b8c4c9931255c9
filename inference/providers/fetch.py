"""`fetch`: the gateway fetches URLs itself (POST /v1/fetch), through the SSRF guard.

Each URL is fetched on its own (in parallel), within `GATEWAY_FETCH_TIMEOUT` seconds for all of
its hops; redirects are followed by hand, at most 5, each hop checked again (scheme, port,
address, and the license's `urls` patterns when it has some); the body is streamed and
reading stops past `GATEWAY_FETCH_MAX_BYTES`. No cookies, credentials or client headers are
sent. One URL failing is an entry with an `error`, never a failed request.

Bounds (issue 22: a gzip bomb once inflated whole on the event loop): the body is read raw and
inflated here, in steps of at most `INFLATE_STEP` bytes of output with a yield to the event
loop between steps, so no read ever inflates more than that at once and the reading stops the
moment `GATEWAY_FETCH_MAX_BYTES` (per URL, compressed and inflated size alike) or
`GATEWAY_FETCH_MAX_TOTAL_BYTES` (the bodies one request holds at once, over all its URLs) is
passed. Only gzip and deflate are asked for and accepted. Extraction runs in a pool of two
threads, one of them at most per request, and stops by itself (inference.extract.Limits) at
the URL's deadline or once its request no longer waits for it; a PDF of more than
`GATEWAY_FETCH_MAX_PDF_PAGES` pages is refused before its pages are read.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from django.conf import settings

from inference import ssrf
from inference.extract import ACCEPTED_TYPES, Limits, Stopped, Unreadable, extract

from .base import Transport

logger = logging.getLogger("gateway")

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "inference-gateway-fetch/1.0"
# Extraction is CPU-bound (the GIL makes more threads useless) and must not take the default
# executor's threads, which are the database connection pool (core.db).
_EXTRACTORS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fetch-extract")
ACCEPT = "text/html,application/xhtml+xml,application/pdf,application/json,text/plain;q=0.9"
# Only the encodings inflated here, step by step (httpx would also ask for br and zstd, which
# it inflates a whole network read at a time).
ACCEPT_ENCODING = "gzip, deflate"
INFLATE_STEP = 64 * 1024  # bytes of output per step: ~0.1 ms of CPU between two yields


class Budget:
    """What one request may hold at once, over all its URLs (single loop: no lock): the bytes
    of its bodies (a URL gives them back when its body is dropped), and one of the two
    extractor threads. Extraction is pure Python, so a second thread would not make one
    request faster (the GIL); it would only let one request take the pool from all others."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0
        self.extractor = asyncio.Semaphore(1)

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise ssrf.Refused(
                "too_large", f"The pages of this request are larger than {self.limit} bytes"
            )
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


class Body:
    """A body as it is read: its pieces, kept as they come (same-sized blocks the allocator
    reuses, no growing buffer copied over and over) and joined once, and their size, taken from
    the request's Budget as they come and given back when the body is dropped."""

    def __init__(self, limit: int, budget: Budget, too_large: ssrf.Refused):
        self.limit, self.budget, self.too_large = limit, budget, too_large
        self.pieces: list[bytes] = []
        self.size = 0

    async def add(self, pieces: Iterator[bytes]) -> None:
        for piece in pieces:
            if self.size + len(piece) > self.limit:
                raise self.too_large
            self.budget.take(len(piece))
            self.size += len(piece)
            self.pieces.append(piece)
            await asyncio.sleep(0)  # other requests run between two steps of inflating

    def join(self) -> bytes:
        data = b"".join(self.pieces)
        self.pieces.clear()  # one copy of the body while it is extracted, not two
        return data

    def release(self) -> None:
        self.pieces.clear()
        self.budget.give_back(self.size)
        self.size = 0


def _damaged(coding: str | None) -> ssrf.Refused:
    return ssrf.Refused("unreadable_content", f"The page's {coding} data is damaged")


class Inflater:
    """A body's Content-Encoding undone in bounded steps: `feed` yields pieces of at most
    INFLATE_STEP bytes. gzip may have several members (RFC 1952); anything after the last
    member, a cut-off stream or a broken one is an error, never a guess."""

    def __init__(self, header: str | None):
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if codings in ([], ["gzip"], ["x-gzip"], ["deflate"]):
            self.coding = codings[0].removeprefix("x-") if codings else None
        else:
            raise ssrf.Refused(
                "unsupported_encoding",
                f"Content encoding '{', '.join(codings)}' is not supported",
            )
        self._z: zlib._Decompress | None = None
        self._started = False
        self._pending = b""  # deflate: the first byte, until its header can be told apart

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.coding is None:
            yield data
            return
        try:
            yield from self._inflate(data)
        except zlib.error as exc:
            raise _damaged(self.coding) from exc

    def finish(self) -> Iterator[bytes]:
        if self.coding is None:
            return
        if self._pending:  # one byte of deflate in all: never a whole stream
            raise _damaged(self.coding)
        if self._z is not None:
            try:
                tail = self._z.flush()  # at most a match's worth (258 bytes)
            except zlib.error as exc:
                raise _damaged(self.coding) from exc
            if tail:
                yield tail
            if not self._z.eof or self._z.unused_data:
                raise _damaged(self.coding)

    def _wbits(self, data: bytes) -> int:
        if self.coding == "gzip":
            return 16 + zlib.MAX_WBITS
        # "deflate" is meant to be zlib-wrapped (RFC 9110) but some servers send it raw.
        cmf, flg = data[0], data[1]
        wrapped = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
        return zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        if self.coding == "deflate" and self._z is None:
            data, self._pending = self._pending + data, b""
            if len(data) < 2:
                self._pending = data
                return
        while True:
            if self._z is None:
                if not data:
                    return
                if self._started and self.coding != "gzip":
                    raise _damaged(self.coding)  # bytes after the end of a deflate stream
                self._z = zlib.decompressobj(self._wbits(data))
                self._started = True
            piece = self._z.decompress(data, INFLATE_STEP)
            if piece:
                yield piece
            if self._z.eof:  # a member ended: what follows must be another one
                data, self._z = self._z.unused_data, None
            else:
                data = self._z.unconsumed_tail
                if not data and len(piece) < INFLATE_STEP:
                    return  # all input taken and nothing more pending: wait for the next read


@dataclass
class FetchedPage:
    url: str
    final_url: str | None = None
    title: str | None = None
    content: str | None = None
    content_type: str | None = None
    error_code: str | None = None
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code is None

    def as_dict(self) -> dict:
        return {
            "url": self.url,
            "final_url": self.final_url,
            "status": "ok" if self.ok else "error",
            "title": self.title,
            "content": self.content,
            "content_type": self.content_type,
            "error": None if self.ok else {"code": self.error_code, "message": self.error_message},
        }


def check_url(url: str) -> httpx.URL:
    """The URL as httpx will request it, or Refused."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ssrf.Refused("invalid_url", "Not a valid URL") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ssrf.Refused("invalid_url", "Only absolute http and https URLs are fetched")
    if parsed.userinfo:
        raise ssrf.Refused("invalid_url", "URLs with credentials are not fetched")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    if port not in ssrf.allowed_ports():
        raise ssrf.Refused("blocked_port", f"Port {port} is not allowed")
    return parsed


def _join(base: httpx.URL, location: str) -> str:
    try:
        return str(base.join(location))
    except (httpx.InvalidURL, ValueError) as exc:
        raise ssrf.Refused("invalid_url", "The page redirected to an invalid URL") from exc


class FetchTransport(Transport):
    kind = "fetch"

    def __init__(self):
        super().__init__()
        self._client: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = ssrf.guarded_client()
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def fetch_pages(
        self, urls: list[str], *, max_characters: int, fmt: str, allowed: Callable[[str], bool]
    ) -> list[FetchedPage]:
        budget = Budget(settings.GATEWAY["FETCH_MAX_TOTAL_BYTES"])
        return list(
            await asyncio.gather(
                *(self.fetch_page(url, max_characters, fmt, allowed, budget) for url in urls)
            )
        )

    async def fetch_page(
        self,
        url: str,
        max_characters: int,
        fmt: str,
        allowed: Callable[[str], bool],
        budget: Budget | None = None,
    ) -> FetchedPage:
        page = FetchedPage(url=url)
        gateway = settings.GATEWAY
        budget = budget or Budget(gateway["FETCH_MAX_TOTAL_BYTES"])
        limits = Limits(
            max_characters=max_characters,
            max_pages=gateway["FETCH_MAX_PDF_PAGES"],
            deadline=time.monotonic() + gateway["FETCH_TIMEOUT"],
            stop=threading.Event(),
        )
        try:
            async with asyncio.timeout(gateway["FETCH_TIMEOUT"]):
                await self._fetch(page, allowed, gateway["FETCH_MAX_BYTES"], fmt, budget, limits)
        except ssrf.Refused as exc:
            page.error_code, page.error_message = exc.code, exc.message
        except (TimeoutError, Stopped):
            page.error_code = "timeout"
            page.error_message = f"No complete answer within {gateway['FETCH_TIMEOUT']:g} seconds"
        except httpx.TimeoutException:
            page.error_code, page.error_message = "timeout", "The page did not answer in time"
        except httpx.HTTPError as exc:
            logger.info("fetch %s failed: %s", url, type(exc).__name__)
            page.error_code, page.error_message = "connection_failed", "The page could not be read"
        except Exception:  # one URL never fails the others
            logger.exception("fetch %s failed unexpectedly", url)
            page.error_code, page.error_message = "internal_error", "The page could not be read"
        if page.ok and page.content is not None:
            page.content = page.content[:max_characters]
        else:
            page.content = page.title = page.content_type = None
        return page

    async def _fetch(
        self, page: FetchedPage, allowed, max_bytes: int, fmt: str, budget: Budget, limits: Limits
    ) -> None:
        current = page.url
        for hop in range(MAX_REDIRECTS + 1):
            target = check_url(current)
            if hop and not allowed(str(target)):
                raise ssrf.Refused(
                    "redirect_not_allowed", "A redirect left the URLs this license may fetch"
                )
            headers = {
                "User-Agent": USER_AGENT,
                "Accept": ACCEPT,
                "Accept-Encoding": ACCEPT_ENCODING,
            }
            request = self.http.build_request("GET", target, headers=headers)
            response = await self.http.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    current = _join(target, location)
                    continue
                page.final_url = str(target)
                await self._read(page, response, max_bytes, fmt, budget, limits)
                return
            finally:
                await response.aclose()
        raise ssrf.Refused("too_many_redirects", f"More than {MAX_REDIRECTS} redirects")

    async def _read(
        self, page: FetchedPage, response: httpx.Response, max_bytes: int, fmt, budget, limits
    ):
        if response.status_code >= 400:
            raise ssrf.Refused("http_error", f"The page answered {response.status_code}")
        if response.status_code != 200:
            raise ssrf.Refused("http_error", f"Unexpected status {response.status_code}")
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in ACCEPTED_TYPES:
            raise ssrf.Refused(
                "unsupported_content_type",
                f"Content type '{content_type or 'none'}' is not supported",
            )
        inflater = Inflater(response.headers.get("content-encoding"))
        too_large = ssrf.Refused("too_large", f"The page is larger than {max_bytes} bytes")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large
        body, raw_size = Body(max_bytes, budget, too_large), 0
        try:
            # Raw reads (a network read is at most 64 KiB) inflated here in bounded steps.
            async for raw in response.aiter_raw():
                raw_size += len(raw)
                if raw_size > max_bytes:
                    raise too_large
                await body.add(inflater.feed(raw))
            await body.add(inflater.finish())
            async with budget.extractor:  # waiting for its turn, the body stays in pieces
                title, content = await self._extract(
                    body.join(),
                    content_type,
                    response.charset_encoding,
                    page.final_url,
                    fmt,
                    limits,
                )
        finally:
            body.release()
        page.title, page.content, page.content_type = title, content, content_type

    @staticmethod
    async def _extract(body: bytes, content_type, charset, url, fmt, limits: Limits):
        try:
            return await asyncio.get_running_loop().run_in_executor(
                _EXTRACTORS, extract, body, content_type, charset, url, fmt, limits
            )
        except Unreadable as exc:
            raise ssrf.Refused("unreadable_content", str(exc)) from exc
        finally:
            # Timed out or cancelled (the request went away): a running extraction stops at
            # its next check instead of keeping a pool thread busy for nobody.
            limits.stop.set()
