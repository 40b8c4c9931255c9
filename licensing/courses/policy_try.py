"""The "try a request" panel of a course's page: what the API would answer a body by a course
key at an instant (the course's rules then), on licensing.console.policy_try's panel for a
policy. Here, above the console, because it reads the course's cached rules (selectors)."""

from __future__ import annotations

from datetime import datetime

from core.errors import PolicyDenied, ServiceUnavailable

from ..console.policy_try import _denied, _finite, _strict_loads, try_request
from ..models import Course
from ..rules.policy import PolicyDocumentError
from .instructions import SERVICES, instructed
from .rules import (
    CourseRules,
    course_document,
    course_gate,
    exam_document,
    has_ended,
    in_exam,
    next_opening,
)
from .selectors import course_rules


def course_try_request(course: Course, service: str, body_text: str, *, now: datetime) -> dict:
    """The panel's answer for a course at `now`, judged as the pipeline judges a request by a
    course key without a student: the course's gate first (closed, exam mode with every service
    off), then the policy in force (the exam policy, the overlay on the license type's policy,
    or the license type's as is). `decided_by` names which of these decided; `sent`, for an
    allowed chat or responses body in a course with instructions, is the body as the provider
    gets it."""
    rules = course_rules(course.pk)
    if rules is None:
        return {"outcome": "error", "status": 404, "message": "The course no longer exists"}
    refused = _gate_refusal(rules, now)
    if refused is not None:
        return refused
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
    if result["outcome"] == "allowed" and rules.instructions and service in SERVICES:
        # What the provider is sent: the body with the course's instructions put in.
        result["sent"] = _finite(instructed(service, _strict_loads(body_text), rules.instructions))
    return result


def _gate_refusal(rules: CourseRules, now: datetime) -> dict | None:
    """The panel's answer when the course's gate refuses at `now` (closed, exam mode with every
    service off, an exam policy that cannot be evaluated); None when it lets the body through."""
    try:
        course_gate(rules, now=now, end_user_id=None)
    except PolicyDenied as exc:
        if has_ended(rules, now):
            why = "the course has ended"
        elif not rules.active:
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
    return None
