"""Text out of a fetched page: HTML through trafilatura (main content, as markdown or plain
text), PDF through pypdf, text and JSON as they are. CPU-bound: call it from a worker thread.
"""

from __future__ import annotations

import io
import logging

import pypdf
import trafilatura

logger = logging.getLogger("gateway")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "application/json"})
PDF_TYPES = frozenset({"application/pdf"})
ACCEPTED_TYPES = HTML_TYPES | TEXT_TYPES | PDF_TYPES


class Unreadable(Exception):
    """The body does not hold what its content type says (a broken PDF, say)."""


def extract(
    body: bytes, content_type: str, charset: str | None, url: str, fmt: str
) -> tuple[str | None, str]:
    """(title, content) of a body whose content type is in ACCEPTED_TYPES."""
    if content_type in HTML_TYPES:
        try:
            return _html(body, charset, url, fmt)
        except Exception as exc:  # lxml and trafilatura refuse some documents outright
            raise Unreadable("The page could not be converted") from exc
    if content_type in PDF_TYPES:
        return _pdf(body)
    return None, _decode(body, charset)


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name in the header
        return body.decode("utf-8", errors="replace")


def _html(body: bytes, charset: str | None, url: str, fmt: str) -> tuple[str | None, str]:
    # Without a charset in the header, trafilatura detects it from the bytes.
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
    metadata = trafilatura.extract_metadata(document)
    title = metadata.title if metadata is not None and metadata.title else None
    return title, content


def _pdf(body: bytes) -> tuple[str | None, str]:
    try:
        reader = pypdf.PdfReader(io.BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = str(info.title) if info is not None and info.title else None
    except Exception as exc:  # pypdf raises many types on a damaged file
        raise Unreadable("The PDF could not be read") from exc
    return title, "\n\n".join(text.strip() for text in pages if text.strip())
