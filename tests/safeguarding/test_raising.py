"""Alerts raised by the pipeline (issue 39, item 1): a student's message or the answer to them
flagged by the moderation guardrail is answered exactly as before (400, refused or charged) and
raises an alert with who, which course, when, the categories and scores and only the flagged
text, sealed in its column; nothing when alerts are off, for a plain license key, or when no
chosen category is raised."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from core.crypto import Sealed
from licensing.models import AuditEvent, SafeguardingAlert, SafeguardingSettings, Transaction
from licensing.safeguarding.notify import wait_for_mail
from tests.kit import error

from .conftest import moderate

MINI = "gpt-4o-mini"
BLOCKED = "Request blocked by guardrail"


def chat(client, auth, *messages: str):
    body = {"model": MINI, "messages": [{"role": "user", "content": m} for m in messages]}
    return client.post("/v1/chat/completions", json=body, headers=auth)


def stored_content(alert: SafeguardingAlert) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM licensing_safeguardingalert WHERE id = %s", [alert.pk])
        return cursor.fetchone()[0]


@pytest.fixture(autouse=True)
def _mail_sent():
    yield
    wait_for_mail()  # no e-mail thread left running into the next test's database


def test_alerts_are_off_by_default_and_the_answer_is_unchanged(client, live_world):
    a = live_world["a"]
    SafeguardingSettings.objects.filter(institution=a["institution"]).delete()
    response = chat(client, a["auth"], "I want to hurt myself")
    assert error(response, 400) == BLOCKED
    assert response.json() == {"error": {"message": BLOCKED}}
    assert not SafeguardingAlert.objects.exists()
    SafeguardingSettings.objects.create(institution=a["institution"])  # saved, not switched on
    assert error(chat(client, a["auth"], "I want to hurt myself"), 400) == BLOCKED
    assert not SafeguardingAlert.objects.exists()


def test_a_flagged_input_is_refused_as_today_and_raises_an_alert(client, catalog, live_world):
    a = live_world["a"]
    response = chat(client, a["auth"], "what is photosynthesis", "I want to HURT MYSELF tonight")
    assert response.status_code == 400
    assert response.json() == {"error": {"message": BLOCKED}}  # the body as before
    assert [r.path for r in catalog["direct"].requests] == ["/v1/moderations"]  # no chat call
    row = Transaction.objects.get()
    assert (row.status_code, row.error_code, row.credits) == (400, "guardrail_blocked", 0)
    alert = SafeguardingAlert.objects.get()
    assert (alert.institution, alert.course, alert.end_user) == (
        a["institution"],
        a["course"],
        a["student"],
    )
    assert (alert.direction, alert.status, alert.request_id) == ("input", "open", row.request_id)
    assert alert.categories == ["self-harm", "self-harm/intent"]
    assert alert.scores["self-harm"] == pytest.approx(0.91)
    assert isinstance(alert.content, Sealed)
    assert json.loads(alert.content.reveal()) == ["I want to HURT MYSELF tonight"]  # only it
    raw = stored_content(alert)
    assert "HURT" not in raw and "photosynthesis" not in raw  # sealed at rest
    audit = AuditEvent.objects.get(action="safeguarding_raised")
    assert audit.target == f"safeguarding_alert:{alert.pk}"
    assert audit.detail == {}  # the audit log (read by admins) says nothing of its content


def test_a_flagged_output_is_charged_as_today_and_raises_an_alert(client, catalog, live_world):
    a = live_world["a"]
    catalog["direct"].reply_text = "Here is how to kill the process"
    response = chat(client, a["auth"], "how do I stop a program?")
    assert error(response, 400) == BLOCKED
    row = Transaction.objects.get()
    assert row.status_code == 400 and row.credits > 0 and row.error_code == "output_blocked"
    alert = SafeguardingAlert.objects.get()
    assert (alert.direction, alert.categories) == ("output", ["violence"])
    assert json.loads(alert.content.reveal()) == ["Here is how to kill the process"]


def test_a_plain_license_key_raises_no_alert(client, live_world, make_key):
    plain = {"Authorization": f"Bearer {make_key(live_world['a']['license'])}"}
    assert error(chat(client, plain, "I want to hurt myself"), 400) == BLOCKED
    assert Transaction.objects.get().status_code == 400
    assert not SafeguardingAlert.objects.exists()


def test_a_clean_request_raises_nothing(client, live_world):
    response = chat(client, live_world["a"]["auth"], "hello there")
    assert response.status_code == 200
    assert not SafeguardingAlert.objects.exists()


def test_categories_not_chosen_raise_none_though_the_request_is_refused(client, live_world):
    a = live_world["a"]
    SafeguardingSettings.objects.filter(institution=a["institution"]).update(
        categories=["violence"]
    )
    assert error(chat(client, a["auth"], "I want to hurt myself"), 400) == BLOCKED
    assert not SafeguardingAlert.objects.exists()
    assert error(chat(client, a["auth"], "a bomb"), 400) == BLOCKED
    assert SafeguardingAlert.objects.get().categories == ["violence"]


def test_a_threshold_raises_a_category_the_provider_did_not_flag(client, live_world):
    a = live_world["a"]
    SafeguardingSettings.objects.filter(institution=a["institution"]).update(
        categories=["harassment/threatening"], thresholds={"harassment/threatening": 0.4}
    )
    assert error(chat(client, a["auth"], "kill"), 400) == BLOCKED  # scored 0.41, not flagged
    alert = SafeguardingAlert.objects.get()
    assert alert.categories == ["harassment/threatening"]
    assert alert.scores["harassment/threatening"] == pytest.approx(0.41)
    SafeguardingAlert.objects.all().delete()
    SafeguardingSettings.objects.filter(institution=a["institution"]).update(
        thresholds={"harassment/threatening": 0.5}
    )
    assert error(chat(client, a["auth"], "kill"), 400) == BLOCKED
    assert not SafeguardingAlert.objects.exists()


def test_settings_are_per_institution(client, live_world, make_key):
    a, b = live_world["a"], live_world["b"]
    moderate(b["license"])
    SafeguardingSettings.objects.filter(institution=b["institution"]).update(enabled=False)
    assert error(chat(client, b["auth"], "I want to hurt myself"), 400) == BLOCKED
    assert not SafeguardingAlert.objects.exists()
    assert error(chat(client, a["auth"], "I want to hurt myself"), 400) == BLOCKED
    assert SafeguardingAlert.objects.get().institution == a["institution"]


def test_an_alert_that_cannot_be_written_leaves_the_answer_and_the_charge_alone(
    client, catalog, live_world, monkeypatch
):
    from licensing.safeguarding import services

    def broken(**kwargs):
        raise RuntimeError("the alert table is gone")

    monkeypatch.setattr(services.SafeguardingAlert.objects, "create", broken)
    catalog["direct"].reply_text = "kill"
    response = chat(client, live_world["a"]["auth"], "hello")
    assert error(response, 400) == BLOCKED
    row = Transaction.objects.get()
    assert row.credits > 0 and row.status_code == 400
    assert not SafeguardingAlert.objects.exists()


def test_the_unflagged_path_reads_nothing_more(client, live_world, make_key, monkeypatch):
    """The institution's settings are read only after a flag: never for a clean request, nor
    for a flag of a plain license key."""
    from licensing.safeguarding import services

    reads: list[int] = []
    real = services.settings_of
    monkeypatch.setattr(services, "settings_of", lambda pk: reads.append(pk) or real(pk))
    a = live_world["a"]
    assert chat(client, a["auth"], "hello there").status_code == 200
    plain = {"Authorization": f"Bearer {make_key(a['license'])}"}
    assert error(chat(client, plain, "I want to hurt myself"), 400) == BLOCKED
    assert reads == []
    assert error(chat(client, a["auth"], "I want to hurt myself"), 400) == BLOCKED
    assert reads == [a["institution"].pk]


def test_a_streamed_request_is_alerted_on_its_input(client, live_world):
    a = live_world["a"]
    body = {
        "model": MINI,
        "stream": True,
        "messages": [{"role": "user", "content": "I want to hurt myself"}],
    }
    response = client.post("/v1/chat/completions", json=body, headers=a["auth"])
    assert error(response, 400) == BLOCKED
    assert SafeguardingAlert.objects.get().direction == "input"


def test_a_front_end_keys_student_raises_an_alert_of_their_own(client, catalog, transactional_db):
    """A chat front end (Open WebUI) acting for a student by their e-mail: the alert names the
    student its headers named, in their institution."""
    from ..frontend.conftest import as_user, make_school
    from .conftest import switch_on

    school = make_school("Front School")
    moderate(school.license)
    switch_on(school.license.institution)
    student = school.student("ana@front.example")
    body = {"model": MINI, "messages": [{"role": "user", "content": "I want to hurt myself"}]}
    response = client.post(
        "/v1/chat/completions", json=body, headers=as_user(school.key, "ana@front.example")
    )
    assert error(response, 400) == BLOCKED
    alert = SafeguardingAlert.objects.get()
    assert (alert.end_user, alert.institution) == (student, school.license.institution)
