"""`size` (`WxH` or `auto`) mapped onto what each image provider accepts."""

from __future__ import annotations

import math

DEFAULT_SIZE = "1024x1024"


def parse_size(size: str | None) -> tuple[int, int] | None:
    """(width, height), or None for `auto`/absent."""
    if not size or size == "auto":
        return None
    width, height = size.lower().split("x")
    return int(width), int(height)


def _ratio(value: str) -> float:
    if ":" in value:
        a, b = value.split(":")
    else:
        a, b = value.lower().split("x")
    return int(a) / int(b)


def nearest_aspect_ratio(size: str | None, choices: tuple[str, ...], default: str = "1:1") -> str:
    """The choice (`"16:9"` or `"1536x1024"`) whose aspect ratio is nearest (in log scale)."""
    parsed = parse_size(size)
    if parsed is None:
        return default
    wanted = math.log(parsed[0] / parsed[1])
    return min(choices, key=lambda c: abs(math.log(_ratio(c)) - wanted))


def nearest_size(size: str | None, choices: tuple[str, ...], default: str | None = None) -> str:
    """The listed `WxH` nearest in aspect ratio, then in pixel count."""
    parsed = parse_size(size)
    if parsed is None:
        return default or choices[0]
    wanted_ratio = math.log(parsed[0] / parsed[1])
    wanted_pixels = parsed[0] * parsed[1]

    def distance(choice: str) -> tuple[float, float]:
        size = parse_size(choice)
        assert size is not None, choice  # the listed choices are WxH
        w, h = size
        return (
            round(abs(math.log(w / h) - wanted_ratio), 6),
            abs(math.log((w * h) / wanted_pixels)),
        )

    return min(choices, key=distance)


def megapixels(size: str | None, images: int) -> float:
    parsed = parse_size(size) or parse_size(DEFAULT_SIZE)
    assert parsed is not None  # DEFAULT_SIZE is WxH
    return round(parsed[0] * parsed[1] * images / 1_000_000, 4)
