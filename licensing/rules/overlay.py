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
  `routing.connection_tags` a superset. Each rule key's "narrower" and its intersection are its
  class's `widenings` and `intersect` (licensing.rules.keys.RULES).
- A model rule, the service's own or one of `models` (licensing.rules.scopes), is compared with
  every model rule the base holds for the service (its own and its `models` rules, merged), and
  the base's and the overlay's `models` rules both hold in the document in force.

`effective_policy` intersects whatever it is given, so even an overlay with widenings never lets
through a request the base refuses; `overlay_widenings` says what an overlay writes that would not
take effect, so that saving it can be refused with the reasons.
"""

from __future__ import annotations

import math
from typing import Any

from .keys import RULES
from .policy import LIMIT_KEYS, LIMIT_SCOPES, PolicyDocumentError, validate_policy_document
from .scopes import MODEL, SCOPES, intersect_rule, model_rule_in_force, scope_rule

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
        base_params = dict(base_config.get("params") or {})
        base_params[MODEL] = model_rule_in_force(base, service)
        for name, rule in (config.get("params") or {}).items():
            reasons.extend(_rule_widenings(f"{where}.params.{name}", base_params.get(name), rule))
    reasons.extend(_scope_widenings(base, overlay))
    reasons.extend(_limits_widenings(base.get("limits"), overlay.get("limits")))
    base_tags = set((base.get("routing") or {}).get("connection_tags") or ())
    if overlay.get("routing") is not None:
        tags = set((overlay.get("routing") or {}).get("connection_tags") or ())
        for tag in sorted(base_tags - tags):
            reasons.append(
                f"routing.connection_tags: '{tag}' is required by the license type and missing"
            )
    return list(dict.fromkeys(reasons))


def _scope_widenings(base: dict, overlay: dict) -> list[str]:
    """An overlay's `models` rule against the base's model rules in force for each service it
    holds for (the base's own `models` rule among them)."""
    reasons: list[str] = []
    kept = [s for s in _services(overlay) if s in _services(base)]
    for scope, services in SCOPES.items():
        rule = scope_rule(overlay, scope)
        if rule is None:
            continue
        bases = [model_rule_in_force(base, s) for s in services if s in kept]
        for base_rule in bases or [scope_rule(base, scope) or {}]:
            reasons.extend(_rule_widenings(f"models.{scope}", base_rule, rule))
    return reasons


def _rule_widenings(where: str, base: dict | None, rule: dict) -> list[str]:
    """A rule key written by both is judged by its class (keys.RULES); one the base does not
    write narrows whatever its value."""
    base = base or {}
    reasons = []
    for key, kind in RULES.items():
        if key in rule and key in base:
            reasons.extend(kind.widenings(f"{where}.{key}", base[key], rule[key]))
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
    models = _effective_scopes(base, overlay)
    if models:
        result["models"] = models
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


def _effective_scopes(base: dict, overlay: dict) -> dict:
    """Each scope's rule: the base's narrowed by the overlay's (both hold)."""
    models = {}
    for scope in SCOPES:
        theirs, mine = scope_rule(base, scope), scope_rule(overlay, scope)
        if theirs or mine:
            models[scope] = intersect_rule(theirs or {}, mine or {})
    return models


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
        merged[name] = intersect_rule(base_params.get(name) or {}, params.get(name) or {})
    if merged:
        out["params"] = merged
    return out


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
