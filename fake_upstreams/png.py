"""Tiny, valid PNG files made with zlib and struct only.

The fakes answer image requests with real PNG bytes so the gateway's decoding,
storage and content-type handling meet the same bytes any PNG reader accepts.
The pictures are thumbnails: the longest side is at most ``MAX_SIDE`` pixels,
the requested aspect ratio is kept (so a test can tell 16:9 from 1:1), and the
colours come from a hash of the seed (same prompt, same picture).
"""

from __future__ import annotations

import hashlib
import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 16


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def thumbnail_size(width: float, height: float, max_side: int = MAX_SIDE) -> tuple[int, int]:
    """Scale (width, height) so the longest side is ``max_side``; keep at least 1 px."""
    if width <= 0 or height <= 0:
        return max_side, max_side
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def aspect_size(ratio: str | None, max_side: int = MAX_SIDE) -> tuple[int, int]:
    """Thumbnail size for an aspect ratio written "W:H" (anything unparsable: square)."""
    try:
        w, h = (float(part) for part in (ratio or "1:1").split(":"))
    except ValueError:
        w = h = 1.0
    return thumbnail_size(w, h, max_side)


def make_png(width: int = 8, height: int = 8, seed: bytes | str = b"") -> bytes:
    """An 8-bit RGB PNG whose colours are a gradient derived from ``seed``."""
    if isinstance(seed, str):
        seed = seed.encode("utf-8")
    digest = hashlib.sha256(seed).digest()
    r0, g0, b0, r1, g1, b1 = digest[:6]
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter type "None" for every scanline
        for x in range(width):
            t = (x + y) / max(1, width + height - 2)
            rows += bytes(
                (
                    int(r0 + (r1 - r0) * t) & 0xFF,
                    int(g0 + (g1 - g0) * t) & 0xFF,
                    int(b0 + (b1 - b0) * t) & 0xFF,
                )
            )
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        SIGNATURE
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + _chunk(b"IEND", b"")
    )


def read_png(data: bytes) -> dict:
    """Parse a PNG written by :func:`make_png` (or any non-interlaced 8-bit RGB PNG).

    Checks the signature and every chunk CRC, inflates IDAT and returns
    ``{"width", "height", "bit_depth", "color_type", "pixels"}`` (raw scanlines,
    filter bytes included). Raises ValueError on anything malformed; meant for
    tests that want to prove an image survived the trip through the gateway.
    """
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG: bad signature")
    pos = len(SIGNATURE)
    header = None
    idat = b""
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError("truncated chunk header")
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            raise ValueError(f"truncated {kind!r} chunk")
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        if crc != zlib.crc32(kind + body) & 0xFFFFFFFF:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, bit_depth, color_type = header[:4]
    pixels = zlib.decompress(idat)
    return {
        "width": width,
        "height": height,
        "bit_depth": bit_depth,
        "color_type": color_type,
        "pixels": pixels,
    }
