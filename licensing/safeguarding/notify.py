"""The alert's e-mail: to the course's teachers and the institution's safeguarding contacts (to
the contacts alone when a teacher escalates), in each one's language, with no content: who is
concerned is not named either, only a link to the alert in the admin, where reading it is
audited. Sent after the commit on a thread of its own: never blocking or failing a request."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.mail import send_mail
from django.db import close_old_connections, connections, transaction
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext

from core.config import get_config

from .selectors import recipients

logger = logging.getLogger("gateway")
_mailer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safeguarding-mail")


def alert_link(alert_id: int) -> str:
    """The alert's change page in the admin, as browsers reach the gateway."""
    path = reverse("admin:licensing_safeguardingalert_change", args=[alert_id])
    return get_config().GATEWAY_PUBLIC_URL.rstrip("/") + path


def mail_after_commit(
    *, alert_id: int, institution_id: int, course_id: int | None, escalated: bool = False
) -> None:
    """Queue the alert's e-mail once the transaction that wrote it commits."""

    def send() -> None:
        _mailer.submit(_send_in_background, alert_id, institution_id, course_id, escalated)

    transaction.on_commit(send)


def _send_in_background(
    alert_id: int, institution_id: int, course_id: int | None, escalated: bool
) -> None:
    close_old_connections()
    try:
        send_alert_mail(
            alert_id=alert_id,
            institution_id=institution_id,
            course_id=course_id,
            escalated=escalated,
        )
    except Exception:
        logger.exception("safeguarding alert %s: the e-mail could not be sent", alert_id)
    finally:
        connections.close_all()


def _message(alert_id: int, escalated: bool) -> tuple[str, str]:
    subject = gettext("[Inference Gateway] Safeguarding alert #%(id)s") % {"id": alert_id}
    lead = (
        gettext("A safeguarding alert was escalated to you.")
        if escalated
        else gettext("The moderation guardrail flagged a message of a student.")
    )
    body = gettext(
        "%(lead)s\n\nThis e-mail holds no content. Read the alert, and acknowledge, escalate "
        "or close it, in the admin (your reading is recorded in the audit log):\n%(link)s\n"
    ) % {"lead": lead, "link": alert_link(alert_id)}
    return subject, body


def send_alert_mail(
    *, alert_id: int, institution_id: int, course_id: int | None, escalated: bool = False
) -> list[str]:
    """Send the alert's e-mail now; the addresses it went to."""
    people = recipients(institution_id=institution_id, course_id=course_id, contacts_only=escalated)
    if not people:
        logger.warning("safeguarding alert %s: nobody with an e-mail address to tell", alert_id)
        return []
    for language in sorted({language for _email, language in people}):
        with translation.override(language):
            subject, message = _message(alert_id, escalated)
        send_mail(
            subject=subject,
            message=message,
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=sorted({email for email, lang in people if lang == language}),
        )
    return sorted({email for email, _language in people})


def wait_for_mail() -> None:
    """Block until the e-mails queued so far are sent (tests, shutdown)."""
    _mailer.submit(lambda: None).result()
