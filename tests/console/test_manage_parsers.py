"""What the management API's JSON parser refuses before any serializer sees it
(licensing.console.manage_parsers._unstorable), without a server: each kind of value, keys as
well as values, and the depth limit. Through the API: tests/console/test_manage_hostile.py."""

from __future__ import annotations

import pytest

from licensing.console.manage_parsers import _first_unstorable, _unstorable, _unstorable_scalar

NUL = "NUL and lone surrogates are not accepted."
RANGE = "A number out of range."


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("text", None),
        ("a\x00b", NUL),
        ("\ud800", NUL),
        (True, None),
        (None, None),
        (2**63 - 1, None),
        (2**63, RANGE),
        (-(2**63) - 1, RANGE),
        (1.5, None),
        (float("inf"), RANGE),
        (float("nan"), RANGE),
    ],
)
def test_scalars(value, problem):
    assert _unstorable_scalar(value) == problem
    assert _unstorable(value, 0) == problem


def test_containers_are_searched_keys_and_values_in_order():
    assert _unstorable({"ok": [1, {"deep": "x"}]}, 1) is None
    assert _unstorable({"a\x00": 1}, 1) == NUL  # a key
    assert _unstorable({"a": [1, 2**64]}, 1) == RANGE
    assert _first_unstorable(["ok", 2**64, "\x00"], 1) == RANGE  # the first problem answers
    assert _first_unstorable([], 1) is None


def test_nesting_deeper_than_32_levels():
    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    # A top-level field is at depth 1 (StrictJSONParser.parse): 31 lists keep the scalar at 32.
    assert _unstorable(nested(31), 1) is None
    assert _unstorable(nested(32), 1) == "Nested deeper than 32 levels."
