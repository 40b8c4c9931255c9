"""Deterministic stand-ins for model output: vectors, token counts, ids.

Everything a test might compare is a pure function of the input, so the same
request always gets the same answer; ids and timestamps are the exception,
because real providers make those unique per call too.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import re
import secrets
import string
import struct
import time

_WORD = re.compile(r"\S+\s*")


def count_tokens(text: str | None) -> int:
    """The fakes' tokenizer: one token per whitespace-separated word ("" -> 0)."""
    return len(text.split()) if text else 0


def vector(text: str, dims: int, *, salt: str = "", normalize: bool = True) -> list[float]:
    """A ``dims``-long vector seeded from ``salt`` + ``text`` (unit length if ``normalize``)."""
    seed = int.from_bytes(hashlib.sha256(f"{salt}\x00{text}".encode()).digest()[:8], "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    if normalize:
        values = unit(values)
    return [round(v, 8) for v in values]


def unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def float32_base64(values: list[float]) -> str:
    """What OpenAI sends for ``encoding_format: "base64"``: little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def split_pieces(text: str, pieces: int = 4) -> list[str]:
    """Split ``text`` into at most ``pieces`` consecutive parts (whitespace kept)."""
    words = _WORD.findall(text)
    if not words:
        return [text] if text else []
    size = max(1, math.ceil(len(words) / pieces))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def split_chars(text: str, pieces: int = 4) -> list[str]:
    """Split ``text`` into at most ``pieces`` consecutive runs of characters."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / max(pieces, 1)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def truncate_words(text: str, limit: int) -> str:
    return "".join(_WORD.findall(text)[:limit]).rstrip()


def has_word(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text or "", re.IGNORECASE) is not None


def stable_int(text: str, bits: int = 32) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % (1 << bits)


def random_id(
    prefix: str, length: int = 24, alphabet: str = string.ascii_letters + string.digits
) -> str:
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def hex_id(prefix: str, nbytes: int = 24) -> str:
    return prefix + secrets.token_hex(nbytes)


def now() -> int:
    return int(time.time())
