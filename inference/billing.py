"""Micro-credits for a request, from the model's catalog cost structure and the usage.

1 USD of list price = 1,000,000 micro-credits; costs are computed in Decimal and rounded up
to a whole micro-credit per request (a zero cost stays zero).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None
    images: int | None = None
    megapixels: Decimal | None = None


def _d(value) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


def credits_for(cost: dict, usage: Usage) -> int:
    kind = cost.get("type", "per_token")
    if kind == "per_token":
        prompt = usage.prompt_tokens or 0
        cached = min(usage.cached_tokens or 0, prompt) if "cached_prompt" in cost else 0
        total = (
            (prompt - cached) * _d(cost.get("prompt"))
            + cached * _d(cost.get("cached_prompt"))
            + (usage.completion_tokens or 0) * _d(cost.get("completion"))
        )
    else:
        raise ValueError(f"unknown cost structure {kind!r}")
    return round_up(total)


def round_up(amount: Decimal) -> int:
    if amount <= 0:
        return 0
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


__all__ = ["Usage", "credits_for", "round_up", "math"]
