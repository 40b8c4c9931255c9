"""JSON in and out of the API, hardened against hostile input.

In: `parse_json` is the strict body parser. Besides invalid JSON it refuses, as 422
`json_invalid` at the offending character offset, what no upstream or database can take:
nesting deeper than `MAX_DEPTH`, numbers Python or the providers cannot hold (an integer of more
than 4,300 digits, a float literal that overflows to infinity such as `1e400`) and lone UTF-16
surrogates (`"\\ud800"`: not Unicode, so not UTF-8).

Out: `dumps` is orjson (fast) with a fallback for what orjson refuses: integers beyond 64 bits
stay exact JSON numbers, lone surrogates become U+FFFD. A 422 can therefore echo any input.
"""

from __future__ import annotations

import json
import math
import re
from itertools import chain

import orjson
from django.http import HttpResponse

from .text import SURROGATE, json_holds

MAX_DEPTH = 64  # arrays/objects inside each other; a body deeper than this is json_invalid
MAX_INT_DIGITS = 4300  # Python's int/str conversion limit (sys.get_int_max_str_digits())

# Strings (unrolled: runs of plain characters match at C speed), brackets and numbers.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]|[\]}]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise ValueError("Number out of range")
    return value


def parse_json(text: str):
    """`json.loads` with the limits above; raises `json.JSONDecodeError` (with `.pos`)."""

    def reject_constant(name):
        raise json.JSONDecodeError(f"Invalid constant {name}", text, text.find(name))

    try:
        data = json.loads(text, parse_constant=reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        raise _problem(text) or json.JSONDecodeError(str(exc), text, 0) from exc
    # C-speed checks first: the Python walks below only run on bodies that may need them.
    if text.count("[") + text.count("{") > MAX_DEPTH and not _depth_within(data, MAX_DEPTH):
        raise _problem(text) or json.JSONDecodeError("Invalid body", text, 0)
    if not _orjson_writes(data) and json_holds(data, SURROGATE):
        raise _problem(text) or json.JSONDecodeError("Invalid body", text, 0)
    return data


def _depth_within(value, budget: int) -> bool:
    """`value` holds no more than `budget` levels of arrays/objects. Level by level, with the
    iteration in C (`map`, `chain`, `set`): most levels hold only scalars."""
    if type(value) not in _CONTAINERS:
        return True
    dicts, lists = ([value], []) if type(value) is dict else ([], [value])
    for _ in range(budget):
        children = list(
            chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists))
        )
        kinds = set(map(type, children))
        if dict not in kinds and list not in kinds:
            return True
        dicts = [child for child in children if type(child) is dict] if dict in kinds else []
        lists = [child for child in children if type(child) is list] if list in kinds else []
    return False


_CONTAINERS = (dict, list)


def _orjson_writes(data) -> bool:
    """orjson refuses lone surrogates (and integers beyond 64 bits), at C speed."""
    try:
        orjson.dumps(data)
    except TypeError:
        return False
    return True


def _problem(text: str) -> json.JSONDecodeError | None:
    """Where the first limit is broken (slow path: only after a body was found to break one)."""
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                message = f"Nesting deeper than {MAX_DEPTH} levels"
                return json.JSONDecodeError(message, text, match.start())
        elif token in "]}":
            depth -= 1
        else:
            problem = _scalar_problem(token, text, match.start())
            if problem is not None:
                return problem
    return None


def _scalar_problem(token: str, text: str, start: int) -> json.JSONDecodeError | None:
    """What is wrong with a string or number token at `start`: a lone surrogate, an integer
    of too many digits, a number out of range; None when it is fine."""
    if token.startswith('"'):
        offset = _surrogate_offset(token) if "\\u" in token else None
        if offset is None:
            return None
        return json.JSONDecodeError("Lone surrogate in string", text, start + offset)
    if re.fullmatch(r"-?\d+", token):
        if len(token.lstrip("-")) > MAX_INT_DIGITS:
            return json.JSONDecodeError("Number too large", text, start)
        return None
    if math.isinf(float(token)):
        return json.JSONDecodeError("Number out of range", text, start)
    return None


def _surrogate_offset(token: str) -> int | None:
    """Offset in a string token of its first `\\uD800`-`\\uDFFF` escape that is not half of
    a valid pair, or None."""
    for match in _SURROGATE_ESCAPE.finditer(token):
        lone = (match.group(1) and not match.group(2)) or match.group(3)
        if lone and not _escaped(token, match.start()):
            return match.start()
    return None


_SURROGATE_ESCAPE = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    r"|\\u([dD][c-fC-F][0-9a-fA-F]{2})"
)


def _escaped(token: str, index: int) -> bool:
    """The backslash at `index` is itself escaped (an odd run of backslashes before it)."""
    before = token[:index]
    return (len(before) - len(before.rstrip("\\"))) % 2 == 1


# --- out -----------------------------------------------------------------------------------------

INT_MIN, UINT_MAX = -(2**63), 2**64 - 1  # what orjson writes natively


def dumps(value) -> bytes:
    try:
        return orjson.dumps(value, default=str)
    except TypeError:
        return orjson.dumps(_printable(value), default=str)


def _printable(value):
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        if INT_MIN <= value <= UINT_MAX:
            return value
        return orjson.Fragment(str(value).encode())
    if isinstance(value, dict):
        return {_printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(item) for item in value]
    return SURROGATE.sub("\ufffd", str(value))


def json_invalid_item(exc: json.JSONDecodeError) -> dict:
    """The contract's 422 detail item for a body that is not JSON (loc: its character offset)."""
    return {
        "type": "json_invalid",
        "loc": ["body", exc.pos],
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": exc.msg},
    }


def json_response(body, status: int = 200) -> HttpResponse:
    """An answer of the API: `body` as `dumps` writes it."""
    return HttpResponse(dumps(body), status=status, content_type="application/json")
