"""Text out of a fetched page: HTML through trafilatura (main content, as markdown or plain
text), PDF through pypdf, text and JSON as they are. CPU-bound: call it from a worker thread.

Every extraction is bounded (`Limits`): a thread cannot be killed, so the work itself stops.
A PDF of more than `max_pages` pages is refused before its pages are read; the others are read
page by page and stop once `max_characters` characters are collected, past the URL's deadline,
or as soon as nobody waits for the answer any more (`stop`, set by the fetcher when its URL
timed out or its request went away). HTML is one call into trafilatura that cannot be
interrupted, so its input is cut instead (`HTML_MAX_BYTES`). A process pool with a kill was
not chosen: a process per extraction (or pickling each body across) costs more CPU on every
request than these checks, and the checks stop the work just as surely between two pages.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from dataclasses import dataclass, field

import pypdf
import trafilatura
from pypdf.errors import LimitReachedError

logger = logging.getLogger("gateway")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "application/json"})
PDF_TYPES = frozenset({"application/pdf"})
ACCEPTED_TYPES = HTML_TYPES | TEXT_TYPES | PDF_TYPES

# trafilatura takes ~0.5 s of CPU per MB of HTML (and its metadata pass ~3x that) in one call
# that nothing can stop: the main content is looked for in the first 2 MiB, which every
# ordinary page fits in, and the title and metadata in the first 256 KiB (the <head>).
HTML_MAX_BYTES = 2 * 1024 * 1024
METADATA_MAX_BYTES = 256 * 1024


class Unreadable(Exception):
    """The body does not hold what its content type says (a broken PDF, say)."""


class Stopped(Exception):
    """The extraction was abandoned: its URL's deadline passed or nobody waits for it."""


@dataclass(frozen=True)
class Limits:
    max_characters: int = 100_000
    max_pages: int = 1000
    deadline: float = float("inf")  # time.monotonic()
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        if self.stop.is_set() or time.monotonic() > self.deadline:
            raise Stopped


def extract(
    body: bytes, content_type: str, charset: str | None, url: str, fmt: str, limits: Limits
) -> tuple[str | None, str]:
    """(title, content) of a body whose content type is in ACCEPTED_TYPES."""
    limits.check()  # waited in the queue past its deadline: not started at all
    if content_type in HTML_TYPES:
        try:
            return _html(body, charset, url, fmt)
        except Exception as exc:  # lxml and trafilatura refuse some documents outright
            raise Unreadable("The page could not be converted") from exc
    if content_type in PDF_TYPES:
        return _pdf(body, limits)
    # No character takes more than 4 bytes in the charsets pages use: the rest is never shown.
    return None, _decode(body[: 4 * limits.max_characters], charset)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name in the header
        return body.decode("utf-8", errors="replace")


def _html(body: bytes, charset: str | None, url: str, fmt: str) -> tuple[str | None, str]:
    # Without a charset in the header, trafilatura detects it from the bytes. A cut in the
    # middle of a tag or character is repaired by lxml like any other broken page.
    head = body[:METADATA_MAX_BYTES]
    body = body[:HTML_MAX_BYTES]
    document = _decode(body, charset) if charset else body
    markdown = fmt == "markdown"
    content = trafilatura.extract(
        document,
        url=url,
        output_format="markdown" if markdown else "txt",
        include_links=markdown,
        include_formatting=markdown,
        include_images=False,
        include_tables=True,
        include_comments=False,
        favor_recall=True,
    )
    if not content:
        # Pages too short or too odd for main-content detection: all of their visible text.
        content = trafilatura.html2txt(document) or ""
    metadata = trafilatura.extract_metadata(_decode(head, charset) if charset else head)
    title = metadata.title if metadata is not None and metadata.title else None
    return title, content


def _pdf(body: bytes, limits: Limits) -> tuple[str | None, str]:
    texts: list[str] = []
    collected = 0
    too_many = Unreadable(f"The PDF has more than {limits.max_pages} pages")
    try:
        # pypdf reads the whole page tree before the first page (~80 us per page, and nothing
        # can stop it): its own limit refuses a tree past the cap before walking it all. The
        # tree's inner nodes are fewer than its pages, hence twice the page cap.
        with pypdf.apply_configuration(page_tree_maximum_entries=2 * limits.max_pages):
            reader = pypdf.PdfReader(io.BytesIO(body))
            if len(reader.pages) > limits.max_pages:
                raise too_many
            for page in reader.pages:
                if collected >= limits.max_characters:
                    break
                limits.check()
                text = (page.extract_text() or "").strip()
                if text:
                    texts.append(text)
                    collected += len(text) + 2
            info = reader.metadata
            title = str(info.title) if info is not None and info.title else None
    except (Stopped, Unreadable):
        raise
    except LimitReachedError as exc:
        raise too_many from exc
    except Exception as exc:  # pypdf raises many types on a damaged file
        raise Unreadable("The PDF could not be read") from exc
    return title, "\n\n".join(texts)
