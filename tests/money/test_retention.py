"""Retention (issue 39 item 3; licensing.privacy.retention, `manage.py apply_retention`): after an
institution's period a ledger row no longer says who made the request, the audit log's old rows
go, a course's rows wait for its end date, and no sum moves: wallets, totals per license, course
and month, and a past period's CSV export are the same before and after (the database's own
counts). Requests go through the gateway on a clock the test moves (core.clock)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.db.models import Count, Sum
from django.db.models.functions import TruncMonth

from core import clock
from licensing.models import (
    AuditEvent,
    BudgetAlert,
    Course,
    EndUser,
    Institution,
    Transaction,
    Wallet,
)
from licensing.privacy.retention import PSEUDONYM, do_apply_retention, pseudonym_of
from tests.console.test_manage_api import token_client, user_with
from tests.money.test_course_budget import make_course, member_key

BODY = {"model": "text-embedding-3-small", "input": "a few words to embed"}
T0 = datetime(2025, 1, 10, 9, 0, tzinfo=UTC)
DAY = 86_400


def sums() -> dict:
    """Every figure retention must leave alone."""
    rows = Transaction.objects.all()
    return {
        "rows": rows.aggregate(n=Count("id"), credits=Sum("credits"), tokens=Sum("total_tokens")),
        "license": sorted(rows.values_list("license_id").annotate(Sum("credits"))),
        "course": sorted(
            rows.values_list("course_id").annotate(Sum("credits")), key=lambda r: r[0] or 0
        ),
        "month": sorted(
            rows.annotate(m=TruncMonth("created_at")).values_list("m").annotate(Sum("credits"))
        ),
        "wallets": list(Wallet.objects.order_by("id").values_list("id", "spent")),
        "wallet_rows": sorted(
            rows.filter(wallet__isnull=False).values_list("wallet_id").annotate(Sum("credits"))
        ),
    }


def past_csv(manager, since: datetime, until: datetime) -> tuple[int, int]:
    answer = manager.get(
        "/manage/v1/transactions",
        {"format": "csv", "since": since.isoformat(), "until": until.isoformat()},
    )
    assert answer.status_code == 200
    lines = list(csv.DictReader(io.StringIO(b"".join(answer.streaming_content).decode())))
    return len(lines), sum(int(line["credits"]) for line in lines)


@pytest.fixture
def hill(catalog, client, make_license, make_key):
    """Hill School: a per-user monthly license, a student with a plain key, a course (no end
    date yet) with a member; Vale School keeps everything (no periods)."""
    license = make_license(
        name="hill", institution="Hill School", limit=10_000_000, strategy="per_user",
        period="monthly",
    )  # fmt: skip
    plain_user = EndUser.objects.create(license=license, subject="ada")
    plain = make_key(license, end_user=plain_user, name="Ada's laptop")
    course = make_course(license, allowance=1_000_000, period="week")
    member, member_user = member_key(make_key, course, subject="bo")
    # After make_course, which saves the institution (its time zone).
    Institution.objects.filter(pk=license.institution_id).update(
        ledger_identity_days=90, audit_log_days=60
    )
    vale = make_license(name="vale", institution="Vale School", strategy="per_user")
    Institution.objects.filter(pk=vale.institution_id).update(
        ledger_identity_days=None, audit_log_days=None
    )
    vale_user = EndUser.objects.create(license=vale, subject="cy")
    vale_key = make_key(vale, end_user=vale_user)

    def call(key: str, metadata: str = '{"user": "ada@hill.example"}') -> None:
        headers = {"Authorization": f"Bearer {key}", "X-Service-Metadata": metadata}
        assert client.post("/v1/embeddings", headers=headers, json=BODY).status_code == 200

    return {
        "license": license,
        "course": course,
        "plain": plain,
        "plain_user": plain_user,
        "member": member,
        "member_user": member_user,
        "vale": vale,
        "vale_key": vale_key,
        "call": call,
    }


def test_old_rows_forget_who_and_every_sum_stays(hill, monkeypatch):
    monkeypatch.setattr("licensing.privacy.retention.BATCH", 1)  # a batch a row: the loop too
    call, license = hill["call"], hill["license"]
    manager = token_client(user_with(None, superuser=True))
    with clock.frozen(T0.timestamp()) as frozen:
        for key in ("plain", "member", "vale_key"):
            call(hill[key])
        old = set(Transaction.objects.values_list("pk", flat=True))
        AuditEvent.objects.create(action="sign_in", institution=license.institution,
                                  actor_name="ada@hill.example", created_at=T0)  # fmt: skip
        # 20 May 2025: the old rows are 130 days old, and January's budget window (to 1 February)
        # is wholly older than the 90 days too.
        frozen.advance(130 * DAY)
        call(hill["plain"])
        newer = Transaction.objects.exclude(pk__in=old).get()
        before, csv_before = sums(), past_csv(manager, T0 - timedelta(days=1), T0 + timedelta(1))
        applied = do_apply_retention(now=clock.utcnow())
        assert sums() == before
        assert past_csv(manager, T0 - timedelta(days=1), T0 + timedelta(days=1)) == csv_before
    hill_rows = Transaction.objects.filter(license=license, pk__in=old)
    # The plain key's old row forgot; the course's waits (the course has no end date: its rows
    # follow their own clock, so it forgot too); Vale keeps everything; the newer row keeps.
    assert list(hill_rows.values_list("end_user", "api_key", "metadata").distinct()) == [
        (None, None, {})
    ]
    assert applied[license.institution_id].ledger_rows == 2
    vale_row = Transaction.objects.get(license=hill["vale"])
    assert vale_row.end_user_id is not None and vale_row.metadata
    assert (newer.end_user_id, newer.api_key_id) == (hill["plain_user"].pk, newer.api_key_id)
    assert Transaction.objects.get(pk=newer.pk).end_user_id == hill["plain_user"].pk
    # Closed windows' wallets keep their spend under a pseudonym; the open one keeps its holder.
    holders = set(Wallet.objects.filter(license=license).values_list("holder", flat=True))
    assert f"user:{hill['plain_user'].pk}" in holders  # May's window, still open
    assert pseudonym_of(license.pk, f"user:{hill['plain_user'].pk}") in holders  # January's
    course_id, member_id = hill["course"].pk, hill["member_user"].pk
    assert pseudonym_of(license.pk, f"course:{course_id}:user:{member_id}") in holders
    assert not any(h.endswith(f":user:{member_id}") for h in holders)
    # The audit row about Ada went; the run's own row is there.
    assert not AuditEvent.objects.filter(actor_name="ada@hill.example").exists()
    run = AuditEvent.objects.get(action="retention_applied", institution=license.institution)
    assert run.detail["ledger_rows"] == 2 and run.detail["ledger_identity_days"] == 90


def test_a_second_run_changes_nothing_and_the_budget_goes_on(hill):
    call, license = hill["call"], hill["license"]
    with clock.frozen(T0.timestamp()) as frozen:
        call(hill["plain"])
        frozen.advance(100 * DAY)
        do_apply_retention(now=clock.utcnow())
        before = sums()
        again = do_apply_retention(now=clock.utcnow())
        assert not again[license.institution_id].any()
        assert sums() == before
        call(hill["plain"])  # April's wallet, opened after the run, charges as before
        frozen.advance(30 * DAY)
        call(hill["plain"])
    april = Wallet.objects.get(license=license, holder=f"user:{hill['plain_user'].pk}",
                               window_start=datetime(2025, 4, 1, tzinfo=UTC))  # fmt: skip
    assert april.spent == Transaction.objects.filter(wallet=april).aggregate(s=Sum("credits"))["s"]


def test_a_courses_rows_wait_for_its_end_date(hill):
    call, license, course = hill["call"], hill["license"], hill["course"]
    Course.objects.filter(pk=course.pk).update(ends_at=T0 + timedelta(days=60))
    with clock.frozen(T0.timestamp()) as frozen:
        call(hill["member"])
        row = Transaction.objects.get(course=course)
        frozen.advance(100 * DAY)  # 100 days old, but the course ended only 40 days ago
        do_apply_retention(now=clock.utcnow())
        assert Transaction.objects.get(pk=row.pk).end_user_id == hill["member_user"].pk
        holders = Wallet.objects.filter(license=license).values_list("holder", flat=True)
        assert f"course:{course.pk}:user:{hill['member_user'].pk}" in holders
        frozen.advance(51 * DAY)  # the course ended 91 days ago
        do_apply_retention(now=clock.utcnow())
    row = Transaction.objects.get(pk=row.pk)
    assert (row.end_user_id, row.api_key_id, row.metadata, row.credits) == (
        None,
        None,
        {},
        row.credits,
    )
    holders = Wallet.objects.filter(license=license).values_list("holder", flat=True)
    assert f"course:{course.pk}:user:{hill['member_user'].pk}" not in holders


def test_a_lifetime_wallet_keeps_its_holder_and_budget_alerts_are_pseudonymised(
    make_license, make_key
):
    license = make_license(name="life", institution="Life School", limit=100, strategy="per_user")
    Institution.objects.filter(pk=license.institution_id).update(ledger_identity_days=90)
    user = EndUser.objects.create(license=license, subject="dee")
    holder = f"user:{user.pk}"
    start = T0 - timedelta(days=400)
    Wallet.objects.create(license=license, holder=holder, period="lifetime", window_start=start,
                          unit="micro_credits", spent=90)  # fmt: skip
    Wallet.objects.create(license=license, holder=holder, period="daily", window_start=start,
                          unit="micro_credits", spent=5)  # fmt: skip
    BudgetAlert.objects.create(license=license, period="daily", window_start=start, holder=holder,
                               spent=5, threshold=4, limit=5)  # fmt: skip
    do_apply_retention(now=T0)
    periods = dict(Wallet.objects.values_list("period", "holder"))
    assert periods["lifetime"] == holder  # the budget still enforced on it
    assert periods["daily"].startswith(PSEUDONYM)
    assert BudgetAlert.objects.get().holder == periods["daily"]


def test_the_command_reports_and_empty_periods_keep_everything(hill):
    Institution.objects.update(ledger_identity_days=None, audit_log_days=None)
    with clock.frozen(T0.timestamp()) as frozen:
        hill["call"](hill["plain"])
        frozen.advance(4000 * DAY)
        out = StringIO()
        call_command("apply_retention", stdout=out)
    assert "ledger rows pseudonymised: 0" in out.getvalue()
    assert Transaction.objects.filter(end_user__isnull=False).count() == 1


def test_the_gateway_wide_audit_rows_follow_the_setting(db, settings):
    settings.GATEWAY_AUDIT_LOG_DAYS = 10
    old = AuditEvent.objects.create(action="policy_changed", actor_name="op")
    AuditEvent.objects.filter(pk=old.pk).update(created_at=T0 - timedelta(days=11))
    kept = AuditEvent.objects.create(action="policy_changed", actor_name="op")
    AuditEvent.objects.filter(pk=kept.pk).update(created_at=T0 - timedelta(days=9))
    applied = do_apply_retention(now=T0)
    assert applied[None].audit_rows == 1
    assert list(AuditEvent.objects.filter(actor_name="op").values_list("pk", flat=True)) == [
        kept.pk
    ]


def test_pseudonyms_are_stable_per_person_and_license():
    assert pseudonym_of(1, "user:7") == pseudonym_of(1, "user:7")
    assert pseudonym_of(1, "user:7") != pseudonym_of(2, "user:7")
    assert pseudonym_of(1, "user:7") != pseudonym_of(1, "key:7")
    assert pseudonym_of(1, "course:3:user:7").startswith("course:3:" + PSEUDONYM)
    assert pseudonym_of(1, "license") == "license" and pseudonym_of(1, "course:3") == "course:3"


# --- the periods: the admin's form and configure_institution --------------------------------


def test_configure_institution_sets_the_periods_with_an_audit_row(db):
    out = StringIO()
    call_command("configure_institution", "Hill School", "--create", stdout=out)
    hill = Institution.objects.get(name="Hill School")
    assert (hill.ledger_identity_days, hill.audit_log_days) == (540, 730)  # the defaults
    call_command("configure_institution", "Hill School", "--ledger-identity-days", "365",
                 "--audit-log-days", "", stdout=out)  # fmt: skip
    hill.refresh_from_db()
    assert (hill.ledger_identity_days, hill.audit_log_days) == (365, None)
    row = AuditEvent.objects.get(action="retention_changed")
    assert row.detail["before"] == {"ledger_identity_days": 540, "audit_log_days": 730}
    assert row.detail["after"] == {"ledger_identity_days": 365, "audit_log_days": None}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ledger_identity_days", "0"),
        ("ledger_identity_days", "3651"),
        ("ledger_identity_days", "1e400"),
        ("ledger_identity_days", str(2**64)),
        ("ledger_identity_days", "3\x00"),
        ("audit_log_days", "29"),
        ("audit_log_days", "\ud800"),
    ],
)
def test_hostile_periods_are_refused_by_the_admin(db, field, value):
    from django.core.management.base import CommandError

    Institution.objects.create(name="Hill School")
    admin = user_with(None, superuser=True)
    from django.test import Client

    client = Client()
    client.force_login(admin)
    hill = Institution.objects.get()
    data = {"name": hill.name, "portal_key_limit": 5, "timezone": "UTC", "language": "",
            "ledger_identity_days": "540", "audit_log_days": "730", field: value}  # fmt: skip
    # Encoded by hand: a lone surrogate as the bytes a client would send (invalid UTF-8).
    body = "&".join(
        f"{k}={quote(str(v).encode('utf-8', 'surrogatepass'))}" for k, v in data.items()
    )
    answer = client.post(
        f"/admin/licensing/institution/{hill.pk}/change/",
        body,
        content_type="application/x-www-form-urlencoded",
    )
    assert answer.status_code == 200 and field in answer.context["adminform"].form.errors
    option = "--" + field.replace("_", "-")
    with pytest.raises(CommandError, match=option):
        call_command("configure_institution", "Hill School", option, value, stdout=StringIO())
    hill.refresh_from_db()
    assert (hill.ledger_identity_days, hill.audit_log_days) == (540, 730)
    assert not AuditEvent.objects.filter(action="retention_changed").exists()
