"""`manage.py apply_retention`: alerts (and the flagged messages in them) older than their
institution's retention period (default 30 days) are deleted, with an audit row, on a clock the
test moves (core.clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from core import clock
from licensing.models import AuditEvent, SafeguardingAlert, SafeguardingSettings

from .conftest import raise_alert

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
DAY = 86_400


def retention() -> str:
    out = StringIO()
    call_command("apply_retention", stdout=out)
    return out.getvalue()


def test_alerts_go_after_the_institutions_retention_period(world):
    a, b = world["a"], world["b"]
    SafeguardingSettings.objects.filter(institution=b["institution"]).update(retention_days=7)
    with clock.frozen(T0.timestamp()) as frozen:
        old_a, old_b = raise_alert(a), raise_alert(b)
        frozen.advance(6 * DAY)
        newer_a, newer_b = raise_alert(a), raise_alert(b)
        assert newer_b is not None
        frozen.advance(1 * DAY + 1)  # old_b is 7 days and a second old
        assert "safeguarding alerts deleted: 1" in retention()
        assert not SafeguardingAlert.objects.filter(pk=old_b.pk).exists()
        assert SafeguardingAlert.objects.filter(pk=old_a.pk).exists()
        frozen.advance(23 * DAY)  # old_a: 30 days and a second
        out = retention()
        assert (
            "safeguarding alerts deleted: 2" in out
        )  # old_a, and newer_b (24 days old, over its 7)
        remaining = set(SafeguardingAlert.objects.values_list("pk", flat=True))
        assert remaining == {newer_a.pk}
        frozen.advance(6 * DAY)  # newer_a at 30 days and a second
        assert "safeguarding alerts deleted: 1" in retention()
    assert not SafeguardingAlert.objects.exists()
    rows = AuditEvent.objects.filter(
        action="retention_applied", target="safeguarding_alerts"
    ).order_by("id")
    assert [(r.institution_id, r.detail["deleted"]) for r in rows] == [
        (b["institution"].pk, 1),
        (a["institution"].pk, 1),
        (b["institution"].pk, 1),
        (a["institution"].pk, 1),
    ]


def test_the_default_is_30_days_and_nothing_younger_goes(world):
    a = world["a"]
    SafeguardingSettings.objects.filter(institution=a["institution"]).delete()
    with clock.frozen(T0.timestamp()) as frozen:
        alert = raise_alert(a) or SafeguardingAlert.objects.create(
            institution=a["institution"],
            end_user=a["student"],
            direction="input",
            created_at=T0,
        )
        frozen.advance(30 * DAY)
        assert "safeguarding alerts deleted: 0" in retention()
        frozen.advance(1)
        retention()
    assert not SafeguardingAlert.objects.filter(pk=alert.pk).exists()
    assert timedelta(days=30) == timedelta(days=SafeguardingSettings().retention_days)
