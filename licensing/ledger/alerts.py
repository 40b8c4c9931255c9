"""What the ledger write does besides the charge: an API key's last use, and budget alerts.

Both are decided in memory once a batch of charges is committed (`follow_up`) and written
after it (`follow_ups_write`, licensing.ledger.actions), and cost nothing on most requests:
- `last_used_at` is written at most once a minute per key and process (one conditional
  UPDATE; other processes' writes within the minute are skipped by its WHERE);
- an alert row is inserted only by the charge that moves a wallet from below the license's
  threshold to at or above it (the spend before and after the charge, from the wallet's own
  UPDATE ... RETURNING); the unique (license, period, window) row makes it once per window
  whatever the concurrency. The email goes out after the commit on a background thread, so
  SMTP never holds up a request.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import DatabaseError, close_old_connections, connection, connections, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from core.languages import grouped, supported_language
from core.zones import zone_or_utc

from ..models import AdminProfile, BudgetAlert
from .budget import BudgetState

logger = logging.getLogger("gateway")

LAST_USED_EVERY = timedelta(minutes=1)
_last_used_written: dict[int, float] = {}  # key id -> time.monotonic() of our last write
_mailer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget-alerts")


@dataclass(frozen=True)
class FollowUp:
    """What one charge calls for besides itself (rare: decided in memory)."""

    touch_key: int | None
    alert: tuple[BudgetState, int, int] | None  # budget, spent after, threshold


def follow_up(
    *, api_key_id: int | None, budget: BudgetState, credits: int, spent: int
) -> FollowUp | None:
    """None on most requests: the key was marked used within the minute, no threshold crossed."""
    touch = api_key_id if api_key_id is not None and _due(api_key_id) else None
    threshold = budget.config.alert_at
    crossed = threshold is not None and credits > 0 and spent - credits < threshold <= spent
    if touch is None and not crossed:
        return None
    alert = (budget, spent, threshold) if crossed and threshold is not None else None
    return FollowUp(touch_key=touch, alert=alert)


def follow_ups_write(items: list[FollowUp]) -> None:
    """The database side of `follow_up`s. Alerts first, each batch of them in a transaction of
    its own retried on a transient error, and kept in memory for the next batch when the
    database still refuses (an alert is never lost to a failed last-use write, issue 35); then
    the keys' last use. Both in one order (alerts by their unique window, keys by id): two
    processes writing the same rows in opposite orders deadlocked (`DeadlockDetected` under four
    workers), and the victim's whole batch was lost."""
    alerts = [item.alert for item in items if item.alert is not None]
    _write_alerts(alerts)
    touches = sorted({item.touch_key for item in items if item.touch_key is not None})
    if touches:
        try:
            with transaction.atomic():
                for key_id in touches:
                    _write_last_used(key_id)
        except DatabaseError:
            for key_id in touches:  # due again: the next request of each key writes it
                _last_used_written.pop(key_id, None)
            raise


# Alerts whose write failed every attempt: written before the next batch's (one process's).
_alerts_waiting: list[tuple[BudgetState, int, int]] = []
ALERT_ATTEMPTS = 3


def alerts_waiting() -> bool:
    return bool(_alerts_waiting)


def _write_alerts(new: list[tuple[BudgetState, int, int]]) -> None:
    alerts = sorted([*_alerts_waiting, *new], key=_alert_order)
    _alerts_waiting.clear()
    if not alerts:
        return
    for attempt in range(1, ALERT_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                for budget, spent, threshold in alerts:
                    _record_alert(budget, spent=spent, threshold=threshold)
            return
        except DatabaseError as exc:
            if attempt == ALERT_ATTEMPTS:
                _alerts_waiting.extend(alerts)  # the unique window row keeps a retry single
                logger.error("budget alerts not written (%s); kept for the next batch", exc)
                raise
            close_old_connections()  # a connection the failure broke is replaced


def _alert_order(alert: tuple[BudgetState, int, int]) -> tuple:
    key = alert[0].key
    return (key.license_id, key.period, key.window_start, key.holder)


def _due(key_id: int) -> bool:
    """Whether this process should write the key's last use now (and note that it did)."""
    now_m = time.monotonic()
    last = _last_used_written.get(key_id)
    if last is not None and now_m - last < LAST_USED_EVERY.total_seconds():
        return False
    _last_used_written[key_id] = now_m
    return True


def _write_last_used(key_id: int) -> None:
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE licensing_apikey SET last_used_at = %s "
            "WHERE id = %s AND (last_used_at IS NULL OR last_used_at < %s)",
            [now, key_id, now - LAST_USED_EVERY],
        )


def _record_alert(budget: BudgetState, *, spent: int, threshold: int) -> None:
    quote = connection.ops.quote_name
    columns = ["license_id", "period", "window_start", "holder", "spent", "threshold"]
    columns += ["limit", "created_at", "recipients"]
    key = budget.key
    params: list[Any] = [key.license_id, key.period, key.window_start, key.holder, spent, threshold]
    params += [budget.config.limit, timezone.now(), "[]"]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(BudgetAlert._meta.db_table)} "
            f"({', '.join(quote(c) for c in columns)}) VALUES ({', '.join(['%s'] * len(params))}) "
            "ON CONFLICT DO NOTHING RETURNING id",
            params,
        )
        row = cursor.fetchone()
    if row is not None:
        alert_id = row[0]
        transaction.on_commit(lambda: _mailer.submit(_send_in_background, alert_id))


def _send_in_background(alert_id: int) -> None:
    close_old_connections()
    try:
        send_budget_alert(alert_id)
    except Exception:
        logger.exception("budget alert %s could not be sent", alert_id)
    finally:
        connections.close_all()  # this thread's connection: never left open


def institution_admin_emails(institution_id: int) -> list[str]:
    return sorted({email for email, _language in _institution_admins(institution_id)})


def _institution_admins(institution_id: int) -> list[tuple[str, str]]:
    """(e-mail, language) of the institution's admins: each their own language, else the
    institution's, else the gateway's (licensing.access.languages.language_of, by one query)."""
    users = get_user_model().objects.filter(
        is_active=True,
        gateway_profile__institution_id=institution_id,
        gateway_profile__role=AdminProfile.Role.ADMIN,
    )
    rows = users.exclude(email="").values_list(
        "email", "gateway_profile__language", "gateway_profile__institution__language"
    )
    return [
        (email, supported_language(own) or supported_language(default) or settings.LANGUAGE_CODE)
        for email, own, default in rows
    ]


def _alert_mail(alert: BudgetAlert, lic) -> tuple[str, str]:
    """The alert's subject and text in the active language."""
    holder = (
        ""
        if alert.holder == "license"
        else " " + _("(wallet %(holder)s)") % {"holder": alert.holder}
    )
    if alert.period == "lifetime":
        window = _("its lifetime budget")
    else:
        window = _("the %(period)s window from %(start)s") % {
            "period": _(alert.period),
            "start": _local_day(alert.window_start, lic),
        }
    percent = lic.alert_threshold_percent or round(100 * alert.threshold / alert.limit)
    subject = _("[Inference Gateway] License %(name)s reached %(percent)s%% of its budget") % {
        "name": lic.name,
        "percent": percent,
    }
    message = _(
        "License %(name)s of %(institution)s%(holder)s has spent %(spent)s of %(limit)s "
        "micro-credits in %(window)s (alert threshold %(threshold)s).\n\n"
        "This alert is sent once per budget window."
    ) % {
        "name": lic.name,
        "institution": lic.institution.name,
        "holder": holder,
        "spent": grouped(alert.spent),
        "limit": grouped(alert.limit),
        "window": window,
        "threshold": grouped(alert.threshold),
    }
    return subject, message


def _local_day(instant, lic) -> str:
    """A window's first day as the institution counts days (its time zone), named."""
    zone = zone_or_utc(lic.institution.timezone)
    return f"{instant.astimezone(zone):%Y-%m-%d} ({zone.key})"


def send_budget_alert(alert_id: int) -> None:
    alert = BudgetAlert.objects.select_related("license__institution").get(pk=alert_id)
    if alert.sent_at is not None:
        return
    lic = alert.license
    admins = _institution_admins(lic.institution_id)
    recipients = sorted({email for email, _language in admins})
    if recipients:
        # One message per language, each admin's in theirs (docs/languages.md).
        for language in sorted({language for _email, language in admins}):
            with translation.override(language):
                subject, message = _alert_mail(alert, lic)
            send_mail(
                subject=subject,
                message=message,
                from_email=settings.DEFAULT_FROM_EMAIL,
                recipient_list=sorted({e for e, lang in admins if lang == language}),
            )
    else:
        logger.warning("budget alert for license %s: its institution has no admin email", lic)
    BudgetAlert.objects.filter(pk=alert_id).update(sent_at=timezone.now(), recipients=recipients)


def wait_for_alerts() -> None:
    """Block until the alerts queued so far are sent (tests, shutdown)."""
    _mailer.submit(lambda: None).result()
