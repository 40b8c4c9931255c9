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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from catalog.registry import POLICY_SERVICES
from core.errors import PolicyDenied, ServiceUnavailable

from .fairuse import Limits
from .policy_schema import known_params

SUPPORTED_VERSIONS = {1}
# The policy service names, in the documents' order: declared in catalog.registry.
SERVICES = POLICY_SERVICES
RULE_KEYS = (
    "forbidden",
    "fixed",
    "allowed",
    "excluded",
    "min",
    "max",
    "max_length",
    "max_items",
    "patterns",
)
# A rule written for the first name also covers the fields listed after it.
ALIASES = {
    "max_tokens": ("max_tokens", "max_completion_tokens"),
    "reasoning_effort": ("reasoning_effort", "reasoning.effort"),
}


class PolicyDocumentError(ValueError):
    """The document cannot be saved (admin) or evaluated (API: 503)."""


def open_policy_document() -> dict:
    """Every service enabled, every provider, no parameter rules."""
    return {"version": 1, "services": {name: {} for name in SERVICES}}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Rule:
    name: str
    forbidden: bool = False
    fixed: Any = None
    has_fixed: bool = False
    allowed: tuple | None = None
    excluded: tuple | None = None
    min: float | None = None
    max: float | None = None
    max_length: int | None = None
    max_items: int | None = None
    patterns: tuple[re.Pattern, ...] | None = None

    def check(self, field_name: str, value: Any) -> None:
        if value is None:
            return
        if self.forbidden:
            raise PolicyDenied(
                f"parameter '{field_name}' is not permitted for this license", param=field_name
            )
        if self.has_fixed and value != self.fixed:
            raise PolicyDenied(f"'{field_name}' must be '{_fmt(self.fixed)}'", param=field_name)
        scalars = value if isinstance(value, list) else [value]
        if self.allowed is not None and any(v not in self.allowed for v in scalars):
            values = ", ".join(_fmt(v) for v in self.allowed)
            raise PolicyDenied(f"'{field_name}' must be one of: [{values}]", param=field_name)
        if self.excluded is not None:
            for v in scalars:
                if v in self.excluded:
                    raise PolicyDenied(
                        f"'{field_name}' value '{_fmt(v)}' is not permitted for this license",
                        param=field_name,
                    )
        if self.min is not None or self.max is not None:
            for v in scalars:
                if not _is_number(v):
                    continue
                if (self.min is not None and v < self.min) or (
                    self.max is not None and v > self.max
                ):
                    raise PolicyDenied(self._range_message(field_name), param=field_name)
        if self.max_length is not None:
            for v in scalars:
                if isinstance(v, str) and len(v) > self.max_length:
                    raise PolicyDenied(
                        f"'{field_name}' exceeds maximum length of {self.max_length}",
                        param=field_name,
                    )
        if self.max_items is not None:
            count = len(value) if isinstance(value, list | dict) else 1
            if count > self.max_items:
                raise PolicyDenied(
                    f"'{field_name}' exceeds maximum item count of {self.max_items}",
                    param=field_name,
                )
        if self.patterns is not None:
            for v in scalars:
                if isinstance(v, str) and not any(p.fullmatch(v) for p in self.patterns):
                    raise PolicyDenied(
                        f"'{field_name}' value '{v}' does not match any allowed pattern",
                        param=field_name,
                    )

    def _range_message(self, field_name: str) -> str:
        if self.min is not None and self.max is not None:
            return f"'{field_name}' must be between {_fmt(self.min)} and {_fmt(self.max)}"
        if self.max is not None:
            return f"'{field_name}' must be <= {_fmt(self.max)}"
        return f"'{field_name}' must be >= {_fmt(self.min)}"


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
        for rule in policy.rules:
            for field_name in ALIASES.get(rule.name, (rule.name,)):
                rule.check(field_name, _lookup(body, field_name))
        return policy


def _lookup(body: dict, dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _compile_rule(service: str, name: str, spec: Any) -> Rule:
    where = f"services.{service}.params.{name}"
    if not isinstance(spec, dict) or not spec:
        raise PolicyDocumentError(f"{where}: a rule must be a non-empty object")
    unknown = sorted(set(spec) - set(RULE_KEYS))
    if unknown:
        raise PolicyDocumentError(f"{where}: unknown rule keys {unknown}; use {list(RULE_KEYS)}")
    kwargs: dict[str, Any] = {"name": name}
    if "forbidden" in spec:
        if not isinstance(spec["forbidden"], bool):
            raise PolicyDocumentError(f"{where}.forbidden: must be true or false")
        kwargs["forbidden"] = spec["forbidden"]
    if "fixed" in spec:
        kwargs["fixed"], kwargs["has_fixed"] = spec["fixed"], True
    for key in ("allowed", "excluded"):
        if key in spec:
            if not isinstance(spec[key], list) or not spec[key]:
                raise PolicyDocumentError(f"{where}.{key}: must be a non-empty list")
            kwargs[key] = tuple(spec[key])
    for key in ("min", "max"):
        if key in spec:
            if not _is_number(spec[key]):
                raise PolicyDocumentError(f"{where}.{key}: must be a number")
            kwargs[key] = spec[key]
    if "min" in kwargs and "max" in kwargs and kwargs["min"] > kwargs["max"]:
        raise PolicyDocumentError(f"{where}: min is greater than max")
    for key in ("max_length", "max_items"):
        if key in spec:
            if not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0:
                raise PolicyDocumentError(f"{where}.{key}: must be a whole number >= 0")
            kwargs[key] = spec[key]
    if "patterns" in spec:
        patterns = spec["patterns"]
        if not isinstance(patterns, list) or not patterns:
            raise PolicyDocumentError(f"{where}.patterns: must be a non-empty list of regexes")
        compiled = []
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise PolicyDocumentError(f"{where}.patterns: every pattern must be a string")
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise PolicyDocumentError(f"{where}.patterns: {pattern!r}: {exc}") from exc
        kwargs["patterns"] = tuple(compiled)
    return Rule(**kwargs)


def compile_policy(document: Any) -> Policy:
    """Validate and compile a policy document; PolicyDocumentError says what is wrong."""
    if not isinstance(document, dict):
        raise PolicyDocumentError("The policy must be a JSON object")
    version = document.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise PolicyDocumentError(
            f"Unsupported policy version {version!r}; supported: {sorted(SUPPORTED_VERSIONS)}"
        )
    unknown = sorted(set(document) - {"version", "services", "limits", "routing"})
    if unknown:
        raise PolicyDocumentError(f"Unknown top-level keys {unknown}")
    limits = _compile_limits(document.get("limits"))
    connection_tags = _compile_routing(document.get("routing"))
    services = document.get("services", {})
    if not isinstance(services, dict):
        raise PolicyDocumentError("'services' must be an object")
    compiled: dict[str, ServicePolicy] = {}
    for service, config in services.items():
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
        rules = tuple(_compile_rule(service, name, spec) for name, spec in params.items())
        compiled[service] = ServicePolicy(
            providers=frozenset(providers) if providers is not None else None, rules=rules
        )
    return Policy(services=compiled, limits=limits, connection_tags=connection_tags)


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
