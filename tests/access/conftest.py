"""The scoping tests' world: two institutions with one of every licensing row each."""

from __future__ import annotations

import pytest

from licensing.models import BudgetAlert, LicenseType

from ..console.test_admin import make_licensing


@pytest.fixture
def world(db):
    from catalog.services import catalog_load_defaults

    catalog_load_defaults()
    a, b = make_licensing("a"), make_licensing("b")
    for suffix, found in (("a", a), ("b", b)):
        own_type = LicenseType.objects.create(
            institution=found["institution"], name=f"type {suffix}"
        )
        found["license"].license_type = own_type
        found["license"].save()
        found["license_type"] = own_type
        found["budget_alert"] = BudgetAlert.objects.get(license=found["license"])
    return {"a": a, "b": b}
