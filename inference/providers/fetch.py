"""`fetch`: the gateway fetches URLs itself (POST /v1/fetch), through the SSRF guard.

Each URL is fetched on its own (in parallel), within `GATEWAY_FETCH_TIMEOUT` seconds for all of
its hops; redirects are followed by hand, at most 5, each hop checked again (scheme, port,
address, and the license's `urls` patterns when it has some); the body is streamed and
reading stops past `GATEWAY_FETCH_MAX_BYTES`. No cookies, credentials or client headers are
sent. One URL failing is an entry with an `error`, never a failed request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from django.conf import settings

from inference import ssrf
from inference.extract import ACCEPTED_TYPES, Unreadable, extract

from .base import Transport

logger = logging.getLogger("gateway")

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "inference-gateway-fetch/1.0"
# Extraction is CPU-bound (the GIL makes more threads useless) and must not take the default
# executor's threads, which are the database connection pool (gateway_site.db).
_EXTRACTORS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fetch-extract")
ACCEPT = "text/html,application/xhtml+xml,application/pdf,application/json,text/plain;q=0.9"


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
        return list(
            await asyncio.gather(
                *(self.fetch_page(url, max_characters, fmt, allowed) for url in urls)
            )
        )

    async def fetch_page(
        self, url: str, max_characters: int, fmt: str, allowed: Callable[[str], bool]
    ) -> FetchedPage:
        page = FetchedPage(url=url)
        gateway = settings.GATEWAY
        try:
            async with asyncio.timeout(gateway["FETCH_TIMEOUT"]):
                await self._fetch(page, allowed, gateway["FETCH_MAX_BYTES"], fmt)
        except ssrf.Refused as exc:
            page.error_code, page.error_message = exc.code, exc.message
        except TimeoutError:
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

    async def _fetch(self, page: FetchedPage, allowed, max_bytes: int, fmt: str) -> None:
        current = page.url
        for hop in range(MAX_REDIRECTS + 1):
            target = check_url(current)
            if hop and not allowed(str(target)):
                raise ssrf.Refused(
                    "redirect_not_allowed", "A redirect left the URLs this license may fetch"
                )
            request = self.http.build_request(
                "GET", target, headers={"User-Agent": USER_AGENT, "Accept": ACCEPT}
            )
            response = await self.http.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    current = _join(target, location)
                    continue
                page.final_url = str(target)
                await self._read(page, response, max_bytes, fmt)
                return
            finally:
                await response.aclose()
        raise ssrf.Refused("too_many_redirects", f"More than {MAX_REDIRECTS} redirects")

    async def _read(self, page: FetchedPage, response: httpx.Response, max_bytes: int, fmt):
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
        too_large = ssrf.Refused("too_large", f"The page is larger than {max_bytes} bytes")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():  # decoded: a compression bomb counts too
            size += len(chunk)
            if size > max_bytes:
                raise too_large
            chunks.append(chunk)
        try:
            title, content = await asyncio.get_running_loop().run_in_executor(
                _EXTRACTORS,
                extract,
                b"".join(chunks),
                content_type,
                response.charset_encoding,
                page.final_url,
                fmt,
            )
        except Unreadable as exc:
            raise ssrf.Refused("unreadable_content", str(exc)) from exc
        page.title, page.content, page.content_type = title, content, content_type
