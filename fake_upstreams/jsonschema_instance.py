"""A JSON value valid against a JSON Schema, built deterministically (the simulator's
structured output and tool-call arguments).

One walk over the schema, always the same answer for the same schema and hint: every
property filled (OpenAI's strict mode requires them all), the first branch of a union that is
not ``null``, one array item unless the bounds say otherwise, bounded numbers inside their
bounds, formatted strings in their format. ``$ref`` to ``#/$defs/...``, ``#/definitions/...``
(what pydantic and zod emit) or any other pointer into the same document is followed; a
recursive schema is cut short past a depth, where unions pick ``null`` and arrays their
minimum. A ``pattern`` gets the first of a few simple candidates it matches, else a fixed
string that may not match. Anything the walker does not know (``not``, ``if``, ``contains``)
is ignored: the result is best effort for exotic schemas, never an exception.

``hint`` is text for the first free-form string (no format, pattern or enum), so a document
carries what the simulator would have said in plain text.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Past this depth a recursive schema is steered to its end (null branches, minimal arrays).
SOFT_DEPTH = 8
# Past this depth nothing more is built: a schema with no way out gets a null there.
HARD_DEPTH = 32
# Bounds on what a hostile schema can make the walker build: a schema that refers to itself
# several times over (`{"allOf": [{"$ref": "#"}, {"$ref": "#"}]}`) would otherwise grow
# exponentially with the depth.
MAX_ITEMS = 64
MAX_STRING = 4096
MAX_STEPS = 5000

_NOTHING = object()  # the `false` schema: no value is valid
_FREE = object()  # a schema that names no value of its own (no const, default or enum)
_FORMATS = {
    "date": "2024-01-15",
    "date-time": "2024-01-15T12:00:00Z",
    "time": "12:00:00Z",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "iri-reference": "https://example.com/",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "duration": "P1D",
    "regex": "^sample$",
    "json-pointer": "/sample",
}
_PATTERN_CANDIDATES = (
    "sample",
    "a",
    "A",
    "1",
    "abc",
    "ABC",
    "a1",
    "A1",
    "Sample",
    "sample-1",
    "sample_1",
    "sample text",
    "123",
    "2024-01-15",
    "12:00",
    "user@example.com",
    "https://example.com/",
    "+15550100",
    "",
)
_KINDS = ("object", "array", "string", "integer", "number", "boolean", "null")


def instance(schema: Any, hint: str | None = None) -> Any:
    """A value valid against ``schema`` (best effort, see the module docstring)."""
    walker = _Walker(schema, hint)
    value = walker.value(schema, "", 0, 0)
    return None if value is _NOTHING else value


class _Walker:
    def __init__(self, root: Any, hint: str | None):
        self.root = root
        self.hint = hint
        self.steps = 0

    def spent(self) -> bool:
        self.steps += 1
        return self.steps > MAX_STEPS

    # -- schema plumbing ------------------------------------------------------------------

    def resolve(self, schema: Any, depth: int) -> Any:
        """``schema`` with its ``$ref`` and ``allOf`` folded in (one dict, or a boolean)."""
        if not isinstance(schema, dict):
            return schema if isinstance(schema, bool) else {}
        if depth > HARD_DEPTH or self.spent():
            return schema
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.resolve(self.pointer(ref), depth + 1)
            if target is False:
                return False
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = _merge(target if isinstance(target, dict) else {}, siblings)
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                part = self.resolve(part, depth + 1)
                if part is False:
                    return False
                if isinstance(part, dict):
                    merged = _merge(merged, part)
            schema = merged
        return schema

    def pointer(self, ref: str) -> Any:
        """The part of the root document a local ``$ref`` names; ``{}`` for anything else."""
        if not ref.startswith("#"):
            return {}
        node = self.root
        for token in ref[1:].split("/")[1:] if ref != "#" else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return {}
        return node

    # -- values ---------------------------------------------------------------------------

    def value(self, schema: Any, key: str, depth: int, variant: int) -> Any:
        if depth > HARD_DEPTH or self.spent():
            return None
        schema = self.resolve(schema, depth)
        if schema is False:
            return _NOTHING
        if schema is True:
            schema = {}
        fixed = _fixed(schema, variant)
        if fixed is not _FREE:
            return fixed
        for union in ("anyOf", "oneOf"):
            branches = schema.get(union)
            if isinstance(branches, list) and branches:
                return self.union(schema, union, branches, key, depth, variant)
        return self.typed(schema, key, depth, variant)

    def union(
        self, schema: dict, union: str, branches: list, key: str, depth: int, variant: int
    ) -> Any:
        """The value of one branch of an ``anyOf`` / ``oneOf``, the schema's other keys kept."""
        branch = self.pick_branch(branches, depth)
        rest = {k: v for k, v in schema.items() if k != union}
        resolved = self.resolve(branch, depth + 1)
        if resolved is False:
            return _NOTHING
        return self.value(_merge(rest, resolved or {}), key, depth + 1, variant)

    def typed(self, schema: dict, key: str, depth: int, variant: int) -> Any:
        """The value of the schema's type, declared or guessed from its keywords."""
        kind = self.kind(schema, depth)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, key, depth)
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer", variant)
        if kind == "boolean":
            return variant % 2 == 0
        if kind == "null":
            return None
        return self.string(schema, key, variant)

    def pick_branch(self, branches: list, depth: int) -> Any:
        """The first branch that is not ``null`` (or, deep in a recursion, the ``null`` one)."""
        kinds = [self.kind(self.resolve(b, depth + 1), depth) for b in branches]
        if depth >= SOFT_DEPTH and "null" in kinds:
            return branches[kinds.index("null")]
        for branch, kind in zip(branches, kinds, strict=True):
            if kind != "null" and self.resolve(branch, depth + 1) is not False:
                return branch
        return branches[0]

    def kind(self, schema: Any, depth: int) -> str:
        if not isinstance(schema, dict):
            return "string" if schema is not False else "null"
        declared = schema.get("type")
        if isinstance(declared, list):
            kinds = [k for k in declared if k in _KINDS]
            if depth >= SOFT_DEPTH and "null" in kinds:
                return "null"
            non_null = [k for k in kinds if k != "null"]
            return (non_null or kinds or ["string"])[0]
        if declared in _KINDS:
            return declared
        if "const" in schema or "enum" in schema:
            return "string"  # not reached by value(); only a branch's guess
        if any(k in schema for k in ("properties", "required", "additionalProperties")):
            return "object"
        if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems")):
            return "array"
        if any(k in schema for k in ("minimum", "maximum", "multipleOf")):
            return "number"
        return "string"

    def object(self, schema: dict, depth: int) -> dict:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        extra = schema.get("additionalProperties", True)
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if depth >= SOFT_DEPTH and name not in required:
                continue  # an optional branch of a recursion: leave it out
            value = self.value(sub, name, depth + 1, 0)
            if value is not _NOTHING:
                out[name] = value
        # A required name with no declared property takes the additional-property schema.
        missing = [r for r in required if r not in out]
        minimum = _count(schema.get("minProperties"))
        index = 0
        while extra is not False and (missing or len(out) < minimum) and len(out) < MAX_ITEMS:
            index += 1
            name = missing.pop(0) if missing else f"key{index}"
            if name in out:
                continue
            value = self.value(extra, name, depth + 1, index - 1)
            if value is _NOTHING:
                break
            out[name] = value
        maximum = schema.get("maxProperties")
        if isinstance(maximum, int) and not isinstance(maximum, bool) and len(out) > maximum:
            keep = [k for k in out if k in required] + [k for k in out if k not in required]
            out = {k: out[k] for k in keep[: max(maximum, 0)]}
        return out

    def array(self, schema: dict, key: str, depth: int) -> list:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # the tuple form of drafts before 2020-12
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        low = _count(schema.get("minItems"))
        high = schema.get("maxItems")
        high = high if isinstance(high, int) and not isinstance(high, bool) else None
        count = max(low, 1 if depth < SOFT_DEPTH else 0)
        if items is False:
            count = min(max(count, len(prefix)), len(prefix))
        if high is not None:
            count = min(count, max(high, 0))
        count = min(max(count, low if depth < SOFT_DEPTH else 0), MAX_ITEMS)
        unique = schema.get("uniqueItems") is True
        out = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            value = self.value(sub, key, depth + 1, i if unique else 0)
            if value is _NOTHING:
                break
            out.append(value)
        return out

    def string(self, schema: dict, key: str, variant: int) -> str:
        low = min(_count(schema.get("minLength")), MAX_STRING)
        high = schema.get("maxLength")
        high = high if isinstance(high, int) and not isinstance(high, bool) else None
        fmt = schema.get("format")
        pattern = schema.get("pattern")
        if fmt == "uuid":
            return str(uuid.uuid5(uuid.NAMESPACE_URL, f"simulator/{key}/{variant}"))
        if fmt == "date" and variant:
            return f"2024-01-{15 + variant % 14:02d}"
        if fmt == "email" and variant:
            return f"user{variant}@example.com"
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _fit_length(_FORMATS[fmt], low, high)
        if isinstance(pattern, str):
            return _pattern_string(pattern, low, high, variant)
        if self.hint is not None:
            text, self.hint = self.hint, None
        else:
            text = f"sample {key}".strip() if key else "sample"
        if variant:
            text = f"{text} {variant + 1}"
        return _fit_length(text, low, high)


# --------------------------------------------------------------------------- helpers


def _merge(base: dict, extra: dict) -> dict:
    """Both schemas' constraints in one dict: properties and required are joined, the rest of
    ``extra`` fills what ``base`` leaves unset."""
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(value, dict):
            mine = merged.get("properties")
            merged[key] = {**value, **mine} if isinstance(mine, dict) else value
        elif key == "required" and isinstance(value, list):
            mine = merged.get("required")
            mine = mine if isinstance(mine, list) else []
            merged[key] = mine + [r for r in value if r not in mine]
        elif key not in merged:
            merged[key] = value
    return merged


def _fixed(schema: dict, variant: int) -> Any:
    """The value the schema names itself (``const``, ``default``, an ``enum`` member), else
    ``_FREE``."""
    if "const" in schema:
        return schema["const"]
    if "default" in schema and variant == 0:
        return schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[variant % len(enum)]
    return _FREE


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _fit_length(text: str, low: int, high: int | None) -> str:
    if high is not None and len(text) > high:
        text = text[: max(high, 0)]
    if len(text) < low:
        text += "x" * (low - len(text))
    return text


def _pattern_string(pattern: str, low: int, high: int | None, variant: int) -> str:
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return _fit_length("sample", low, high)
    fits = []
    for candidate in _PATTERN_CANDIDATES:
        if len(candidate) < low or (high is not None and len(candidate) > high):
            continue
        if compiled.search(candidate):
            fits.append(candidate)
    if fits:
        return fits[variant % len(fits)]
    return _fit_length("sample", low, high)


def _number(schema: dict, integer: bool, variant: int) -> int | float:
    """A number inside the schema's bounds, a multiple of its ``multipleOf``; 1 when free."""
    bounds = _Bounds.of(schema, integer)
    found: list[int | float] = []
    bounds.add_fitting(found, _number_candidates(bounds))
    if not found:
        return 1 if integer else 1.5
    # More distinct values for the later items of a uniqueItems array.
    base = found[0]
    bounds.add_fitting(found, (base + d for i in range(1, variant + 1) for d in bounds.steps(i)))
    return found[variant % len(found)]


@dataclass(frozen=True)
class _Bounds:
    """What a number schema allows: its bounds, inclusive or not, and its ``multipleOf``."""

    integer: bool
    minimum: int | float | None
    maximum: int | float | None
    ex_min: int | float | None
    ex_max: int | float | None
    step: int | float | None

    @classmethod
    def of(cls, schema: dict, integer: bool) -> _Bounds:
        minimum, maximum = _real(schema.get("minimum")), _real(schema.get("maximum"))
        ex_min, ex_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        # Draft 4 spells exclusivity as a boolean beside minimum / maximum.
        if ex_min is True:
            ex_min, minimum = minimum, None
        if ex_max is True:
            ex_max, maximum = maximum, None
        step = _real(schema.get("multipleOf"))
        step = step if step is not None and step > 0 else None
        return cls(integer, minimum, maximum, _real(ex_min), _real(ex_max), step)

    @property
    def low(self) -> int | float | None:
        return max((b for b in (self.minimum, self.ex_min) if b is not None), default=None)

    @property
    def high(self) -> int | float | None:
        return min((b for b in (self.maximum, self.ex_max) if b is not None), default=None)

    def steps(self, i: int) -> tuple[int | float, int | float]:
        """The offsets ``i`` steps either side of a value."""
        return (i, -i) if self.step is None else (i * self.step, -i * self.step)

    def fits(self, v: int | float) -> bool:
        try:
            if not math.isfinite(v) or (self.integer and v != int(v)):
                return False
            if self.minimum is not None and v < self.minimum:
                return False
            if self.maximum is not None and v > self.maximum:
                return False
            if self.ex_min is not None and v <= self.ex_min:
                return False
            if self.ex_max is not None and v >= self.ex_max:
                return False
            return self.step is None or _multiple_of(v, self.step)
        except (OverflowError, ValueError, ZeroDivisionError):
            return False

    def add_fitting(self, found: list[int | float], raws: Iterable[int | float]) -> None:
        """Append to ``found`` each of ``raws``, as written, that fits and is not there yet."""
        for raw in raws:
            for value in _as_integral(raw, self.integer):
                if self.fits(value) and value not in found:
                    found.append(value)


def _number_candidates(bounds: _Bounds) -> list[int | float]:
    """Numbers worth trying, in order: small ones, each bound and its neighbours, the middle."""
    low, high = bounds.low, bounds.high
    candidates: list[int | float] = [1, 0] if bounds.integer else [1.5, 1, 0]
    for bound in (low, high):
        if bound is not None:
            candidates += [bound, bound + 1, bound - 1, bound + 0.5, bound - 0.5]
    if low is not None and high is not None:
        candidates.append((low + high) / 2)
    if bounds.step is not None:
        candidates += _step_candidates(low, high, bounds.step)
    return candidates


def _step_candidates(
    low: int | float | None, high: int | float | None, step: int | float
) -> list[int | float]:
    """Multiples of ``step`` next to the lower bound (or 1) and the upper one."""
    start = low if low is not None else (high if high is not None else 1)
    candidates: list[int | float] = []
    for bound in (start, high):
        if bound is None:
            continue
        try:
            k = math.ceil(bound / step)
        except (OverflowError, ValueError, ZeroDivisionError):
            continue
        candidates += [k * step, (k + 1) * step, (k - 1) * step, k]
    return candidates


def _as_integral(value: int | float, integer: bool) -> list[int | float]:
    """``value`` as the walker would write it: an int when it is integral (or must be)."""
    try:
        if not math.isfinite(value):
            return []
        if integer:
            return [math.ceil(value), math.floor(value)] if value != int(value) else [int(value)]
        return [int(value)] if value == int(value) and abs(value) < 2**53 else [value]
    except (OverflowError, ValueError):
        return []


def _multiple_of(value: int | float, step: int | float) -> bool:
    # As the `jsonschema` package checks it: exact for integers, a float quotient otherwise.
    if isinstance(step, float):
        quotient = value / step
        return math.isfinite(quotient) and int(quotient) == quotient
    return value % step == 0


def _real(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if not isinstance(value, float) or math.isfinite(value) else None
