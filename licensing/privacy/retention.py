"""Retention (issue 39 item 3): what each institution keeps only for a while, applied by
`manage.py apply_retention` once a day (docs/decisions/retention.md).

- The ledger: after `Institution.ledger_identity_days` a row no longer says who made the request:
  its end user, its key and its metadata go; its credits, tokens, times, model, license and
  course stay, so every sum (wallets, totals, past periods' exports) is unchanged. For a course's
  rows the clock starts at the course's end date when it has one. The per-person wallets (and
  budget alerts) of budget windows closed before the cutoff keep their spend under a pseudonym
  (`pseudonym:` + an HMAC of the holder under the gateway's secret key): the rows of one window
  still add up to their wallet, and nothing in the database says whose it was.
- The audit log: its rows are deleted after `Institution.audit_log_days`; the gateway-wide rows
  (no institution) after settings.GATEWAY_AUDIT_LOG_DAYS.
- Safeguarding alerts: after the institution's alert retention (licensing.safeguarding).

Every pass is idempotent and works in batches, each its own transaction, so a day missed is
caught up by the next run and the hot path's inserts never wait long behind it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils.crypto import salted_hmac

from core import clock

from ..access.audit import audit_event_record
from ..models import AuditEvent, BudgetAlert, Institution, Transaction, Wallet
from ..safeguarding.services import do_apply_retention as alerts_apply_retention

BATCH = 2_000
PSEUDONYM = "pseudonym:"
# A holder that names a person: `user:<end user id>` or `key:<key id>`, alone or inside a
# course's holder (`course:<id>:user:<id>`).
_PERSON = re.compile(r"(?:user|key):\d+\Z")
# The longest a budget window of each period lasts (a day with a DST change lasts 25 hours);
# `lifetime` never closes.
_LONGEST = {
    "daily": timedelta(hours=25),
    "day": timedelta(hours=25),
    "weekly": timedelta(days=7, hours=1),
    "week": timedelta(days=7, hours=1),
    "monthly": timedelta(days=31, hours=1),
    "month": timedelta(days=31, hours=1),
}


@dataclass
class Applied:
    """What one run changed for one institution."""

    ledger_rows: int = 0
    wallets: int = 0
    budget_alerts: int = 0
    audit_rows: int = 0
    safeguarding_alerts: int = 0

    def any(self) -> bool:
        return any(asdict(self).values())


def do_apply_retention(*, now: datetime | None = None) -> dict[int | None, Applied]:
    """Apply every institution's retention as the module says; institution id (None: the
    gateway-wide audit rows) -> what changed. One `retention_applied` audit row per institution
    per run, so the privacy report can say when it last ran."""
    now = now or clock.utcnow()
    applied: dict[int | None, Applied] = {}
    alerts = alerts_apply_retention(now=now)
    for institution in Institution.objects.only("pk", "ledger_identity_days", "audit_log_days"):
        done = Applied(safeguarding_alerts=alerts.get(institution.pk, 0))
        if institution.ledger_identity_days:
            cutoff = now - timedelta(days=institution.ledger_identity_days)
            done.ledger_rows = _ledger_pseudonymise(institution.pk, cutoff)
            done.wallets, done.budget_alerts = _holders_pseudonymise(institution.pk, cutoff)
        if institution.audit_log_days:
            cutoff = now - timedelta(days=institution.audit_log_days)
            done.audit_rows = _audit_delete(Q(institution_id=institution.pk), cutoff)
        _record(institution, done, now)
        applied[institution.pk] = done
    days = settings.GATEWAY_AUDIT_LOG_DAYS
    if days:
        gateway_wide = _audit_delete(Q(institution__isnull=True), now - timedelta(days=days))
        applied[None] = Applied(audit_rows=gateway_wide)
    return applied


def _course_clock(cutoff: datetime) -> Q:
    """A row's person may go: not a course's, or its course has no end date, or ended before
    the cutoff (the course's clock starts at its end)."""
    return Q(course__isnull=True) | Q(course__ends_at__isnull=True) | Q(course__ends_at__lt=cutoff)


def _ledger_pseudonymise(institution_id: int, cutoff: datetime) -> int:
    rows = (
        Transaction.objects.filter(license__institution_id=institution_id, created_at__lt=cutoff)
        .filter(_course_clock(cutoff))
        .filter(Q(end_user__isnull=False) | Q(api_key__isnull=False) | ~Q(metadata={}))
    )
    return _in_batches(
        rows,
        lambda pks: Transaction.objects.filter(pk__in=pks).update(
            end_user=None, api_key=None, metadata={}
        ),
    )


def _in_batches(rows, apply: Callable[[list[int]], int]) -> int:
    """`apply` to the primary keys of `rows`, BATCH at a time, each batch its own transaction,
    until `rows` holds none (so `apply` must take its rows out of `rows`); the sum of its counts."""
    done = 0
    while True:
        with transaction.atomic():
            batch = list(rows.values_list("pk", flat=True)[:BATCH])
            if not batch:
                return done
            done += apply(batch)


def pseudonym_of(license_id: int, holder: str) -> str:
    """The holder with its person replaced by a pseudonym: the same person (holder) of the
    same license gets the same one, another gets another; only the secret key links it back."""
    match = _PERSON.search(holder)
    if match is None:
        return holder
    digest = salted_hmac("licensing.privacy.retention", f"{license_id}|{match.group()}")
    return holder[: match.start()] + PSEUDONYM + digest.hexdigest()[:20]


def _closed_person_holders(model, institution_id: int, cutoff: datetime):
    """`model`'s rows (wallets, budget alerts) of a person whose budget window closed before
    the cutoff (and whose course, for a course's, passed its clock)."""
    rows = model.objects.filter(
        license__institution_id=institution_id, window_start__lt=cutoff
    ).filter(Q(holder__regex=r"(user|key):[0-9]+$"))
    for row in rows.only("pk", "license_id", "holder", "period", "window_start").iterator():
        longest = _LONGEST.get(row.period)
        if longest is not None and row.window_start + longest <= cutoff:
            yield row


def _holders_pseudonymise(institution_id: int, cutoff: datetime) -> tuple[int, int]:
    ended = _ended_courses(institution_id, cutoff)
    counts = []
    for model in (Wallet, BudgetAlert):
        changed = 0
        with transaction.atomic():
            for row in _closed_person_holders(model, institution_id, cutoff):
                course = _course_of(row.holder)
                if course is not None and course not in ended:
                    continue
                model.objects.filter(pk=row.pk).update(
                    holder=pseudonym_of(row.license_id, row.holder)
                )
                changed += 1
        counts.append(changed)
    return counts[0], counts[1]


def _course_of(holder: str) -> int | None:
    kind, _, rest = holder.partition(":")
    if kind != "course":
        return None
    course_id, _, _person = rest.partition(":")
    return int(course_id) if course_id.isdigit() else None


def _ended_courses(institution_id: int, cutoff: datetime) -> set[int]:
    from ..models import Course

    courses = Course.objects.filter(institution_id=institution_id)
    return set(
        courses.filter(Q(ends_at__isnull=True) | Q(ends_at__lt=cutoff)).values_list("pk", flat=True)
    )


def _audit_delete(scope: Q, cutoff: datetime) -> int:
    rows = AuditEvent.objects.filter(scope, created_at__lt=cutoff)
    return _in_batches(rows, lambda pks: AuditEvent.objects.filter(pk__in=pks).delete()[0])


def _record(institution: Institution, done: Applied, now: datetime) -> None:
    audit_event_record(
        action=AuditEvent.Action.RETENTION_APPLIED,
        actor_name="apply_retention",
        institution=institution.pk,
        target=f"institution:{institution.pk}",
        detail={
            **asdict(done),
            "ledger_identity_days": institution.ledger_identity_days,
            "audit_log_days": institution.audit_log_days,
            "at": now.isoformat(),
        },
    )
