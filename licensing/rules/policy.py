"""Policy documents: which services, providers and parameter values a license type allows.

A document looks like
    {"version": 1,
     "services": {"embeddings": {"providers": ["direct"],
                                 "params": {"dimensions": {"max": 1024}}}}}
A service that is not listed is not enabled. Rules apply to the fields a request carries;
a field the request leaves out is not checked (the endpoint's default applies). An optional
top-level `limits` sets fair-use limits (licensing.rules.fairuse):
    "limits": {"holder": {"requests_per_minute": 20, "tokens_per_minute": 20000},
               "license": {"requests_per_minute": 600}}
and an optional `models` rules the model of several services at once (licensing.rules.scopes):
    "models": {"text": {"allowed": ["gpt-4o-mini"]}}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog.registry import POLICY_SERVICES
from core.errors import PolicyDenied, ServiceUnavailable

from .fairuse import Limits
from .keys import RULES, Check, PolicyDocumentError
from .policy_schema import known_params
from .scopes import MODEL, SCOPES, conjoin, model_rules

SUPPORTED_VERSIONS = {1}
# The policy service names, in the documents' order: declared in catalog.registry.
SERVICES = POLICY_SERVICES
# The rule keys (one class each, licensing.rules.keys), in the order they are checked.
RULE_KEYS = tuple(RULES)
# A rule written for the first name also covers the fields listed after it.
ALIASES = {
    "max_tokens": ("max_tokens", "max_completion_tokens"),
    "reasoning_effort": ("reasoning_effort", "reasoning.effort"),
}


def open_policy_document() -> dict:
    """Every service enabled, every provider, no parameter rules."""
    return {"version": 1, "services": {name: {} for name in SERVICES}}


@dataclass(frozen=True)
class Rule:
    """One parameter's rule, compiled: its keys' values (`values`, read as `rule.allowed`,
    `rule.patterns`, ... by the pages that describe a policy) and their checks, bound once."""

    name: str
    values: Mapping[str, Any]  # rule key -> its compiled value (keys.RuleKey.compile)
    # The request fields it applies to (the name and its ALIASES), each with whether it is
    # dotted (a nested field).
    fields: tuple[tuple[str, bool], ...]
    checks: tuple[Check, ...]  # in RULES' order: the first broken key answers

    def check(self, field_name: str, value: Any) -> None:
        if value is None:
            return
        scalars = value if isinstance(value, list) else [value]
        for check in self.checks:
            check(field_name, value, scalars)

    def __getattr__(self, key: str) -> Any:
        # Only called for what is not an attribute: a rule key's value, or its `unset`.
        if key not in RULES:
            raise AttributeError(key)
        return self.values.get(key, RULES[key].unset)


@dataclass(frozen=True)
class ServicePolicy:
    providers: frozenset[str] | None  # None: every provider
    rules: tuple[Rule, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Policy:
    services: dict[str, ServicePolicy]
    limits: Limits | None = None  # fair use; None: not limited
    # Data residency: only connections carrying every one of these tags serve the license.
    connection_tags: frozenset[str] = frozenset()

    def service(self, service: str) -> ServicePolicy:
        found = self.services.get(service)
        if found is None:
            raise PolicyDenied(f"service '{service}' is not enabled for this license", param=None)
        return found

    def check_request(self, service: str, body: dict) -> ServicePolicy:
        """Raise PolicyDenied (403) for the first rule the request breaks."""
        policy = self.service(service)
        # Rule.check inlined, and a plain name read with one dict lookup: this runs on every
        # /v1 request (docs/performance.md).
        for rule in policy.rules:
            for field_name, dotted in rule.fields:
                value = _lookup(body, field_name) if dotted else body.get(field_name)
                if value is None:
                    continue
                scalars = value if isinstance(value, list) else [value]
                for check in rule.checks:
                    check(field_name, value, scalars)
        return policy


def _lookup(body: dict, dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _compile_rule(where: str, name: str, spec: Any) -> Rule:
    """One rule object at `where` (`services.<s>.params.<name>`, `models.<scope>`)."""
    if not isinstance(spec, dict) or not spec:
        raise PolicyDocumentError(f"{where}: a rule must be a non-empty object")
    unknown = sorted(set(spec) - set(RULES))
    if unknown:
        raise PolicyDocumentError(f"{where}: unknown rule keys {unknown}; use {list(RULE_KEYS)}")
    values: dict[str, Any] = {}
    for key, kind in RULES.items():  # RULES' order, not the document's: the errors' order
        if key in spec:
            values[key] = kind.compile(spec[key], where, values)
    bound = (RULES[key].bind(values) for key in values)
    return Rule(
        name=name,
        values=values,
        fields=tuple((each, "." in each) for each in ALIASES.get(name, (name,))),
        checks=tuple(check for check in bound if check is not None),
    )


def compile_policy(document: Any) -> Policy:
    """Validate and compile a policy document; PolicyDocumentError says what is wrong."""
    _check_top_level(document)
    limits = _compile_limits(document.get("limits"))
    connection_tags = _compile_routing(document.get("routing"))
    _check_scopes(document.get("models"))
    services = document.get("services", {})
    if not isinstance(services, dict):
        raise PolicyDocumentError("'services' must be an object")
    compiled = {
        service: _compile_service(service, config, document) for service, config in services.items()
    }
    return Policy(services=compiled, limits=limits, connection_tags=connection_tags)


def _check_top_level(document: Any) -> None:
    """An object of a supported version, with no key this version does not know."""
    if not isinstance(document, dict):
        raise PolicyDocumentError("The policy must be a JSON object")
    version = document.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise PolicyDocumentError(
            f"Unsupported policy version {version!r}; supported: {sorted(SUPPORTED_VERSIONS)}"
        )
    unknown = sorted(set(document) - {"version", "services", "models", "limits", "routing"})
    if unknown:
        raise PolicyDocumentError(f"Unknown top-level keys {unknown}")


def _check_scopes(spec: Any) -> None:
    """`models`: an object of scopes (licensing.rules.scopes.SCOPES), each a model rule."""
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise PolicyDocumentError("'models' must be an object")
    unknown = sorted(set(spec) - set(SCOPES))
    if unknown:
        raise PolicyDocumentError(f"models: unknown keys {unknown}; use {list(SCOPES)}")
    for scope, rule in spec.items():
        _compile_rule(f"models.{scope}", MODEL, rule)


def _compile_service(service: str, config: Any, document: dict) -> ServicePolicy:
    """One entry of `services`: `null` or an object of `providers` and `params`; its model
    rule is conjoined with the `models` rules that hold for it (checked first, in its place)."""
    if service not in SERVICES:
        raise PolicyDocumentError(f"Unknown service {service!r}; known: {list(SERVICES)}")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise PolicyDocumentError(f"services.{service}: must be an object")
    extra = sorted(set(config) - {"providers", "params"})
    if extra:
        raise PolicyDocumentError(f"services.{service}: unknown keys {extra}")
    providers = config.get("providers")
    if providers is not None and (
        not isinstance(providers, list) or not all(isinstance(p, str) for p in providers)
    ):
        raise PolicyDocumentError(f"services.{service}.providers: must be a list of slugs")
    params = config.get("params", {})
    if not isinstance(params, dict):
        raise PolicyDocumentError(f"services.{service}.params: must be an object")
    where = f"services.{service}.params"
    rules = [_compile_rule(f"{where}.{name}", name, spec) for name, spec in params.items()]
    return ServicePolicy(
        providers=frozenset(providers) if providers is not None else None,
        rules=_with_scopes(rules, model_rules(document, service), where),
    )


def _with_scopes(rules: list[Rule], in_force: list[dict], where: str) -> tuple[Rule, ...]:
    """The service's rules with its model rule conjoined with the `models` rules in force (in
    the service's own model rule's place, else first)."""
    own = [i for i, rule in enumerate(rules) if rule.name == MODEL]
    if len(in_force) <= len(own):  # no `models` rule holds for the service
        return tuple(rules)
    merged = [_compile_rule(f"{where}.{MODEL}", MODEL, spec) for spec in conjoin(in_force)]
    rest = [rule for rule in rules if rule.name != MODEL]
    at = own[0] if own else 0
    return tuple(rest[:at] + merged + rest[at:])


ROUTING_KEYS = ("connection_tags",)
_TAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def _compile_routing(spec: Any) -> frozenset[str]:
    """`"routing": {"connection_tags": ["eu"]}`: requests are served only by connections
    carrying every tag (docs/policy.md, "Data residency")."""
    if spec is None:
        return frozenset()
    if not isinstance(spec, dict):
        raise PolicyDocumentError("'routing' must be an object")
    unknown = sorted(set(spec) - set(ROUTING_KEYS))
    if unknown:
        raise PolicyDocumentError(f"routing: unknown keys {unknown}; use {list(ROUTING_KEYS)}")
    tags = spec.get("connection_tags", [])
    if not isinstance(tags, list) or not all(
        isinstance(tag, str) and _TAG.fullmatch(tag) for tag in tags
    ):
        raise PolicyDocumentError(
            "routing.connection_tags: must be a list of tags (1-32 lower-case letters, digits, "
            "'-' or '_', as on the connections)"
        )
    return frozenset(tags)


LIMIT_SCOPES = ("holder", "license")
LIMIT_KEYS = ("requests_per_minute", "tokens_per_minute")


def _compile_limits(spec: Any) -> Limits | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise PolicyDocumentError("'limits' must be an object")
    unknown = sorted(set(spec) - set(LIMIT_SCOPES))
    if unknown:
        raise PolicyDocumentError(f"limits: unknown keys {unknown}; use {list(LIMIT_SCOPES)}")
    values: dict[str, int] = {}
    for scope, limits in spec.items():
        if not isinstance(limits, dict):
            raise PolicyDocumentError(f"limits.{scope}: must be an object")
        extra = sorted(set(limits) - set(LIMIT_KEYS))
        if extra:
            raise PolicyDocumentError(
                f"limits.{scope}: unknown keys {extra}; use {list(LIMIT_KEYS)}"
            )
        for key, value in limits.items():
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**53:
                raise PolicyDocumentError(f"limits.{scope}.{key}: must be a whole number >= 1")
            values[f"{scope}_{key.split('_')[0]}"] = value
    if not values:
        return None
    return Limits(**values)


def _is_known(name: str, known: frozenset[str]) -> bool:
    return any(alias in known for alias in ALIASES.get(name, (name,)))


def check_param_names(document: Any) -> None:
    """Refuse rules on parameters the service's request schema does not have (a service nobody
    registered in policy_schema is not checked)."""
    if not isinstance(document, dict) or not isinstance(document.get("services"), dict):
        return
    for service, config in document["services"].items():
        known = known_params(service)
        if known is None or not isinstance(config, dict):
            continue
        params = config.get("params")
        if not isinstance(params, dict):
            continue
        unknown = [name for name in params if not _is_known(name, known)]
        if unknown:
            raise PolicyDocumentError(
                f"services.{service}.params: unknown parameter(s) {unknown} for {service}; "
                f"known parameters: {sorted(known)}"
            )


def validate_policy_document(document: Any) -> None:
    """The save-time check: compiles, and every rule names a parameter of its service."""
    compile_policy(document)
    check_param_names(document)


def load_policy(document: Any) -> Policy:
    """Compile for the API: a document that cannot be evaluated is a 503, never a guess."""
    try:
        return compile_policy(document)
    except PolicyDocumentError as exc:
        raise ServiceUnavailable() from exc
