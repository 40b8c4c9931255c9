"""A small web site for the gateway's own fetcher (POST /v1/fetch): HTML, text, JSON, a PDF,
an image, error pages, redirects (to anywhere, including addresses the fetcher must refuse),
a trickling page, a huge page, gzip bombs, bodies in every Content-Encoding (good and broken)
and a PDF of many thousand pages. Served on 127.0.0.1 like every fake; the test
switch that lets the fetcher reach it opens only that loopback address.
"""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from typing import Any

from .server import FakeUpstream, RecordedRequest, Response

ARTICLE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Photosynthesis explained</title>
<meta name="description" content="How plants make food"></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | Menu item that is navigation</nav>
<article>
<h1>Photosynthesis explained</h1>
<p>Photosynthesis is the process by which green plants use <b>sunlight</b>, water and carbon
dioxide to make glucose and oxygen. It happens mainly in the leaves, inside chloroplasts.</p>
<h2>The two stages</h2>
<ul><li>The light-dependent reactions</li><li>The Calvin cycle</li></ul>
<p>Read more on <a href="https://en.wikipedia.org/wiki/Photosynthesis">the encyclopedia</a>.
Without photosynthesis there would be almost no oxygen in the atmosphere.</p>
</article>
<footer>Copyright footer text</footer>
<script>var tracking = "do not extract me";</script>
</body></html>
"""


def tiny_pdf(text: str) -> bytes:
    """A one-page PDF 1.4 whose page shows `text` in Helvetica (real xref offsets)."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = zlib.compress(f"BT /F1 18 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@functools.lru_cache(maxsize=4)
def gzip_bomb(mib: int) -> bytes:
    """One gzip member that inflates to `mib` MiB of zeros (1 GiB from ~1 MB), built in a
    fraction of a second: a deflate block run of 1 MiB of zeros ends on a full flush (byte
    aligned, no reference to what came before), so the same bytes can follow themselves."""
    zeros = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    run = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS).flush()  # an empty final block
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = crc.to_bytes(4, "little") + ((mib << 20) & 0xFFFFFFFF).to_bytes(4, "little")
    return header + run * mib + last + trailer


@functools.lru_cache(maxsize=4)
def _bomb_pieces(mib: int) -> tuple[bytes, ...]:
    body = gzip_bomb(mib)
    return tuple(body[i : i + 65536] for i in range(0, len(body), 65536))


@functools.lru_cache(maxsize=4)
def many_page_pdf(pages: int) -> bytes:
    """A PDF of `pages` pages (25,000 in under 4 MB) that all show one shared content stream
    of line drawings: no text, so only a page cap or a deadline stops an extractor."""
    stream = zlib.compress(b"0.5 w " + b"10 10 m 200 200 l S " * 200)
    first = 5
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        *[page] * pages,
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


ENCODED_TEXT = b"Encoded notes: the same words in every encoding.\n"


def encoded(kind: str) -> tuple[str, bytes]:
    """(Content-Encoding, body) of ENCODED_TEXT sent as `kind`."""
    packed = gzip.compress(ENCODED_TEXT)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return {
        "identity": ("identity", ENCODED_TEXT),
        "gzip": ("gzip", packed),
        "x-gzip": ("x-gzip", packed),
        "deflate": ("deflate", zlib.compress(ENCODED_TEXT)),
        "raw-deflate": ("deflate", raw.compress(ENCODED_TEXT) + raw.flush()),
        "two-members": (
            "gzip",
            gzip.compress(ENCODED_TEXT[:20]) + gzip.compress(ENCODED_TEXT[20:]),
        ),
        "truncated": ("gzip", packed[:-6]),
        "garbage": ("gzip", packed + b"<html>not gzip</html>"),
        "not-gzip": ("gzip", ENCODED_TEXT),
        "br": ("br", b"\x0b\x18\x80" + ENCODED_TEXT + b"\x03"),
        "zstd": ("zstd", b"\x28\xb5\x2f\xfd" + ENCODED_TEXT),
        "gzip-twice": ("gzip, gzip", gzip.compress(packed)),
    }[kind]


def _page(body: bytes, content_type: str, status: int = 200, **headers: str) -> Response:
    return Response(status, body, [("content-type", content_type), *headers.items()])


class WebsiteFake(FakeUpstream):
    """Knobs: ``huge_bytes`` (size of /huge), ``trickle_chunks`` (pieces of /trickle, sent
    ``chunk_delay`` seconds apart, without a Content-Length). A slow page is any page after
    ``hang_next``."""

    name = "website"
    base_path = ""
    ROUTES = [
        ("GET", r"/article\.html", "article"),
        ("GET", r"/notes\.txt", "notes"),
        ("GET", r"/data\.json", "data"),
        ("GET", r"/paper\.pdf", "paper"),
        ("GET", r"/broken\.pdf", "broken_pdf"),
        ("GET", r"/picture\.png", "picture"),
        ("GET", r"/missing", "missing"),
        ("GET", r"/redirect", "redirect"),
        ("GET", r"/chain/(?P<hops>\d+)", "chain"),
        ("GET", r"/set-cookie", "set_cookie"),
        ("GET", r"/echo", "echo"),
        ("GET", r"/trickle", "trickle"),
        ("GET", r"/huge", "huge"),
        ("GET", r"/bomb", "bomb"),
        ("GET", r"/encoded", "encoded"),
        ("GET", r"/pages\.pdf", "pages_pdf"),
    ]
    KNOBS = {"huge_bytes": 3 * 1024 * 1024, "trickle_chunks": 20}

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        text = f"<html><body><h1>{status}</h1><p>{message or 'Error'}</p></body></html>"
        return _page(text.encode(), "text/html; charset=utf-8", status)

    def article(self, request: RecordedRequest) -> Response:
        return _page(ARTICLE.encode(), "text/html; charset=utf-8")

    def notes(self, request: RecordedRequest) -> Response:
        return _page("Plain notes: caf\u00e9 \u2014 line one\nline two\n".encode(), "text/plain")

    def data(self, request: RecordedRequest) -> Response:
        body = json.dumps({"planet": "Mars", "moons": ["Phobos", "Deimos"]}).encode()
        return _page(body, "application/json")

    def paper(self, request: RecordedRequest) -> Response:
        return _page(tiny_pdf("Mitochondria are the powerhouse of the cell"), "application/pdf")

    def broken_pdf(self, request: RecordedRequest) -> Response:
        return _page(b"%PDF-1.4\nthis is not really a pdf", "application/pdf")

    def picture(self, request: RecordedRequest) -> Response:
        return _page(b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "image/png")

    def missing(self, request: RecordedRequest) -> Response:
        return self.error(404, "No such page")

    def redirect(self, request: RecordedRequest) -> Response:
        status = int(request.query.get("status", "302"))
        return _page(b"", "text/html", status, location=request.query.get("to", "/"))

    def chain(self, request: RecordedRequest, hops: str) -> Response:
        left = int(hops)
        target = f"/chain/{left - 1}" if left > 1 else "/article.html"
        return _page(b"", "text/html", 302, location=target)

    def set_cookie(self, request: RecordedRequest) -> Response:
        return Response(
            302,
            b"",
            [
                ("content-type", "text/html"),
                ("set-cookie", "session=secret-cookie; Path=/"),
                ("location", "/echo"),
            ],
        )

    def echo(self, request: RecordedRequest) -> Response:
        return _page(json.dumps({"headers": request.headers}).encode(), "application/json")

    def trickle(self, request: RecordedRequest) -> Response:
        size = int(request.query.get("size", "0"))  # bytes of filler per piece
        pieces = [b"<p>%d %s</p>" % (i, b"x" * size) for i in range(self.trickle_chunks)]
        return Response(200, headers=[("content-type", "text/html")], events=pieces)

    def huge(self, request: RecordedRequest) -> Response:
        line = b"<p>" + b"lorem ipsum " * 80 + b"</p>\n"
        body = line * (self.huge_bytes // len(line) + 1)
        return _page(b"<html><body>" + body + b"</body></html>", "text/html")

    def bomb(self, request: RecordedRequest) -> Response:
        # Sent in 64 KiB pieces (chunked), so that the server holds one piece per connection
        # while the client reads, not the whole megabyte: the test measures the gateway.
        pieces = _bomb_pieces(int(request.query.get("mib", "1024")))
        headers = [("content-type", "text/html"), ("content-encoding", "gzip")]
        return Response(200, headers=headers, events=list(pieces))

    def encoded(self, request: RecordedRequest) -> Response:
        coding, body = encoded(request.query.get("as", "gzip"))
        return _page(body, "text/plain; charset=utf-8", **{"content-encoding": coding})

    def pages_pdf(self, request: RecordedRequest) -> Response:
        return _page(many_page_pdf(int(request.query.get("pages", "25000"))), "application/pdf")
