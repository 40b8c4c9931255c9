"""The "try a request" panel of the license-type page and of a course's page: what the API
would answer a body under a policy (for a course: its rules at this instant), and which rule
decided, without calling any provider."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from catalog.models import Provider
from core.errors import PolicyDenied, ServiceUnavailable, validation_error_body

from ..access.courses import course_rules
from ..models import Course
from ..rules.courses import course_document, course_gate, exam_document, in_exam, next_opening
from ..rules.policy import ALIASES, PolicyDocumentError, _lookup, compile_policy
from ..rules.policy_schema import BodyInvalid, parser_for


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
                spec = policy_document["services"][service]["params"][rule.name]
                return _denied(
                    exc,
                    rule=f"services.{service}.params.{rule.name}: "
                    + json.dumps(spec, ensure_ascii=False),
                )
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


def _denied(exc: PolicyDenied, *, rule: str) -> dict:
    return {"outcome": "denied", "status": exc.status, "body": exc.body(), "rule": rule}


def course_try_request(course: Course, service: str, body_text: str, *, now: datetime) -> dict:
    """The panel's answer for a course at `now`, judged as the pipeline judges a request by a
    course key without a student: the course's gate first (closed, exam mode with every service
    off), then the policy in force (the exam policy, the overlay on the license type's policy,
    or the license type's as is). `decided_by` names which of these decided."""
    rules = course_rules(course.pk)
    if rules is None:
        return {"outcome": "error", "status": 404, "message": "The course no longer exists"}
    try:
        course_gate(rules, now=now, end_user_id=None)
    except PolicyDenied as exc:
        if not rules.active:
            why = "the course is inactive"
        elif rules.access_windows and not any(s <= now < e for s, e in rules.access_windows):
            opening = next_opening(rules, now)
            why = "outside every access window" + ("" if opening else " (and none is to come)")
        else:
            switch = "the exam switch is on" if rules.exam_mode else "an exam window is open"
            why = f"exam mode ({switch}) with every service off"
        return _finite(_denied(exc, rule=f"course '{rules.code}': {why}"))
    except ServiceUnavailable as exc:
        return {"outcome": "error", "status": 503, "message": str(exc.reason)}
    base = course.license.license_type.policy
    try:
        document = course_document(base, course.policy)
        source = "the course's overlay on the license type's policy"
        if not course.policy:
            source = "the license type's policy (the course narrows nothing)"
        if in_exam(rules, now):
            document = exam_document(document, course.exam_policy)
            switch = "the exam switch is on" if rules.exam_mode else "an exam window is open"
            source = f"the exam policy ({switch})"
    except PolicyDocumentError as exc:
        return {"outcome": "error", "status": 503, "message": f"Cannot be evaluated: {exc}"}
    result = try_request(document, service, body_text)
    result["decided_by"] = source
    return result
