"""Writes to licensing (operator commands and the admin call these)."""

from __future__ import annotations

import copy

from django.core.exceptions import ValidationError
from django.db import transaction

from core.text import is_storable_text

from ..models import AuditEvent, Institution, License, LicenseType
from ..rules.policy import PolicyDocumentError, open_policy_document, validate_policy_document
from ..rules.presets import PRESETS
from .audit import audit_event_record
from .changes import audit_row_change, stored_snapshot

DEFAULT_INSTITUTION = "Default institution"
OPEN_TYPE = "Open access"


@transaction.atomic
def license_create(
    *,
    name: str,
    institution: str = DEFAULT_INSTITUTION,
    policy: dict | None = None,
    limit: int | None = None,
    period: str = "lifetime",
    strategy: str = "pooled",
) -> License:
    if License.objects.filter(name=name).exists():
        raise ValidationError(f"A license named {name!r} already exists")
    if period not in License.Period.values:
        raise ValidationError(f"Unknown period {period!r}; use one of {License.Period.values}")
    if strategy not in License.Strategy.values:
        raise ValidationError(
            f"Unknown strategy {strategy!r}; use one of {License.Strategy.values}"
        )
    if limit is not None and limit < 0:
        raise ValidationError("The limit must be >= 0")
    owner, _ = Institution.objects.get_or_create(name=institution)
    if policy is None:
        license_type, _ = LicenseType.objects.get_or_create(
            institution=None, name=OPEN_TYPE, defaults={"policy": open_policy_document()}
        )
    else:
        try:
            validate_policy_document(policy)
        except PolicyDocumentError as exc:
            raise ValidationError(f"Invalid policy: {exc}") from exc
        license_type = LicenseType.objects.create(
            institution=owner, name=f"{name} policy", policy=policy
        )
    return License.objects.create(
        institution=owner,
        license_type=license_type,
        name=name,
        budget_limit=limit,
        budget_period=period,
        budget_strategy=strategy,
    )


@transaction.atomic
def institution_admin_create(
    *, institution: str, username: str, role: str, password: str, email: str = ""
):
    """A staff user tied to one institution with a role (see licensing.access.scoping)."""
    from django.contrib.auth import get_user_model

    from ..models import AdminProfile

    if role not in AdminProfile.Role.values:
        raise ValidationError(f"Unknown role {role!r}; use one of {AdminProfile.Role.values}")
    owner = Institution.objects.filter(name=institution).first()
    if owner is None:
        known = list(Institution.objects.values_list("name", flat=True)[:20])
        raise ValidationError(f"No institution named {institution!r}; known: {known}")
    if not password:
        raise ValidationError("The password cannot be empty")
    User = get_user_model()
    if User.objects.filter(username=username).exists():
        raise ValidationError(f"A user named {username!r} already exists")
    user = User.objects.create_user(username, email=email, password=password, is_staff=True)
    AdminProfile.objects.create(user=user, institution=owner, role=role)
    return user


@transaction.atomic
def api_key_revoke(*, key_id: int) -> None:
    from ..models import ApiKey

    row = ApiKey.objects.select_for_update().get(pk=key_id)
    if row.active:
        row.active = False
        row.save(update_fields=["active", "updated_at"])  # post_save clears the API's caches


@transaction.atomic
def api_key_rotate(*, key_id: int):
    """A new key of the same kind on the same license (and end user and course), with the same
    name and expiry; the old one is revoked. Returns (new row, full new key)."""
    from ..models import ApiKey
    from .credentials import api_key_create

    old = ApiKey.objects.select_for_update().select_related("license").get(pk=key_id)
    row, key = api_key_create(
        license=old.license,
        name=old.name,
        expires_at=old.expires_at,
        kind=old.kind,
        end_user=old.end_user,
        course=old.course,
    )
    if old.active:
        old.active = False
        old.save(update_fields=["active", "updated_at"])
    return row, key


# The institution's settings `configure_institution` sets (validated by the admin's form).
INSTITUTION_SETTINGS = (
    "timezone",
    "language",
    "currency",
    "micro_credits_per_currency_unit",
    "portal_key_limit",
    "terms_of_use",
    "ledger_identity_days",
    "audit_log_days",
)


@transaction.atomic
def do_configure_institution(
    institution: Institution, changes: dict, *, actor_name: str = ""
) -> Institution:
    """Save an institution (new or not) with `changes`, values its admin form has checked;
    a change of its time zone or money rate lands in the audit log with before and after."""
    unknown = sorted(set(changes) - set(INSTITUTION_SETTINGS))
    if unknown:
        raise ValidationError(f"Not an institution setting: {unknown}")
    before = stored_snapshot(institution)
    for name, value in changes.items():
        setattr(institution, name, value)
    institution.save()
    audit_row_change(institution, before, actor_name=actor_name)
    return institution


@transaction.atomic
def do_create_license_type(
    *, preset: str, institution: Institution, name: str = "", actor_name: str = ""
) -> LicenseType:
    """A license type of the institution started from a preset (licensing.rules.presets):
    its policy and guardrails checked like any, an audit row `policy_changed`."""
    chosen = PRESETS.get(preset)
    if chosen is None:
        raise ValidationError(f"Unknown preset {preset!r}; use one of {sorted(PRESETS)}")
    name = (name or f"{chosen.label}").strip()
    if not name or len(name) > 200 or not is_storable_text(name):
        raise ValidationError("The name: 1 to 200 characters, no NUL")
    if LicenseType.objects.filter(institution=institution, name=name).exists():
        raise ValidationError(f"The institution already has a license type named {name!r}")
    license_type = LicenseType(
        institution=institution,
        name=name,
        policy=copy.deepcopy(chosen.policy),
        guardrails=copy.deepcopy(chosen.guardrails),
    )
    license_type.full_clean()
    license_type.save()
    audit_event_record(
        action=AuditEvent.Action.POLICY_CHANGED,
        actor_name=actor_name,
        institution=institution,
        target=f"license_type:{license_type.pk}",
        detail={"created": True, "preset": preset},
    )
    return license_type
