"""What changed, for the audit log: the before/after of a row's audited fields (policies,
guardrails, budgets, an institution's money rate) and the API keys' lives. Callers (the admin,
the management API, the commands) hand their request or an operator name; this writes through
the one door, licensing.access.audit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ..models import ApiKey, AuditEvent, Institution, License, LicenseType
from .audit import audit_event_record

POLICY_FIELDS = ("name", "active", "policy", "guardrails")
BUDGET_FIELDS = (
    "budget_unit",
    "budget_strategy",
    "budget_period",
    "budget_limit",
    "alert_threshold_percent",
)
# An institution's money rate, and its time zone: where its budgets' days, weeks and months begin.
RATE_FIELDS = ("currency", "micro_credits_per_currency_unit", "timezone")
# An institution's retention periods (licensing.privacy.retention): a change of only these is
# its own action, for the data-protection officer to find.
RETENTION_FIELDS = ("ledger_identity_days", "audit_log_days")

# What each audited model's change is, and which fields make it.
AUDITED: dict[type, tuple[str, tuple[str, ...]]] = {
    LicenseType: (AuditEvent.Action.POLICY_CHANGED, POLICY_FIELDS),
    License: (AuditEvent.Action.BUDGET_CHANGED, BUDGET_FIELDS),
    Institution: (AuditEvent.Action.BUDGET_CHANGED, RATE_FIELDS + RETENTION_FIELDS),
}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    return value


def snapshot(obj, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: _plain(getattr(obj, name)) for name in fields}


def stored_snapshot(obj) -> dict[str, Any] | None:
    """The audited fields of `obj` as the database holds them now (None: a new row)."""
    _, fields = AUDITED[type(obj)]
    if obj.pk is None:
        return None
    row = type(obj).objects.filter(pk=obj.pk).values(*fields).first()
    return None if row is None else {k: _plain(v) for k, v in row.items()}


def _institution_of(obj) -> int | None:
    if isinstance(obj, Institution):
        return obj.pk
    return obj.institution_id


def audit_row_change(
    obj, before: dict[str, Any] | None, *, request=None, actor_name: str = ""
) -> AuditEvent | None:
    """Record the audited fields that changed between `before` (None: created) and `obj` now;
    nothing when none did."""
    action, fields = AUDITED[type(obj)]
    after = snapshot(obj, fields)
    if before is None:
        detail: dict[str, Any] = {"created": True, "after": after}
    else:
        changed = [name for name in fields if before.get(name) != after[name]]
        if not changed:
            return None
        if set(changed) <= set(RETENTION_FIELDS):
            action = AuditEvent.Action.RETENTION_CHANGED
        detail = {
            "before": {name: before.get(name) for name in changed},
            "after": {name: after[name] for name in changed},
        }
    return audit_event_record(
        action=action,
        request=request,
        actor_name=actor_name,
        institution=_institution_of(obj),
        target=f"{type(obj)._meta.model_name}:{obj.pk}",
        detail={"name": str(obj), **detail},
    )


def audit_api_key(
    row: ApiKey,
    *,
    created: bool,
    via: str,
    request=None,
    actor_name: str = "",
    extra: dict[str, Any] | None = None,
) -> AuditEvent:
    """An API key created (or re-activated) or revoked: which key (its prefix, never the key)."""
    return audit_event_record(
        action=AuditEvent.Action.API_KEY_CREATED if created else AuditEvent.Action.API_KEY_REVOKED,
        request=request,
        actor_name=actor_name,
        institution=row.license.institution_id,
        target=f"api_key:{row.pk}",
        detail={
            "prefix": row.prefix,
            "name": row.name,
            "license": row.license.name,
            "via": via,
            **(extra or {}),
        },
    )
