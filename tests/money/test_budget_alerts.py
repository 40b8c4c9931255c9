"""Budget alerts (one email to the institution's admins per window, when a request crosses the
license's threshold) and API keys' last use, through the real API and ledger."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.utils import timezone

from licensing.ledger import alerts
from licensing.ledger.actions import _follow_ups_write, transaction_record_once
from licensing.ledger.alerts import FollowUp, wait_for_alerts
from licensing.ledger.budget import BudgetConfig, BudgetState, wallet_key
from licensing.ledger.record import LedgerEntry
from licensing.models import AdminProfile, ApiKey, BudgetAlert, Wallet
from tests.kit import wait_until
from tests.ledger_helpers import budget_for

SMALL = "text-embedding-3-small"


def embed(client, key, text="one two three"):  # 3 tokens: 1 credit
    return client.post(
        "/v1/embeddings",
        json={"model": SMALL, "input": text},
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture
def admins(transactional_db):
    def make(license):
        User = get_user_model()
        for name, role, email in (
            ("head", "admin", "head@school.test"),
            ("deputy", "admin", "deputy@school.test"),
            ("auditor", "reviewer", "auditor@school.test"),
        ):
            user = User.objects.create_user(name, email=email, is_staff=True)
            AdminProfile.objects.create(user=user, institution=license.institution, role=role)
        other = User.objects.create_user("elsewhere", email="x@other.test", is_staff=True)
        from licensing.models import Institution

        AdminProfile.objects.create(
            user=other, institution=Institution.objects.create(name="Other"), role="admin"
        )

    return make


def test_crossing_the_threshold_emails_the_admins_once_per_window(
    client, catalog, make_license, make_key, admins
):
    lic = make_license(limit=6, period="daily")
    lic.alert_threshold_percent = 50  # alert at 3 credits
    lic.save()
    admins(lic)
    key = make_key(lic)
    mail.outbox.clear()
    for _ in range(2):
        assert embed(client, key).status_code == 200
    wait_for_alerts()
    assert mail.outbox == [] and not BudgetAlert.objects.exists()
    assert embed(client, key).status_code == 200  # 2 -> 3: crosses
    wait_for_alerts()
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert sorted(message.to) == ["deputy@school.test", "head@school.test"]
    assert lic.name in message.subject and "50%" in message.subject
    assert "3 of 6 micro-credits" in message.body
    alert = BudgetAlert.objects.get()
    assert (alert.license_id, alert.spent, alert.threshold, alert.limit) == (lic.pk, 3, 3, 6)
    assert alert.sent_at is not None and sorted(alert.recipients) == sorted(message.to)
    for _ in range(3):
        assert embed(client, key).status_code == 200
    assert embed(client, key).status_code == 400  # out of budget
    wait_for_alerts()
    assert len(mail.outbox) == 1 and BudgetAlert.objects.count() == 1


def test_a_license_without_threshold_or_limit_never_alerts(
    client, catalog, make_license, make_key, admins
):
    unlimited = make_license(name="free")
    unlimited.alert_threshold_percent = 10
    unlimited.save()
    quiet = make_license(name="quiet", limit=2)
    admins(quiet)
    mail.outbox.clear()
    for lic in (unlimited, quiet):
        key = make_key(lic)
        for _ in range(2):
            assert embed(client, key).status_code == 200
    wait_for_alerts()
    assert mail.outbox == [] and not BudgetAlert.objects.exists()


def _charge(lic, holder, credits):
    config = BudgetConfig(
        unit="micro_credits",
        strategy=lic.budget_strategy,
        period=lic.budget_period,
        limit=lic.budget_limit,
        alert_at=lic.alert_at,
    )
    state = BudgetState(
        config=config, key=wallet_key(license_id=lic.pk, config=config, holder=holder)
    )
    entry = LedgerEntry(
        request_id=uuid.uuid4().hex,
        license_id=lic.pk,
        api_key_id=None,
        end_user_id=None,
        service="embeddings",
        requested_model=SMALL,
        billed_model=SMALL,
        provider="direct",
        connection="default",
        status_code=200,
        credits=credits,
    )
    transaction_record_once(entry=entry, budget=state)


def test_concurrent_crossings_of_per_user_wallets_alert_once(
    transactional_db, make_license, admins
):
    from django.db import connections

    lic = make_license(name="per-user", limit=100, strategy="per_user", period="monthly")
    lic.alert_threshold_percent = 80
    lic.save()
    admins(lic)
    mail.outbox.clear()
    for holder in ("key:1", "key:2", "key:3", "key:4"):
        _charge(lic, holder, 79)
    barrier = threading.Barrier(4)

    def cross(holder):
        barrier.wait()
        try:
            _charge(lic, holder, 5)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=cross, args=(f"key:{i}",)) for i in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_for_alerts()
    assert BudgetAlert.objects.count() == 1
    assert len(mail.outbox) == 1
    assert set(Wallet.objects.filter(license=lic).values_list("spent", flat=True)) == {84}


def test_an_institution_without_admin_email_still_records_the_alert(transactional_db, make_license):
    lic = make_license(name="lonely", limit=10)
    lic.alert_threshold_percent = 100
    lic.save()
    mail.outbox.clear()
    _charge(lic, "license", 10)
    wait_for_alerts()
    alert = BudgetAlert.objects.get()
    assert alert.sent_at is not None and alert.recipients == [] and mail.outbox == []


def test_last_use_of_a_key_is_recorded_at_most_once_a_minute(
    client, catalog, make_license, make_key
):
    from licensing.ledger import alerts

    lic = make_license(name="used")
    key = make_key(lic)
    row = ApiKey.objects.get(license=lic)
    assert row.last_used_at is None
    before = timezone.now()
    assert embed(client, key).status_code == 200
    row.refresh_from_db()
    first = row.last_used_at
    assert first is not None and first >= before
    assert embed(client, key).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at == first  # within the minute: not written again
    # A minute later (the process's memory and the row both say so), it is written again.
    alerts._last_used_written[row.pk] -= 61
    ApiKey.objects.filter(pk=row.pk).update(last_used_at=first - timedelta(seconds=61))
    assert embed(client, key).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at > first


# --- issue 35: last use and alerts of concurrent batches -------------------------------------


def _alert_of(license, spent=5):
    budget = budget_for(license)
    return FollowUp(touch_key=None, alert=(budget, spent, 3))


def _key_ids(license, count):
    from licensing.access.credentials import api_key_create

    return [api_key_create(license=license, name=f"k{n}")[0].id for n in range(count)]


@pytest.mark.slow  # PostgreSQL's deadlock detector takes its deadlock_timeout (1 s) to decide
def test_two_batches_touching_keys_in_opposite_orders_do_not_deadlock(make_license, monkeypatch):
    """Two processes' batches write the same keys' last use in opposite orders while each
    holds its first row: before issue 35 PostgreSQL found a deadlock and one batch, with its
    budget alert, was lost. Written in id order, the second waits for the first."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite takes one writer at a time: no row locks to deadlock on")
    lic = make_license(name="alerted", limit=6, period="daily")
    first, second = _key_ids(lic, 2)
    paused, resume = threading.Event(), threading.Event()
    original = alerts._write_last_used

    def write_last_used(key_id):
        original(key_id)
        if threading.current_thread().name == "batch-1" and not paused.is_set():
            paused.set()  # batch 1 holds its first row until batch 2 is waiting for a lock
            resume.wait(10)

    monkeypatch.setattr(alerts, "_write_last_used", write_last_used)
    failures: list[BaseException] = []

    def batch(keys, alert):
        try:
            _follow_ups_write([FollowUp(touch_key=k, alert=None) for k in keys] + alert)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            connection.close()

    one = threading.Thread(target=batch, args=([second, first], []), name="batch-1")
    two = threading.Thread(target=batch, args=([first, second], [_alert_of(lic)]), name="batch-2")
    one.start()
    assert paused.wait(10)
    two.start()
    wait_until(_a_lock_is_awaited, what="batch 2 waiting for a row lock")
    resume.set()
    one.join(10), two.join(10)
    assert failures == []
    assert ApiKey.objects.filter(pk__in=[first, second], last_used_at__isnull=False).count() == 2
    assert BudgetAlert.objects.filter(license=lic).count() == 1


def _a_lock_is_awaited() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(  # this database's: other test runs may share the server
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0] > 0


def test_an_alert_whose_write_fails_is_written_with_a_later_batch(make_license):
    """An alert is never lost: retried on a transient error, and when the database refuses
    every attempt, kept and written before the next batch's follow-ups."""
    from django.db import OperationalError

    lic = make_license(name="alerted", limit=6, period="daily")
    refused = {"left": alerts.ALERT_ATTEMPTS - 1}

    def refuse_alerts(execute, sql, params, many, context):
        if "budgetalert" in sql and refused["left"] > 0:
            refused["left"] -= 1
            raise OperationalError("deadlock detected")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_alerts):  # fails twice, then the third attempt
        _follow_ups_write([_alert_of(lic)])
    assert BudgetAlert.objects.filter(license=lic).count() == 1

    other = make_license(name="alerted-too", limit=6, period="daily")
    refused["left"] = alerts.ALERT_ATTEMPTS  # every attempt of this batch fails
    with connection.execute_wrapper(refuse_alerts), pytest.raises(OperationalError):
        _follow_ups_write([_alert_of(other)])
    assert not BudgetAlert.objects.filter(license=other).exists() and alerts.alerts_waiting()
    _follow_ups_write([])  # the next batch, with no follow-ups of its own
    assert BudgetAlert.objects.filter(license=other).count() == 1
    assert not alerts.alerts_waiting()
