"""Text a column can hold: the one definition every site that stores or queries a string reads.

PostgreSQL's text and jsonb columns refuse NUL (U+0000), and a lone UTF-16 surrogate
(U+D800-U+DFFF, e.g. `"\\ud800"` in JSON) is not Unicode, so no UTF-8 encoder (PostgreSQL's,
SQLite's, orjson's) takes it. A string holding either fails the statement it reaches: a 500, or a
whole group-committed batch lost. Each site keeps its own message, status and length limit; only
the predicate is here.
"""

from __future__ import annotations

import re
from typing import Any

# A regex search runs at C speed: the form for the hot path (X-Service-Metadata on /v1).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")


def is_storable_text(text: str) -> bool:
    """No NUL and no lone surrogate: a text column can hold it, a query can compare with it."""
    return UNSTORABLE.search(text) is None


def json_holds(value: Any, pattern: re.Pattern[str], max_depth: int | None = None) -> bool:
    """Whether a parsed JSON value has a string (an object's key or any value) `pattern` finds,
    or a value nested deeper than `max_depth` (the top value is at depth 0; None: no bound).
    Iterative: a deep document cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if max_depth is not None and depth > max_depth:
            return True
        if isinstance(item, str):
            if pattern.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend((part, depth + 1) for pair in item.items() for part in pair)
        elif isinstance(item, list):
            stack.extend((part, depth + 1) for part in item)
    return False


def is_storable_json(value: Any, max_depth: int | None = None) -> bool:
    """No NUL and no lone surrogate in any string of a parsed JSON value (jsonb refuses the
    first, UTF-8 the second), and, with `max_depth`, nothing nested deeper than that."""
    return not json_holds(value, UNSTORABLE, max_depth)
