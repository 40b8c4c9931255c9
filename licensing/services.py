"""Writes to licensing (operator commands and the admin call these)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from .models import Institution, License, LicenseType
from .policy import PolicyDocumentError, open_policy_document, validate_policy_document

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
