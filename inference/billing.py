"""Micro-credits for a request, from the model's catalog cost structure and the usage.

1 USD of list price = 1,000,000 micro-credits; costs are computed in Decimal and rounded up
to a whole micro-credit per request (a zero cost stays zero).

Cost structures (catalog `cost`, shown to clients by GET /v1/models):
    {"type": "per_token", "prompt": p, "completion": c, "cached_prompt": k,
     "cache_write_prompt": w, "web_search_call": s}                            per token
    {"type": "per_image", "image": n}                                          per image
    {"type": "per_image_by_size", "sizes": {"1024x1024": n, ...}}
    {"type": "per_image_by_size_quality", "qualities": {"standard": {"1024x1024": n}, ...}}
    {"type": "per_call", "call": n}                                            per search call
    {"type": "per_page", "page": n}                                            per fetched page
A size missing from a table is billed at the next larger listed size (by pixel count), or the
largest one; a quality missing from a table at its most expensive quality.

A token-priced image model may carry, under `without_tokens`, a per-image table used when its
provider answers without token counts (the images are then billed, never free):
    {"type": "per_token", ..., "without_tokens":
        {"type": "per_image_by_size_quality", "scale": "megapixels", "qualities": {...}}}
With `"scale": "megapixels"` a size that is not listed is billed at the listed size nearest in
aspect ratio (then in pixels), scaled by the ratio of the pixel counts.

A token-priced model's `web_search_call` (catalog.models.HOSTED_SEARCH: the cost's key and the
Responses output item's type) is its provider's fee per search the hosted `web_search` tool of
/v1/responses makes (one `web_search_call` output item each; their count is `Usage.units`),
added to the tokens. A model without it is never sent the tool (inference.endpoints.responses),
so no search goes unbilled.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache

from catalog.models import HOSTED_SEARCH

from .imagesizes import nearest_size


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None  # of prompt_tokens: read from the provider's cache
    # Of prompt_tokens: written to the provider's cache (Anthropic, Bedrock bill them dearer).
    cache_write_tokens: int | None = None
    images: int | None = None
    megapixels: Decimal | None = None
    # For per-image tables: the size and quality the images were made at.
    size: str | None = None
    quality: str | None = None
    # Search calls made or pages fetched (the web_search and fetch services); for a per-token
    # model, the hosted web searches its provider made (HOSTED_SEARCH).
    units: int | None = None


_ZERO = Decimal(0)


def _d(value) -> Decimal:
    if value is None:
        return _ZERO
    try:
        return _decimal(value)
    except TypeError:  # unhashable (never in a catalog the admin checked): refused as before
        return Decimal(str(value))


# A request prices its reservation and its answer from the same few catalog prices (floats
# such as 0.15, or strings): each is converted once, not on every call (bench/README.md).
# `typed`: 1 and 1.0 stay apart, so a price converts exactly as it always did.
@lru_cache(maxsize=4096, typed=True)
def _decimal(value) -> Decimal:
    return Decimal(str(value))


def _pixels(size: str) -> int:
    try:
        width, height = size.lower().split("x")
        return int(width) * int(height)
    except ValueError:
        return 0


def _price_for_size(table: dict, size: str | None):
    if not table:
        return 0
    if size in table:
        return table[size]
    ordered = sorted(table.items(), key=lambda item: _pixels(item[0]))
    wanted = _pixels(size or "")
    for listed, price in ordered:
        if _pixels(listed) >= wanted:
            return price
    return ordered[-1][1]


def _price_scaled(table: dict, size: str | None) -> Decimal:
    """The listed price for `size`, or the nearest listed size's price scaled by pixels."""
    if not table:
        return Decimal(0)
    if size in table:
        return _d(table[size])
    wanted = _parse(size) or (1024, 1024)
    listed = nearest_size(f"{wanted[0]}x{wanted[1]}", tuple(table))
    width, height = _parse(listed) or wanted
    return _d(table[listed]) * Decimal(wanted[0] * wanted[1]) / Decimal(width * height)


def _parse(size: str | None) -> tuple[int, int] | None:
    try:
        width, height = (int(edge) for edge in (size or "").lower().split("x"))
    except ValueError:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _quality_table(cost: dict, quality: str | None) -> dict:
    qualities = cost.get("qualities", {})
    table = qualities.get(quality or "")
    if table is None:
        table = max(qualities.values(), key=lambda t: max(t.values()), default={})
    return table


def credits_for(cost: dict, usage: Usage) -> int:
    kind = cost.get("type", "per_token")
    if kind == "per_token" and usage.completion_tokens is None and usage.images:
        fallback = cost.get("without_tokens")
        if fallback is not None:
            return credits_for(fallback, usage)
    if kind == "per_token":
        prompt = usage.prompt_tokens or 0
        cached = min(usage.cached_tokens or 0, prompt) if "cached_prompt" in cost else 0
        written = 0
        if usage.cache_write_tokens and "cache_write_prompt" in cost:
            written = min(usage.cache_write_tokens, prompt - cached)
        total = (
            (prompt - cached - written) * _d(cost.get("prompt"))
            + cached * _d(cost.get("cached_prompt"))
            + written * _d(cost.get("cache_write_prompt"))
            + (usage.completion_tokens or 0) * _d(cost.get("completion"))
            + (usage.units or 0) * _d(cost.get(HOSTED_SEARCH))
        )
    elif kind == "per_image":
        total = (usage.images or 0) * _d(cost.get("image"))
    elif kind == "per_image_by_size":
        total = (usage.images or 0) * _d(_price_for_size(cost.get("sizes", {}), usage.size))
    elif kind == "per_image_by_size_quality":
        table = _quality_table(cost, usage.quality)
        if cost.get("scale") == "megapixels":
            price = _price_scaled(table, usage.size)
        else:
            price = _d(_price_for_size(table, usage.size))
        total = (usage.images or 0) * price
    elif kind in ("per_call", "per_page"):
        total = (usage.units or 0) * _d(cost.get("call" if kind == "per_call" else "page"))
    else:
        raise ValueError(f"unknown cost structure {kind!r}")
    return round_up(total)


def round_up(amount: Decimal) -> int:
    if amount <= 0:
        return 0
    return int(amount.to_integral_value(rounding=ROUND_CEILING))
