"""Every change to safeguarding alerts: raising one (the pipeline, after a flag), reading its
content (audited each time), acknowledging, escalating and closing it, the institution's
settings, and the retention. Keyword-only functions under `transaction.atomic`, each with its
audit row; a refusal is a `ValidationError` naming the field (the admin shows it on the form)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from core import clock
from core.crypto import reveal
from core.text import is_storable_text

from ..access.audit import audit_event_record
from ..models import AuditEvent, Course, EndUser, SafeguardingAlert, SafeguardingSettings
from ..models.safeguarding import CONTENT_MAX_CHARACTERS, NOTE_MAX_LENGTH
from .notify import mail_after_commit
from .rules import Verdict, raised_by, top_scores
from .selectors import settings_of

logger = logging.getLogger("gateway")
Status = SafeguardingAlert.Status


def do_raise_alert(
    *,
    institution_id: int,
    end_user_id: int,
    course_id: int | None,
    request_id: str,
    direction: str,
    verdicts: Iterable[Verdict],
) -> SafeguardingAlert | None:
    """The alert for a student's flagged texts, when their institution has alerts on and a chosen
    category is raised (licensing.safeguarding.rules); None otherwise. Only the texts that raise
    it are kept, sealed."""
    row = settings_of(institution_id)
    if row is None or not row.enabled:
        return None
    chosen, thresholds = list(row.categories or []), dict(row.thresholds or {})
    raising = [(v, raised_by(v, chosen, thresholds)) for v in verdicts]
    raising = [(v, categories) for v, categories in raising if categories]
    if not raising:
        return None
    categories = sorted({c for _v, found in raising for c in found}, key=chosen.index)
    with transaction.atomic():
        alert = SafeguardingAlert.objects.create(
            institution_id=institution_id,
            end_user_id=end_user_id,
            course_id=course_id if _course_exists(course_id, institution_id) else None,
            created_at=clock.utcnow(),
            request_id=request_id[:64],
            direction=direction,
            categories=categories,
            scores=top_scores(v for v, _found in raising),
            content=_sealable([v.text for v, _found in raising]),
        )
        audit_event_record(
            action=AuditEvent.Action.SAFEGUARDING_ALERT_RAISED,
            actor_name="gateway",
            institution=institution_id,
            target=f"safeguarding_alert:{alert.pk}",
            # Institution admins read the audit log and no alert: nothing of it but its number.
            detail={},
        )
        mail_after_commit(alert_id=alert.pk, institution_id=institution_id, course_id=course_id)
    return alert


def _course_exists(course_id: int | None, institution_id: int) -> bool:
    return (
        course_id is not None
        and Course.objects.filter(pk=course_id, institution_id=institution_id).exists()
    )


def _sealable(texts: list[str]) -> str:
    """The flagged texts as one JSON list (ASCII: a lone surrogate is escaped, not refused),
    each cut at CONTENT_MAX_CHARACTERS."""
    return json.dumps([text[:CONTENT_MAX_CHARACTERS] for text in texts])


def student_of(end_user_id: int) -> EndUser | None:
    return EndUser.objects.filter(pk=end_user_id).select_related("user").first()


def do_read_alert_content(*, alert: SafeguardingAlert, request) -> list[str]:
    """The flagged texts of `alert`, for the person of `request`: every reading is an audit row
    (who, when, from where)."""
    audit_event_record(
        action=AuditEvent.Action.SAFEGUARDING_ALERT_VIEWED,
        request=request,
        institution=alert.institution_id,
        target=f"safeguarding_alert:{alert.pk}",
    )
    try:
        texts = json.loads(reveal(alert.content) or "[]")
    except ValueError:
        texts = []
    return [text for text in texts if isinstance(text, str)]


def _checked_note(note: object) -> str:
    if not isinstance(note, str):
        raise ValidationError({"note": _("Enter a note.")})
    if not is_storable_text(note):
        raise ValidationError(
            {"note": _("The text may not contain NUL characters or lone surrogates.")}
        )
    if len(note) > NOTE_MAX_LENGTH:
        raise ValidationError(
            {"note": _("At most %(limit)s characters.") % {"limit": NOTE_MAX_LENGTH}}
        )
    return note.strip()


def _handle(*, alert: SafeguardingAlert, status: str, note: str, request) -> SafeguardingAlert:
    note = _checked_note(note)
    with transaction.atomic():
        locked = SafeguardingAlert.objects.select_for_update().get(pk=alert.pk)
        if locked.status == Status.CLOSED:
            raise ValidationError({"status": _("This alert is closed.")})
        previous = locked.status
        locked.status, locked.handled_by, locked.handled_at = status, request.user, clock.utcnow()
        if note:  # each decision's note is kept, after the ones before it
            signed = (
                f"{locked.handled_at:%Y-%m-%d %H:%M} UTC, {request.user.get_username()}: {note}"
            )
            locked.note = f"{locked.note}\n\n{signed}" if locked.note else signed
        locked.save(update_fields=["status", "note", "handled_by", "handled_at"])
        audit_event_record(
            action=AuditEvent.Action.SAFEGUARDING_ALERT_HANDLED,
            request=request,
            institution=locked.institution_id,
            target=f"safeguarding_alert:{locked.pk}",
            detail={"from": previous, "to": status, "note": bool(note)},
        )
    return locked


def do_acknowledge_alert(*, alert: SafeguardingAlert, request, note: str = "") -> SafeguardingAlert:
    return _handle(alert=alert, status=Status.ACKNOWLEDGED, note=note, request=request)


def do_escalate_alert(*, alert: SafeguardingAlert, request, note: str = "") -> SafeguardingAlert:
    """Escalated to the institution's safeguarding contacts: they are mailed (no content)."""
    with transaction.atomic():
        alert = _handle(alert=alert, status=Status.ESCALATED, note=note, request=request)
        mail_after_commit(
            alert_id=alert.pk,
            institution_id=alert.institution_id,
            course_id=alert.course_id,
            escalated=True,
        )
    return alert


def do_close_alert(*, alert: SafeguardingAlert, request, note: str) -> SafeguardingAlert:
    """Closed with a note (required): nothing more is done with it."""
    if not isinstance(note, str) or not note.strip():
        raise ValidationError({"note": _("A note is required to close an alert.")})
    return _handle(alert=alert, status=Status.CLOSED, note=note, request=request)


DECISIONS = ("acknowledge", "escalate", "close")


def check_decision(*, decision: str, note: str) -> None:
    """A reviewer's decision and note as the form sends them: ValidationError when refused."""
    if decision not in DECISIONS:
        raise ValidationError({"decision": _("Choose a decision.")})
    note = _checked_note(note)
    if decision == "close" and not note:
        raise ValidationError({"note": _("A note is required to close an alert.")})


def do_decide(*, alert: SafeguardingAlert, decision: str, note: str, request) -> SafeguardingAlert:
    """The review page's decision, through the service of each."""
    check_decision(decision=decision, note=note)
    if decision == "escalate":
        return do_escalate_alert(alert=alert, request=request, note=note)
    if decision == "close":
        return do_close_alert(alert=alert, request=request, note=note)
    return do_acknowledge_alert(alert=alert, request=request, note=note)


def do_save_settings(*, row: SafeguardingSettings, request, changed: list[str]) -> None:
    """The institution admin's settings, saved with their audit row."""
    with transaction.atomic():
        row.save()
        audit_event_record(
            action=AuditEvent.Action.SAFEGUARDING_SETTINGS_CHANGED,
            request=request,
            institution=row.institution_id,
            target=f"institution:{row.institution_id}",
            detail={
                "changed": changed,
                "enabled": row.enabled,
                "categories": row.categories,
                "thresholds": row.thresholds,
                "retention_days": row.retention_days,
            },
        )


def do_apply_retention(*, now: datetime | None = None) -> dict[int, int]:
    """Deletes the alerts (and their content) older than their institution's retention period
    (default 30 days); institution id -> alerts deleted, each with an audit row."""
    now = now or clock.utcnow()
    deleted: dict[int, int] = {}
    institution_ids = SafeguardingAlert.objects.values_list("institution_id", flat=True).distinct()
    for institution_id in sorted(set(institution_ids)):
        row = settings_of(institution_id)
        days = row.retention_days if row is not None else SafeguardingSettings().retention_days
        cutoff = now - timedelta(days=days)
        with transaction.atomic():
            old = SafeguardingAlert.objects.filter(
                institution_id=institution_id, created_at__lt=cutoff
            )
            count, _by_model = old.delete()
            if count:
                audit_event_record(
                    action=AuditEvent.Action.RETENTION_APPLIED,
                    actor_name="apply_retention",
                    institution=institution_id,
                    target="safeguarding_alerts",
                    detail={"deleted": count, "before": cutoff.isoformat(), "days": days},
                )
        if count:
            deleted[institution_id] = count
    return deleted
