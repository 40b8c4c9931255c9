"""A course's rules in time: is it open, in exam mode, has it paused this member (issue 26).

Pure decisions on a snapshot (`CourseRules`, built and cached by licensing.courses.selectors) and
an instant given by the caller (the pipeline passes `core.clock.utcnow()`, tests a fixed one):
no ORM, no clock of its own. A window is half-open, [starts_at, ends_at): a window ending at
08:00 and one starting at 08:00 leave no gap. Times shown to callers are in the institution's
time zone (docs/decisions/course-rules.md).

The order of the checks: ended (past its end, issue 39: its keys stop working for good), closed
(inactive, or outside every access window when it has any), then paused, then exam mode. An
ended or closed course says so to everyone; a paused student of an open course learns that the
pause is theirs; exam mode comes last because with an exam policy it is not a refusal but a
narrower policy. Outside exam mode the course's overlay judges the request
(licensing.rules.overlay: it can only narrow the license type's policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.errors import PolicyDenied, ServiceUnavailable

from ..rules.overlay import effective_policy, overlay_widenings
from ..rules.policy import Policy, PolicyDocumentError, compile_policy

Window = tuple[datetime, datetime]


@dataclass(frozen=True)
class CourseRules:
    id: int
    code: str
    active: bool
    exam_mode: bool  # the teacher's switch
    # What exam mode allows: None = nothing (every service off); else the policy in force then.
    exam_policy: Policy | None
    exam_policy_broken: bool  # the stored exam policy cannot be evaluated (503)
    access_windows: tuple[Window, ...]  # none: always open
    exam_windows: tuple[Window, ...]
    paused: frozenset[int]  # end user ids of the paused members
    timezone: str  # the institution's IANA name
    # The course's overlay applied to the license type's policy; None: the license type's as is.
    policy: Policy | None = None
    policy_broken: bool = False  # the overlay cannot be evaluated (503)
    name: str = ""  # shown (GET /v1/license, the portal), never decided on
    # Put before every chat and responses request of its members (licensing.courses.instructions).
    instructions: str = ""
    ends_at: datetime | None = None  # from then on every request of its members is refused


def closed_message(code: str, until: datetime | None, timezone: str) -> str:
    if until is None:
        return f"course '{code}' is closed"
    return f"course '{code}' is closed until {local_iso(until, timezone)}"


def ended_message(code: str, ended: datetime, timezone: str) -> str:
    return f"course '{code}' ended at {local_iso(ended, timezone)}"


def has_ended(rules: CourseRules, now: datetime) -> bool:
    return rules.ends_at is not None and now >= rules.ends_at


def exam_message(code: str) -> str:
    return f"course '{code}' is in exam mode"


def paused_message(code: str) -> str:
    return f"course '{code}' has paused your access"


def local_iso(instant: datetime, timezone: str) -> str:
    """ISO 8601 with the institution's offset, to the second: 2026-11-27T08:00:00+01:00."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")  # a zone this host does not know: still an exact instant
    return instant.astimezone(zone).replace(microsecond=0).isoformat()


def _inside(windows: tuple[Window, ...], now: datetime) -> bool:
    return any(start <= now < end for start, end in windows)


def next_opening(rules: CourseRules, now: datetime) -> datetime | None:
    """The start of the first access window after `now`, if any."""
    later = [start for start, _ in rules.access_windows if start > now]
    return min(later) if later else None


def is_open(rules: CourseRules, now: datetime) -> bool:
    """Open at `now` for everyone: active, and inside an access window when it has any (the
    first of course_gate's checks; a member's pause and exam mode are apart)."""
    if not rules.active or has_ended(rules, now):
        return False
    return not rules.access_windows or _inside(rules.access_windows, now)


def in_exam(rules: CourseRules, now: datetime) -> bool:
    return rules.exam_mode or _inside(rules.exam_windows, now)


def course_gate(rules: CourseRules, *, now: datetime, end_user_id: int | None) -> Policy | None:
    """Refuse (403 PolicyDenied, `param` null) a request the course's rules forbid at `now`;
    else the policy that judges it instead of the license type's (the course's overlay applied,
    or the exam policy in exam mode), or None (the license type's as is)."""
    if rules.ends_at is not None and now >= rules.ends_at:
        raise PolicyDenied(ended_message(rules.code, rules.ends_at, rules.timezone), param=None)
    if not rules.active:
        raise PolicyDenied(closed_message(rules.code, None, rules.timezone), param=None)
    if rules.access_windows and not _inside(rules.access_windows, now):
        until = next_opening(rules, now)
        raise PolicyDenied(closed_message(rules.code, until, rules.timezone), param=None)
    if end_user_id is not None and end_user_id in rules.paused:
        raise PolicyDenied(paused_message(rules.code), param=None)
    if in_exam(rules, now):
        if rules.exam_policy_broken:
            reason = f"course {rules.code}'s exam policy cannot be evaluated"
            raise ServiceUnavailable(reason=reason)
        if rules.exam_policy is None:
            raise PolicyDenied(exam_message(rules.code), param=None)
        return rules.exam_policy
    if rules.policy_broken:
        raise ServiceUnavailable(reason=f"course {rules.code}'s overlay cannot be evaluated")
    return rules.policy


def overlay_problems(base: Any, overlay: Any, exam: Any) -> dict[str, str]:
    """Why a course's overlay or exam policy cannot be saved, by field: not a valid document,
    or wider than what it narrows (the license type's policy; for the exam policy, the
    course's). Empty: both only narrow."""
    problems: dict[str, str] = {}
    course_doc = base
    for field, document in (("policy", overlay), ("exam_policy", exam)):
        if not document:
            continue
        try:
            widenings = overlay_widenings(course_doc, _versioned(document))
        except PolicyDocumentError as exc:
            problems[field] = str(exc)
            continue
        if widenings:
            problems[field] = "It may only narrow what it overlays: " + "; ".join(widenings)
        elif field == "policy":
            course_doc = effective_policy(base, _versioned(document))
    return problems


def _versioned(document: Any) -> Any:
    """An overlay names only what it narrows: a document without `version` is version 1."""
    if isinstance(document, dict) and "version" not in document:
        return {"version": 1, **document}
    return document


def course_document(base: Any, overlay: Any) -> Any:
    """The course's policy document in force: the license type's narrowed by the overlay (the
    license type's as is when the overlay is empty). PolicyDocumentError when it cannot be."""
    return effective_policy(base, _versioned(overlay)) if overlay else base


def exam_document(course_doc: Any, exam: Any) -> Any:
    """The exam policy's document in force (it narrows the course's), or None: every service
    off. PolicyDocumentError when it cannot be."""
    return effective_policy(course_doc, _versioned(exam)) if exam else None


def compile_course_policies(
    base: Any, overlay: Any, exam: Any
) -> tuple[Policy | None, bool, Policy | None, bool]:
    """(the course's policy, broken; the exam policy, broken) from the license type's document,
    the course's overlay and its exam policy, each overlay applied with
    licensing.rules.overlay.effective_policy (so it can only narrow). An empty overlay ({}) is
    the license type's policy as is (None); an empty exam policy (None or {}) is every service
    off (None). The exam policy narrows the course's policy, not only the license type's."""
    course_doc = None
    try:
        if overlay:
            course_doc = course_document(base, overlay)
        policy, broken = (compile_policy(course_doc) if course_doc else None), False
    except PolicyDocumentError:
        policy, broken = None, True
    try:
        exam_doc = exam_document(course_doc or base, exam)
        exam_policy = compile_policy(exam_doc) if exam_doc else None
        exam_broken = False
    except PolicyDocumentError:
        exam_policy, exam_broken = None, True
    return policy, broken, exam_policy, exam_broken


__all__ = [
    "CourseRules",
    "overlay_problems",
    "PolicyDocumentError",
    "closed_message",
    "ended_message",
    "has_ended",
    "compile_course_policies",
    "course_document",
    "course_gate",
    "exam_document",
    "exam_message",
    "in_exam",
    "is_open",
    "local_iso",
    "next_opening",
    "paused_message",
]
