"""The student's data-flow page (/portal/data/) says, when their institution has alerts on, that
a flagged message is kept for its retention period and who can read it; nothing when off."""

from __future__ import annotations

import pytest

from licensing.models import SafeguardingSettings

from .conftest import signed_in

pytestmark = pytest.mark.django_db


def data_page(world) -> str:
    response = signed_in(world["a"]["pupil"]).get("/portal/data/")
    assert response.status_code == 200
    return " ".join(response.content.decode().split())


def test_alerts_on_the_page_says_how_long_and_who_reads(world):
    SafeguardingSettings.objects.filter(institution=world["a"]["institution"]).update(
        retention_days=21
    )
    body = data_page(world)
    assert 'id="safeguarding-notice"' in body
    assert "keep that message, and only that message, for 21 days" in body
    assert "Your course's teachers and your institution's safeguarding contacts can read it" in (
        body.replace("&#x27;", "'")
    )


def test_alerts_off_the_page_says_nothing_of_them(world):
    SafeguardingSettings.objects.filter(institution=world["a"]["institution"]).update(enabled=False)
    assert "safeguarding-notice" not in data_page(world)


def test_the_page_in_german(world):
    response = signed_in(world["a"]["pupil"]).get("/portal/data/", HTTP_ACCEPT_LANGUAGE="de")
    body = " ".join(response.content.decode().split())
    assert "diese Nachricht, und nur diese, 30 Tage auf" in body
    assert "die Schutzbeauftragten deiner Einrichtung können sie lesen" in body
