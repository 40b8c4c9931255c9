"""The "try a request" panel of the license-type page and of a course's page: what the API
would answer a body under a policy (for a course: its rules at this instant, through
licensing.courses.policy_try), and which rule decided, without calling any provider."""

from __future__ import annotations

import json
import math
from typing import Any

from catalog.models import Provider
from core.errors import PolicyDenied, validation_error_body

from ..rules.policy import ALIASES, PolicyDocumentError, _lookup, compile_policy
from ..rules.policy_schema import BodyInvalid, parser_for
from ..rules.scopes import MODEL, model_rule_sources


def _active_providers() -> list[str]:
    return list(
        Provider.objects.filter(connections__active=True)
        .distinct()
        .values_list("slug", flat=True)
        .order_by("slug")
    )


def _finite(value: Any) -> Any:
    """JSON for a browser: 1e400 arrives as inf, which JSON cannot carry."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def try_request(policy_document: Any, service: str, body_text: str) -> dict:
    """{"outcome": "allowed" | "denied" | "invalid" | "error", ...} for the panel."""
    return _finite(_evaluate(policy_document, service, body_text))


def _strict_loads(text: str) -> Any:
    def reject_constant(name):
        raise ValueError(f"Invalid constant {name}")

    return json.loads(text, parse_constant=reject_constant)


def _evaluate(policy_document: Any, service: str, body_text: str) -> dict:
    try:
        policy = compile_policy(policy_document)
    except PolicyDocumentError as exc:
        return {
            "outcome": "error",
            "status": 503,
            "message": f"The saved policy cannot be evaluated: {exc}",
        }
    parse = parser_for(service)
    try:
        fields = parse(body_text) if parse is not None else _strict_loads(body_text)
    except BodyInvalid as exc:
        return {"outcome": "invalid", "status": 422, "body": validation_error_body(exc.detail)}
    except ValueError as exc:
        return {"outcome": "invalid", "status": 422, "message": f"Not JSON: {exc}"}
    if not isinstance(fields, dict):
        return {"outcome": "invalid", "status": 422, "message": "The body must be a JSON object"}
    try:
        service_policy = policy.service(service)
    except PolicyDenied as exc:
        return _denied(exc, rule=f"services: '{service}' is not listed")
    for rule in service_policy.rules:
        for field_name in ALIASES.get(rule.name, (rule.name,)):
            try:
                rule.check(field_name, _lookup(fields, field_name))
            except PolicyDenied as exc:
                return _denied(exc, rule=_rule_text(policy_document, service, rule.name))
    active = _active_providers()
    if service_policy.providers is None:
        providers, note = active, "every provider (the policy names none)"
    else:
        providers = sorted(service_policy.providers)
        note = "the policy's providers list"
    return {
        "outcome": "allowed",
        "status": 200,
        "providers": providers,
        "providers_note": note,
        "inactive": sorted(set(providers) - set(active)),
    }


def _rule_text(document: dict, service: str, name: str) -> str:
    """The rule that refused as the document writes it: a model's every rule in force (the
    service's own and the `models` rules, checked merged: licensing.rules.scopes)."""
    if name == MODEL:
        sources = model_rule_sources(document, service)
    else:
        where = f"services.{service}.params.{name}"
        sources = [(where, document["services"][service]["params"][name])]
    return "; ".join(f"{where}: {json.dumps(spec, ensure_ascii=False)}" for where, spec in sources)


def _denied(exc: PolicyDenied, *, rule: str) -> dict:
    return {"outcome": "denied", "status": exc.status, "body": exc.body(), "rule": rule}
