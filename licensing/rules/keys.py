"""The rule keys of a policy document's parameter rules, one class each, in one table (`RULES`).

A parameter rule (`"params": {"temperature": {"min": 0, "max": 1}}`) is a set of rule keys. Each
key's class says everything the gateway does with it:
- `compile`: its value in a policy document checked (`PolicyDocumentError` naming the path) and
  turned into what the check uses;
- `bind`: the check of a request value, bound to the rule's compiled values once, so the request
  path runs a tuple of bound checks and looks nothing up;
- `widenings`: why an overlay's value (a course's) is wider than the base's (the license type's);
- `intersect`: the value in force when the base and an overlay both write the key.

`policy.py` (compilation, `Rule.check`) and `overlay.py` (`overlay_widenings`,
`effective_policy`) are loops over `RULES`, in its order: the order of the checks (the first
broken rule answers) and of the reasons. A new key is a new class here and its line in `RULES`
(docs/extending.md, "A new policy rule"); tests/rules/test_rule_keys.py fails until it has its
example and every part. The 403 messages are docs/policy.md's "Rule keys and the exact 403
answers".
"""

from __future__ import annotations

import copy
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from core.errors import PolicyDenied

# A bound check: (the field's name as the client sent it, its value, the value as a list of
# scalars: the value itself when it is a list). Raises PolicyDenied.
Check = Callable[[str, Any, list], None]


class PolicyDocumentError(ValueError):
    """The document cannot be saved (admin) or evaluated (API: 503)."""


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# `intersect`'s base when the base does not write the key.
MISSING: Any = _Marker("MISSING")
# `intersect`'s answer when no value can pass both: the parameter is then forbidden.
IMPOSSIBLE: Any = _Marker("IMPOSSIBLE")


def fmt(value: Any) -> str:
    """A value in a 403 message: booleans as JSON writes them, the rest as Python prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def show(value: Any) -> str:
    """A value as a person reads it in an overlay's reason: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return f"'{value}'"
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def freeze(value: Any) -> Any:
    """A hashable stand-in with Python's equality (1 == 1.0 == True, as the checks compare)."""
    if isinstance(value, list):
        return ("list", tuple(freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, freeze(v)) for k, v in value.items()))
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _denied(message: str, field_name: str) -> PolicyDenied:
    return PolicyDenied(message, param=field_name)


def _non_empty_list(value: Any, where: str) -> tuple:
    if not isinstance(value, list) or not value:
        raise PolicyDocumentError(f"{where}: must be a non-empty list")
    return tuple(value)


def _whole_number(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PolicyDocumentError(f"{where}: must be a whole number >= 0")
    return value


class RuleKey(ABC):
    """One rule key. `name` is how documents write it; `unset` is what `Rule.<name>` reads on a
    rule that does not write it."""

    name: ClassVar[str]
    unset: ClassVar[Any] = None
    # Whether `intersect` of two values passes exactly what both pass, so that two rules on one
    # parameter can be merged into one (licensing.rules.scopes.conjoin); False for `patterns`.
    conjoins: ClassVar[bool] = True

    @abstractmethod
    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> Any:
        """The value as `bind` uses it, or PolicyDocumentError. `where` is the rule's path
        (`services.<s>.params.<p>`); `earlier` the compiled values of the keys before this one."""

    @abstractmethod
    def bind(self, values: Mapping[str, Any]) -> Check | None:
        """The check of a rule with these compiled values (this key among them); None when there
        is nothing to check (`forbidden: false`, or a key another key checks with it)."""

    @abstractmethod
    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        """Why the overlay's value is wider than the base's (both written), one reason each.
        `where` is the key's path."""

    @abstractmethod
    def intersect(self, base: Any, mine: Any) -> Any:
        """The value in force when an overlay writes `mine` over `base` (MISSING when the base
        does not write the key), or IMPOSSIBLE. Copies what it keeps of `mine`."""

    def contradicts(self, rule: Mapping[str, Any]) -> bool:
        """Whether the intersected rule's values cannot all hold (then the parameter is
        forbidden). Most keys hold alone."""
        return False


class Forbidden(RuleKey):
    name = "forbidden"
    unset = False

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> bool:
        if not isinstance(value, bool):
            raise PolicyDocumentError(f"{where}.forbidden: must be true or false")
        return value

    def bind(self, values: Mapping[str, Any]) -> Check | None:
        if not values["forbidden"]:
            return None

        def check(field_name: str, value: Any, scalars: list) -> None:
            raise _denied(f"parameter '{field_name}' is not permitted for this license", field_name)

        return check

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        if mine is False and base is True:
            return [f"{where}: the license type forbids this parameter"]
        return []

    def intersect(self, base: Any, mine: Any) -> Any:
        # `false` is kept (a rule is never empty); the base's `true` wins.
        return base is True or mine


class Fixed(RuleKey):
    name = "fixed"

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> Any:
        return value

    def bind(self, values: Mapping[str, Any]) -> Check:
        fixed = values["fixed"]
        text = fmt(fixed)

        def check(field_name: str, value: Any, scalars: list) -> None:
            if value != fixed:
                raise _denied(f"'{field_name}' must be '{text}'", field_name)

        return check

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        if freeze(mine) != freeze(base):
            return [f"{where}: {show(mine)} differs from the license type's {show(base)}"]
        return []

    def intersect(self, base: Any, mine: Any) -> Any:
        if base is not MISSING and freeze(base) != freeze(mine):
            return IMPOSSIBLE
        return copy.deepcopy(mine)


class _ValueList(RuleKey):
    """A key whose value is a non-empty list of values (`allowed`, `excluded`)."""

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> tuple:
        return _non_empty_list(value, f"{where}.{self.name}")


def _outside(values: Any, among: Any) -> list:
    """The values (in order) that are not among `among`, compared frozen (lists, dicts)."""
    kept = {freeze(v) for v in among}
    return [v for v in values if freeze(v) not in kept]


class Allowed(_ValueList):
    name = "allowed"

    def bind(self, values: Mapping[str, Any]) -> Check:
        allowed = values["allowed"]
        text = ", ".join(fmt(v) for v in allowed)

        def check(field_name: str, value: Any, scalars: list) -> None:
            if any(v not in allowed for v in scalars):
                raise _denied(f"'{field_name}' must be one of: [{text}]", field_name)

        return check

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        return [
            f"{where}: {show(v)} is not among the license type's allowed values"
            for v in _outside(mine, base)
        ]

    def intersect(self, base: Any, mine: Any) -> Any:
        if base is MISSING:
            return copy.deepcopy(mine)
        keep = {freeze(v) for v in base}
        values = [copy.deepcopy(v) for v in mine if freeze(v) in keep]
        return values or IMPOSSIBLE


class Excluded(_ValueList):
    name = "excluded"

    def bind(self, values: Mapping[str, Any]) -> Check:
        excluded = values["excluded"]

        def check(field_name: str, value: Any, scalars: list) -> None:
            for v in scalars:
                if v in excluded:
                    raise _denied(
                        f"'{field_name}' value '{fmt(v)}' is not permitted for this license",
                        field_name,
                    )

        return check

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        return [
            f"{where}: {show(v)} is excluded by the license type and must stay excluded"
            for v in _outside(base, mine)
        ]

    def intersect(self, base: Any, mine: Any) -> Any:
        values = [] if base is MISSING else list(base)
        seen = {freeze(v) for v in values}
        for value in mine:
            if freeze(value) not in seen:
                values.append(copy.deepcopy(value))
                seen.add(freeze(value))
        return values


def _range_check(low: float | None, high: float | None) -> Check:
    """`min` and `max` are one check: its message names both when both are written."""
    if low is not None and high is not None:
        suffix = f" must be between {fmt(low)} and {fmt(high)}"
    elif high is not None:
        suffix = f" must be <= {fmt(high)}"
    else:
        suffix = f" must be >= {fmt(low)}"

    def check(field_name: str, value: Any, scalars: list) -> None:
        for v in scalars:
            if is_number(v) and ((low is not None and v < low) or (high is not None and v > high)):
                raise _denied(f"'{field_name}'{suffix}", field_name)

    return check


def _number(value: Any, where: str) -> float:
    if not is_number(value):
        raise PolicyDocumentError(f"{where}: must be a number")
    return value


class Min(RuleKey):
    name = "min"
    side = "low"  # the bound it sets (the policy form's field range)

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> float:
        return _number(value, f"{where}.min")

    def bind(self, values: Mapping[str, Any]) -> Check:
        return _range_check(values["min"], values.get("max"))

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        if mine < base:
            return [f"{where}: {show(mine)} is below the license type's {show(base)}"]
        return []

    def intersect(self, base: Any, mine: Any) -> Any:
        return mine if base is MISSING else max(mine, base)


class _UpperBound(RuleKey):
    """A key whose smaller value is narrower."""

    side = "high"

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        if mine > base:
            return [f"{where}: {show(mine)} is above the license type's {show(base)}"]
        return []

    def intersect(self, base: Any, mine: Any) -> Any:
        return mine if base is MISSING else min(mine, base)


class Max(_UpperBound):
    name = "max"

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> float:
        value = _number(value, f"{where}.max")
        if "min" in earlier and earlier["min"] > value:
            raise PolicyDocumentError(f"{where}: min is greater than max")
        return value

    def bind(self, values: Mapping[str, Any]) -> Check | None:
        if "min" in values:
            return None  # Min's range check covers both
        return _range_check(None, values["max"])

    def contradicts(self, rule: Mapping[str, Any]) -> bool:
        return "min" in rule and "max" in rule and rule["min"] > rule["max"]


class MaxLength(_UpperBound):
    name = "max_length"

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> int:
        return _whole_number(value, f"{where}.max_length")

    def bind(self, values: Mapping[str, Any]) -> Check:
        limit = values["max_length"]

        def check(field_name: str, value: Any, scalars: list) -> None:
            for v in scalars:
                if isinstance(v, str) and len(v) > limit:
                    raise _denied(f"'{field_name}' exceeds maximum length of {limit}", field_name)

        return check


class MaxItems(_UpperBound):
    name = "max_items"

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> int:
        return _whole_number(value, f"{where}.max_items")

    def bind(self, values: Mapping[str, Any]) -> Check:
        limit = values["max_items"]

        def check(field_name: str, value: Any, scalars: list) -> None:
            count = len(value) if isinstance(value, list | dict) else 1
            if count > limit:
                raise _denied(f"'{field_name}' exceeds maximum item count of {limit}", field_name)

        return check


class Patterns(RuleKey):
    name = "patterns"
    conjoins = False  # two lists of alternatives intersect to no list of regexes

    def compile(self, value: Any, where: str, earlier: Mapping[str, Any]) -> tuple:
        where = f"{where}.patterns"
        if not isinstance(value, list) or not value:
            raise PolicyDocumentError(f"{where}: must be a non-empty list of regexes")
        return tuple(_regex(pattern, where) for pattern in value)

    def bind(self, values: Mapping[str, Any]) -> Check:
        patterns = values["patterns"]

        def check(field_name: str, value: Any, scalars: list) -> None:
            for v in scalars:
                if isinstance(v, str) and not any(p.fullmatch(v) for p in patterns):
                    raise _denied(
                        f"'{field_name}' value '{v}' does not match any allowed pattern",
                        field_name,
                    )

        return check

    def widenings(self, where: str, base: Any, mine: Any) -> list[str]:
        return [
            f"{where}: {show(p)} is not among the license type's patterns"
            for p in mine
            if p not in base
        ]

    def intersect(self, base: Any, mine: Any) -> Any:
        if base is MISSING:
            return list(mine)
        # A regex intersection is not a list of regexes: keep the base's patterns the overlay
        # also lists (exact when the overlay only narrows, narrower otherwise).
        return [p for p in mine if p in base] or IMPOSSIBLE


def _regex(pattern: Any, where: str) -> re.Pattern:
    if not isinstance(pattern, str):
        raise PolicyDocumentError(f"{where}: every pattern must be a string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise PolicyDocumentError(f"{where}: {pattern!r}: {exc}") from exc


# The table, in the order of the checks (the first broken key answers) and of the reasons.
RULES: dict[str, RuleKey] = {
    key.name: key
    for key in (
        Forbidden(),
        Fixed(),
        Allowed(),
        Excluded(),
        Min(),
        Max(),
        MaxLength(),
        MaxItems(),
        Patterns(),
    )
}
