"""Model rules for several services at once: a policy document's `models` section
(docs/policy.md, "Models for several services").

    "models": {"text": {"allowed": ["gpt-4o-mini"]},
               "all": {"allowed": ["gpt-4o-mini", "text-embedding-3-small"]}}

`text` holds for the text services (chat completions and responses: catalog.registry's
TEXT_SERVICES), `all` for every service. Each is a rule on the `model` parameter, written with
the same rule keys as a service's `params.model`, and it holds **beside** the service's own
rule: a request's model must pass every rule in force for its service (the service's, then
`text`'s, then `all`'s). So a document without `models` means what it always meant, and a
`models` rule can only narrow what the services' own rules allow.

The rules in force are conjoined into as few rules as say exactly the same (`conjoin`): keys
whose intersection is exact (`allowed`, `excluded`, `min`, `max`, ...; keys.RuleKey.conjoins)
are merged into one rule, so a 403 lists exactly the models allowed; a second `patterns` list
(no list of regexes is the intersection of two) is checked as a rule of its own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from catalog.registry import POLICY_SERVICES, TEXT_SERVICES

from .keys import IMPOSSIBLE, MISSING, RULES, freeze

MODEL = "model"
# Each scope and the services it holds for, in the order its rule is checked after the
# service's own.
SCOPES: dict[str, tuple[str, ...]] = {"text": TEXT_SERVICES, "all": POLICY_SERVICES}
# No value can pass: a request carrying the parameter is refused.
NOTHING_PASSES: dict[str, Any] = {"forbidden": True}


def scopes_of(service: str) -> tuple[str, ...]:
    return tuple(scope for scope, services in SCOPES.items() if service in services)


def _section(document: Any) -> Mapping:
    models = document.get("models") if isinstance(document, dict) else None
    return models if isinstance(models, dict) else {}


def scope_rule(document: Any, scope: str) -> dict | None:
    """The document's `models.<scope>` rule, or None."""
    rule = _section(document).get(scope)
    return rule if isinstance(rule, dict) else None


def own_model_rule(document: Any, service: str) -> dict | None:
    """The service's own `params.model` rule, or None."""
    services = document.get("services") if isinstance(document, dict) else None
    config = services.get(service) if isinstance(services, dict) else None
    params = config.get("params") if isinstance(config, dict) else None
    rule = params.get(MODEL) if isinstance(params, dict) else None
    return rule if isinstance(rule, dict) else None


def model_rules(document: Any, service: str) -> list[dict]:
    """Every model rule in force for the service, in the order they are checked."""
    found = [own_model_rule(document, service)]
    found += [scope_rule(document, scope) for scope in scopes_of(service)]
    return [rule for rule in found if rule]


def intersect_rule(base: Mapping, overlay: Mapping) -> dict:
    """`base` with every key `overlay` writes intersected by its class (keys.RULES): the value
    that passes both, or NOTHING_PASSES when none can. Exact for the keys that conjoin; for
    `patterns` the overlay's patterns the base also has (narrower: an overlay's meaning)."""
    rule: dict[str, Any] = copy.deepcopy(dict(base))
    for key, kind in RULES.items():
        if key not in overlay:
            continue
        value = kind.intersect(rule.get(key, MISSING), overlay[key])
        if value is IMPOSSIBLE:
            return NOTHING_PASSES.copy()
        rule[key] = value
    if any(kind.contradicts(rule) for kind in RULES.values()):
        return NOTHING_PASSES.copy()
    return rule


def conjoin(rules: Sequence[Mapping]) -> list[dict]:
    """Rules that together pass exactly what every one of `rules` passes: the first holds
    every key merged where the merge is exact; a key that does not conjoin (a second, different
    `patterns` list), or a rule whose bounds would contradict the merged ones (a `min` above a
    `max` refuses numbers only), is checked as a rule of its own. Empty for no rules."""
    if not rules:
        return []
    merged: dict[str, Any] = copy.deepcopy(dict(rules[0]))
    apart: list[dict] = []
    for rule in rules[1:]:
        candidate, extra = dict(merged), {}
        for key, value in rule.items():
            kind = RULES[key]
            if not kind.conjoins and key in candidate:
                if freeze(candidate[key]) != freeze(value):
                    extra[key] = copy.deepcopy(value)
                continue
            value = kind.intersect(candidate.get(key, MISSING), value)
            if value is IMPOSSIBLE:  # no value passes both (allowed, fixed): exact
                return [NOTHING_PASSES.copy()]
            candidate[key] = value
        if any(kind.contradicts(candidate) for kind in RULES.values()):
            apart.append(copy.deepcopy(dict(rule)))
            continue
        merged = candidate
        if extra:
            apart.append(extra)
    return [merged, *apart]


def model_rule_in_force(document: Any, service: str) -> dict:
    """The service's model rules merged into one (`conjoin`'s first): what the form and the
    overlays compare with. Empty: any model."""
    rules = conjoin(model_rules(document, service))
    return rules[0] if rules else {}


def _normal(rule: Mapping) -> Any:
    """A rule compared by meaning: its lists of values as sets."""
    return freeze(
        {
            key: sorted(value, key=repr)
            if key in ("allowed", "excluded") and isinstance(value, list)
            else value
            for key, value in rule.items()
        }
    )


def text_split(document: Any) -> tuple[list[dict], list[dict]] | None:
    """When both text services are enabled and their model rules in force differ (a model
    allowed through one and refused through the other), the two lists of rules (in
    TEXT_SERVICES' order); None when they agree or one is off."""
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict) or not all(s in services for s in TEXT_SERVICES):
        return None
    chat, responses = (conjoin(model_rules(document, s)) for s in TEXT_SERVICES)
    if sorted(map(_normal, chat), key=repr) == sorted(map(_normal, responses), key=repr):
        return None
    return chat, responses
