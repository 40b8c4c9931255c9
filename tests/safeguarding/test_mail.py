"""The alert's e-mail (Django's locmem backend): after the commit, to the course's teachers and
the institution's safeguarding contacts (to the contacts alone on an escalation), in each one's
language, with a link to the alert and no content."""

from __future__ import annotations

import logging

import pytest
from django.core import mail
from django.db import transaction

from licensing.models import AdminProfile
from licensing.safeguarding.notify import send_alert_mail, wait_for_mail

from .conftest import alert_url, raise_alert, signed_in

# The e-mail is sent from a thread of its own, which reads the recipients committed.
pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "I want to hurt myself"


@pytest.fixture
def world(committed_world):
    return committed_world


@pytest.fixture
def gateway_log():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.INFO)
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def sent_after_commit(make):
    result = make()  # no transaction around the test: on_commit runs at once
    wait_for_mail()
    return result


def test_the_alert_is_mailed_after_the_commit_without_content(world, mailoutbox):
    a = world["a"]
    alert = sent_after_commit(lambda: raise_alert(a, text=SECRET))
    (message,) = mailoutbox
    assert sorted(message.to) == ["a-contact@school.example", "a-teacher@school.example"]
    assert f"#{alert.pk}" in message.subject
    assert f"http://127.0.0.1:8000{alert_url(alert)}" in message.body
    for secret in (SECRET, "hurt", "self-harm", "Amira", "a-pupil", "a course"):
        assert secret not in message.body and secret not in message.subject


def test_nothing_is_sent_before_the_commit_nor_after_a_rollback(world, mailoutbox):
    class Undone(Exception):
        pass

    with pytest.raises(Undone), transaction.atomic():
        raise_alert(world["a"])
        wait_for_mail()
        assert mailoutbox == []
        raise Undone
    wait_for_mail()
    assert mailoutbox == []


def test_an_escalation_is_mailed_to_the_contacts_only_without_the_note(world, mailoutbox):
    a = world["a"]
    alert = sent_after_commit(lambda: raise_alert(a))
    mailoutbox.clear()
    response = signed_in(a["teacher"]).post(
        alert_url(alert), {"decision": "escalate", "new_note": "Spoke to Amira at break"}
    )
    assert response.status_code == 302
    wait_for_mail()
    (message,) = mailoutbox
    assert message.to == ["a-contact@school.example"]
    assert "escalated" in message.body and "Amira" not in message.body


def test_each_in_their_language_and_other_institutions_never(world, mailoutbox):
    a = world["a"]
    AdminProfile.objects.filter(user=a["contact"]).update(language="de")
    alert = raise_alert(a)
    assert send_alert_mail(
        alert_id=alert.pk, institution_id=a["institution"].pk, course_id=a["course"].pk
    ) == ["a-contact@school.example", "a-teacher@school.example"]
    by_address = {message.to[0]: message for message in mail.outbox}
    german = by_address["a-contact@school.example"]
    assert german.subject == f"[Inference Gateway] Schutzmeldung #{alert.pk}"
    assert "Diese E-Mail enthält keinen Inhalt" in german.body
    assert "Safeguarding alert" in by_address["a-teacher@school.example"].subject
    everyone = {address for message in mail.outbox for address in message.to}
    assert not any(address.startswith("b-") for address in everyone)
    assert "a-teacher2@school.example" not in everyone and "a-admin@school.example" not in everyone


def test_a_failing_mail_server_fails_nothing(world, settings, gateway_log):
    settings.EMAIL_BACKEND = "tests.safeguarding.test_mail.Broken"
    alert = sent_after_commit(lambda: raise_alert(world["a"]))
    assert alert.pk is not None
    assert any("could not be sent" in r.getMessage() for r in gateway_log)


class Broken:
    def __init__(self, *args, **kwargs):
        pass

    def send_messages(self, messages):
        raise OSError("the SMTP server is down")
