"""Policy overlays: a document that may only narrow a base policy (a course's rules under its
license type's; docs/policy.md, "Overlays").

An overlay has the policy document's format and these meanings:
- `services` lists the services it KEEPS: a base service the overlay leaves out is off (so
  "all services off" is `{"services": {}}`), and a service the base does not enable is a widening.
- Inside a kept service the overlay writes only what it changes: a parameter it does not name
  keeps the base's rule, and a rule key it does not write keeps the base's value. `providers`
  left out keeps the base's providers.
- A rule key the overlay writes must be at least as narrow as the base's value for it:
  `min` >=, `max` <=, `max_length`/`max_items` <=, `allowed` a subset (any values when the base has
  none), `excluded` a superset, `patterns` a subset of the base's patterns (patterns are
  alternatives: fewer is narrower), `fixed` the base's value when the base fixes one,
  `forbidden: false` not where the base forbids; `providers` a subset. `limits` (fair use) <=,
  `routing.connection_tags` a superset.

`effective_policy` intersects whatever it is given, so even an overlay with widenings never lets
through a request the base refuses; `overlay_widenings` says what an overlay writes that would not
take effect, so that saving it can be refused with the reasons.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from .policy import LIMIT_KEYS, LIMIT_SCOPES, PolicyDocumentError, validate_policy_document


def _fmt(value: Any) -> str:
    """A value as a person reads it in a reason: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return f"'{value}'"
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _freeze(value: Any) -> Any:
    """A hashable stand-in with Python's equality (1 == 1.0 == True, as Rule.check compares)."""
    if isinstance(value, list):
        return ("list", tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _freeze(v)) for k, v in value.items()))
    return value


MAX_DEPTH = 32


def _check_values(document: Any, where: str) -> None:
    """NaN never compares, and an infinite bound is no bound a person meant; a value nested
    deeper than any request field would be is refused before anything recurses into it."""
    stack = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PolicyDocumentError(f"{where}: values nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, float) and not math.isfinite(value):
            raise PolicyDocumentError(f"{where}: numbers must be finite")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _checked(document: Any, where: str) -> dict:
    try:
        validate_policy_document(document)
    except PolicyDocumentError as exc:
        raise PolicyDocumentError(f"{where}: {exc}") from exc
    except (RecursionError, TypeError, OverflowError) as exc:  # absurd nesting or values
        raise PolicyDocumentError(f"{where}: not a policy document ({type(exc).__name__})") from exc
    _check_values(document, where)
    return document


def _services(document: dict) -> dict[str, dict]:
    return {name: config or {} for name, config in (document.get("services") or {}).items()}


def overlay_widenings(base: dict, overlay: dict) -> list[str]:
    """Every way the overlay would allow what the base does not, one readable reason each;
    empty when it only narrows. PolicyDocumentError when either is not a valid document."""
    _checked(base, "license type's policy")
    _checked(overlay, "overlay")
    reasons: list[str] = []
    base_services = _services(base)
    for service, config in _services(overlay).items():
        where = f"services.{service}"
        if service not in base_services:
            reasons.append(f"{where}: not enabled by the license type")
            continue
        base_config = base_services[service]
        base_providers = base_config.get("providers")
        providers = config.get("providers")
        if providers is not None and base_providers is not None:
            for slug in providers:
                if slug not in base_providers:
                    reasons.append(
                        f"{where}.providers: '{slug}' is not allowed by the license type"
                    )
        base_params = base_config.get("params") or {}
        for name, rule in (config.get("params") or {}).items():
            reasons.extend(_rule_widenings(f"{where}.params.{name}", base_params.get(name), rule))
    reasons.extend(_limits_widenings(base.get("limits"), overlay.get("limits")))
    base_tags = set((base.get("routing") or {}).get("connection_tags") or ())
    if overlay.get("routing") is not None:
        tags = set((overlay.get("routing") or {}).get("connection_tags") or ())
        for tag in sorted(base_tags - tags):
            reasons.append(
                f"routing.connection_tags: '{tag}' is required by the license type and missing"
            )
    return reasons


def _rule_widenings(where: str, base: dict | None, rule: dict) -> list[str]:
    base = base or {}
    reasons = []
    if rule.get("forbidden") is False and base.get("forbidden") is True:
        reasons.append(f"{where}.forbidden: the license type forbids this parameter")
    if "fixed" in rule and "fixed" in base and _freeze(rule["fixed"]) != _freeze(base["fixed"]):
        reasons.append(
            f"{where}.fixed: {_fmt(rule['fixed'])} differs from the license type's "
            f"{_fmt(base['fixed'])}"
        )
    if "allowed" in rule and "allowed" in base:
        allowed = {_freeze(v) for v in base["allowed"]}
        for value in rule["allowed"]:
            if _freeze(value) not in allowed:
                reasons.append(
                    f"{where}.allowed: {_fmt(value)} is not among the license type's allowed values"
                )
    if "excluded" in rule and "excluded" in base:
        excluded = {_freeze(v) for v in rule["excluded"]}
        for value in base["excluded"]:
            if _freeze(value) not in excluded:
                reasons.append(
                    f"{where}.excluded: {_fmt(value)} is excluded by the license type and must "
                    "stay excluded"
                )
    if "min" in rule and "min" in base and rule["min"] < base["min"]:
        reasons.append(
            f"{where}.min: {_fmt(rule['min'])} is below the license type's {_fmt(base['min'])}"
        )
    for key in ("max", "max_length", "max_items"):
        if key in rule and key in base and rule[key] > base[key]:
            reasons.append(
                f"{where}.{key}: {_fmt(rule[key])} is above the license type's {_fmt(base[key])}"
            )
    if "patterns" in rule and "patterns" in base:
        for pattern in rule["patterns"]:
            if pattern not in base["patterns"]:
                reasons.append(
                    f"{where}.patterns: {_fmt(pattern)} is not among the license type's patterns"
                )
    return reasons


def _limits_widenings(base: Any, overlay: Any) -> list[str]:
    reasons = []
    for scope in LIMIT_SCOPES:
        for key in LIMIT_KEYS:
            mine = ((overlay or {}).get(scope) or {}).get(key)
            theirs = ((base or {}).get(scope) or {}).get(key)
            if mine is not None and theirs is not None and mine > theirs:
                reasons.append(f"limits.{scope}.{key}: {mine} is above the license type's {theirs}")
    return reasons


def effective_policy(base: dict, overlay: dict) -> dict:
    """The document in force: the base narrowed by the overlay (itself a valid document).

    Every rule of the base stays, so nothing the base refuses gets through, whatever the overlay
    says; where both write a key the narrower value wins, and where they cannot both hold (no
    common allowed value, min above max, two different fixed values) the parameter is forbidden.
    """
    _checked(base, "license type's policy")
    _checked(overlay, "overlay")
    result: dict[str, Any] = {"version": base["version"]}
    base_services = _services(base)
    services: dict[str, dict] = {}
    for service, config in _services(overlay).items():
        if service not in base_services:
            continue
        services[service] = _effective_service(base_services[service], config)
    result["services"] = services
    limits = _effective_limits(base.get("limits"), overlay.get("limits"))
    if limits:
        result["limits"] = limits
    tags = list((base.get("routing") or {}).get("connection_tags") or [])
    for tag in (overlay.get("routing") or {}).get("connection_tags") or []:
        if tag not in tags:
            tags.append(tag)
    if tags:
        result["routing"] = {"connection_tags": tags}
    validate_policy_document(result)
    return result


def _effective_service(base: dict, overlay: dict) -> dict:
    out: dict[str, Any] = {}
    base_providers, providers = base.get("providers"), overlay.get("providers")
    if base_providers is not None and providers is not None:
        out["providers"] = [slug for slug in providers if slug in base_providers]
    elif base_providers is not None:
        out["providers"] = list(base_providers)
    elif providers is not None:
        out["providers"] = list(providers)
    base_params = base.get("params") or {}
    params = overlay.get("params") or {}
    merged: dict[str, dict] = {}
    for name in [*base_params, *(n for n in params if n not in base_params)]:
        merged[name] = _effective_rule(base_params.get(name) or {}, params.get(name) or {})
    if merged:
        out["params"] = merged
    return out


def _effective_rule(base: dict, overlay: dict) -> dict:
    rule: dict[str, Any] = copy.deepcopy(base)
    impossible = False
    if "forbidden" in overlay:  # `false` is kept (a rule is never empty); base's `true` wins
        rule["forbidden"] = base.get("forbidden") is True or overlay["forbidden"]
    if "fixed" in overlay:
        if "fixed" in base and _freeze(base["fixed"]) != _freeze(overlay["fixed"]):
            impossible = True
        rule["fixed"] = copy.deepcopy(overlay["fixed"])
    if "allowed" in overlay:
        if "allowed" in base:
            keep = {_freeze(v) for v in base["allowed"]}
            values = [copy.deepcopy(v) for v in overlay["allowed"] if _freeze(v) in keep]
        else:
            values = copy.deepcopy(overlay["allowed"])
        if values:
            rule["allowed"] = values
        else:
            impossible = True
    if "excluded" in overlay:
        values = list(rule.get("excluded") or [])
        seen = {_freeze(v) for v in values}
        for value in overlay["excluded"]:
            if _freeze(value) not in seen:
                values.append(copy.deepcopy(value))
                seen.add(_freeze(value))
        rule["excluded"] = values
    if "min" in overlay:
        rule["min"] = max(overlay["min"], base["min"]) if "min" in base else overlay["min"]
    for key in ("max", "max_length", "max_items"):
        if key in overlay:
            rule[key] = min(overlay[key], base[key]) if key in base else overlay[key]
    if "patterns" in overlay:
        if "patterns" in base:
            # A regex intersection is not a list of regexes: keep the base's patterns the overlay
            # also lists (exact when the overlay only narrows, narrower otherwise).
            patterns = [p for p in overlay["patterns"] if p in base["patterns"]]
        else:
            patterns = list(overlay["patterns"])
        if patterns:
            rule["patterns"] = patterns
        else:
            impossible = True
    if "min" in rule and "max" in rule and rule["min"] > rule["max"]:
        impossible = True
    if impossible:
        # No value can pass both: a request carrying the parameter is refused.
        return {"forbidden": True}
    return rule


def _effective_limits(base: Any, overlay: Any) -> dict:
    out: dict[str, dict] = {}
    for scope in LIMIT_SCOPES:
        for key in LIMIT_KEYS:
            values = [
                v
                for v in (
                    ((base or {}).get(scope) or {}).get(key),
                    ((overlay or {}).get(scope) or {}).get(key),
                )
                if v is not None
            ]
            if values:
                out.setdefault(scope, {})[key] = min(values)
    return out
