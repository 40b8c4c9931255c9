"""The institution's safeguarding settings in the admin: its admins switch alerts on and choose
categories, thresholds and retention (audited); nobody else may, and never another
institution's."""

from __future__ import annotations

import pytest

from licensing.models import AuditEvent, SafeguardingSettings
from licensing.models.safeguarding import CATEGORIES

from .conftest import signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]
ADD = "/admin/licensing/safeguardingsettings/add/"


def form(institution, **extra) -> dict:
    data = {
        "institution": institution.pk,
        "enabled": "on",
        "categories": ["self-harm", "violence"],
        "retention_days": "14",
    }
    data.update(extra)
    return data


def test_an_institution_admin_switches_alerts_on_with_categories_and_thresholds(world):
    a = world["a"]
    SafeguardingSettings.objects.all().delete()
    client = signed_in(a["admin"])
    page = client.get(ADD)
    assert page.status_code == 200
    threshold = f"threshold_{CATEGORIES.index('violence')}"
    response = client.post(ADD, form(a["institution"], **{threshold: "0.35"}))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = SafeguardingSettings.objects.get(institution=a["institution"])
    assert (row.enabled, row.categories, row.thresholds, row.retention_days) == (
        True,
        ["self-harm", "violence"],
        {"violence": 0.35},
        14,
    )
    event = AuditEvent.objects.get(action="safeguarding_settings")
    assert (event.actor, event.institution) == (a["admin"], a["institution"])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retention_days", "0"),
        ("retention_days", "100000"),
        ("threshold_0", "1.5"),
        ("threshold_0", "nan"),
        ("categories", "no-such-category"),
        ("retention_days", "1\x00"),
    ],
)
def test_hostile_settings_are_form_errors(world, field, value):
    a = world["a"]
    SafeguardingSettings.objects.all().delete()
    response = signed_in(a["admin"]).post(ADD, form(a["institution"], **{field: value}))
    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    assert not SafeguardingSettings.objects.exists()


@pytest.mark.parametrize("who", ["teacher", "contact"])
def test_teachers_and_contacts_do_not_change_the_settings(world, who):
    response = signed_in(world["a"][who]).get("/admin/licensing/safeguardingsettings/")
    assert response.status_code == 403


def test_another_institutions_settings_are_404_and_cannot_be_made(world):
    a, b = world["a"], world["b"]
    client = signed_in(a["admin"])
    theirs = SafeguardingSettings.objects.get(institution=b["institution"])
    url = f"/admin/licensing/safeguardingsettings/{theirs.pk}/change/"
    assert client.get(url).status_code == 404
    SafeguardingSettings.objects.filter(institution=b["institution"]).delete()
    response = client.post(ADD, form(b["institution"]))
    assert response.status_code == 200  # not a choice of theirs
    assert not SafeguardingSettings.objects.filter(institution=b["institution"]).exists()


def test_an_admin_may_make_a_colleague_a_safeguarding_contact(world):
    from licensing.access.colleagues import ASSIGNABLE_ROLES

    assert "safeguarding" in [role.value for role in ASSIGNABLE_ROLES]
