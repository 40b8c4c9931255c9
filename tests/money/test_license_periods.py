"""A license's budget periods (daily, weekly, monthly) in its institution's time zone (issue 37):
a period resets at the institution's midnight, Monday's midnight and the 1st's, a DST day lasts 23
or 25 hours, an institution that set no zone keeps UTC's windows (the same wallets as before);
through /v1 with the clock frozen, the wallets' windows in the database, GET /v1/license, the
portal's and the admin's "resets" and the management API's usage."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import clock
from core.errors import BudgetConfigurationError
from core.localcache import clear_all
from licensing.console.usage import licenses_usage
from licensing.ledger.budget import next_window_start, window_start
from licensing.models import Wallet

SMALL = "text-embedding-3-small"
BODY = {"model": SMALL, "input": "a few words to embed", "encoding_format": "float"}
BERLIN = "Europe/Berlin"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- the calendar (no database) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        # Berlin is UTC+1 in winter, UTC+2 in summer.
        ("daily", utc(2026, 1, 15, 22, 59), utc(2026, 1, 14, 23), utc(2026, 1, 15, 23)),
        ("daily", utc(2026, 1, 15, 23, 0), utc(2026, 1, 15, 23), utc(2026, 1, 16, 23)),
        # 29 March 2026: clocks go 02:00 -> 03:00, the day is 23 hours long.
        ("daily", utc(2026, 3, 29, 12), utc(2026, 3, 28, 23), utc(2026, 3, 29, 22)),
        # 25 October 2026: clocks go 03:00 -> 02:00, the day is 25 hours long.
        ("daily", utc(2026, 10, 25, 12), utc(2026, 10, 24, 22), utc(2026, 10, 25, 23)),
        ("daily", utc(2026, 10, 25, 22, 59), utc(2026, 10, 24, 22), utc(2026, 10, 25, 23)),
        # Weeks from Monday's local midnight; the week of 29 March is an hour short.
        ("weekly", utc(2026, 3, 29, 21, 59), utc(2026, 3, 22, 23), utc(2026, 3, 29, 22)),
        ("weekly", utc(2026, 3, 29, 22, 0), utc(2026, 3, 29, 22), utc(2026, 4, 5, 22)),
        # Months from the 1st's local midnight.
        ("monthly", utc(2026, 10, 31, 22, 59), utc(2026, 9, 30, 22), utc(2026, 10, 31, 23)),
        ("monthly", utc(2026, 10, 31, 23, 0), utc(2026, 10, 31, 23), utc(2026, 11, 30, 23)),
        ("monthly", utc(2026, 12, 31, 23, 30), utc(2026, 12, 31, 23), utc(2027, 1, 31, 23)),
    ],
)
def test_license_periods_start_at_the_institutions_midnight(period, now, start, end):
    assert window_start(period, now, BERLIN) == start
    assert next_window_start(period, now, BERLIN) == end


def test_utc_windows_are_unchanged_and_lifetime_never_resets():
    now = utc(2026, 11, 26, 23, 30)  # a Thursday
    assert window_start("daily", now) == window_start("daily", now, "UTC") == utc(2026, 11, 26)
    assert window_start("weekly", now) == utc(2026, 11, 23)
    assert window_start("monthly", now) == utc(2026, 11, 1)
    assert next_window_start("monthly", utc(2026, 12, 31, 23)) == utc(2027, 1, 1)
    assert window_start("lifetime", now, BERLIN) == datetime(1970, 1, 1, tzinfo=UTC)
    assert next_window_start("lifetime", now, BERLIN) is None
    # Tokyo has no DST and is 9 hours ahead: its day starts at 15:00 UTC the day before.
    assert window_start("daily", now, "Asia/Tokyo") == utc(2026, 11, 26, 15)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", ""])
def test_an_unknown_zone_or_period_is_a_configuration_error(zone):
    with pytest.raises(BudgetConfigurationError):
        window_start("daily", utc(2026, 1, 1), zone)
    with pytest.raises(BudgetConfigurationError):
        window_start("hourly", utc(2026, 1, 1), BERLIN)


# --- through the gateway ----------------------------------------------------------------------


def _berlin_license(make_license, make_key, **budget):
    license = make_license(name="berlin", strategy="pooled", **budget)
    institution = license.institution
    institution.timezone = BERLIN
    institution.save()
    clear_all()
    return license, {"Authorization": f"Bearer {make_key(license)}"}


@pytest.mark.django_db(transaction=True)
def test_a_daily_budget_resets_at_the_institutions_midnight(
    catalog, client, make_license, make_key
):
    license, auth = _berlin_license(make_license, make_key, limit=2, period="daily")

    def status() -> int:
        return client.post("/v1/embeddings", headers=auth, json=BODY).status_code

    # 15 January 2026, 23:30 in Berlin (22:30 UTC): the Berlin day began at 14 Jan 23:00 UTC.
    with clock.frozen(utc(2026, 1, 15, 22, 30).timestamp()) as frozen:
        assert [status(), status(), status()] == [200, 200, 400]
        budget = client.get("/v1/license", headers=auth).json()["budget"]
        assert budget["window_start"] == "2026-01-14T23:00:00+00:00"
        assert (budget["used"], budget["remaining"]) == (2, 0)
        frozen.advance(29 * 60)  # 22:59 UTC, 23:59 in Berlin: the same day, still spent
        assert status() == 400
        frozen.advance(60)  # 23:00 UTC: midnight in Berlin, a new day (UTC's is an hour away)
        assert status() == 200
        usage = licenses_usage([license], now=utc(2026, 1, 15, 23, 0))[license.pk]
        assert (usage.window_start, usage.resets_at) == (utc(2026, 1, 15, 23), utc(2026, 1, 16, 23))
        assert (usage.spent, usage.remaining) == (1, 1)
    windows = dict(Wallet.objects.filter(license=license).values_list("window_start", "spent"))
    assert windows == {utc(2026, 1, 14, 23): 2, utc(2026, 1, 15, 23): 1}


@pytest.mark.django_db(transaction=True)
def test_a_daily_budget_on_the_25_hour_day(catalog, client, make_license, make_key):
    license, auth = _berlin_license(make_license, make_key, limit=1, period="daily")

    def status() -> int:
        return client.post("/v1/embeddings", headers=auth, json=BODY).status_code

    # 25 October 2026 in Berlin: from 24 Oct 22:00 UTC to 25 Oct 23:00 UTC.
    with clock.frozen(utc(2026, 10, 24, 22, 0).timestamp()) as frozen:
        assert [status(), status()] == [200, 400]
        frozen.advance(24 * 3600)  # 22:00 UTC on the 25th: 24 hours on, still the same day
        assert status() == 400
        frozen.advance(3600)  # the 25th hour ends: a new day
        assert status() == 200
    windows = dict(Wallet.objects.filter(license=license).values_list("window_start", "spent"))
    assert windows == {utc(2026, 10, 24, 22): 1, utc(2026, 10, 25, 23): 1}


@pytest.mark.django_db(transaction=True)
def test_an_institution_without_a_zone_keeps_utc_windows(catalog, client, make_license, make_key):
    license = make_license(name="utc", limit=5, period="daily")
    assert license.institution.timezone == "UTC"
    auth = {"Authorization": f"Bearer {make_key(license)}"}
    with clock.frozen(utc(2026, 1, 15, 23, 30).timestamp()):
        assert client.post("/v1/embeddings", headers=auth, json=BODY).status_code == 200
    assert list(Wallet.objects.filter(license=license).values_list("window_start", flat=True)) == [
        utc(2026, 1, 15)
    ]


@pytest.mark.django_db
def test_the_budget_alert_names_the_window_by_the_institutions_day(make_license):
    from django.contrib.auth import get_user_model
    from django.core import mail

    from licensing.ledger.alerts import send_budget_alert
    from licensing.models import AdminProfile, BudgetAlert

    license = make_license(name="berlin-alert", limit=10, period="daily")
    license.institution.timezone = BERLIN
    license.institution.save()
    head = get_user_model().objects.create_user("head", email="head@school.test", is_staff=True)
    AdminProfile.objects.create(user=head, institution=license.institution, role="admin")
    # The Berlin day of 15 January starts at 23:00 UTC on the 14th.
    alert = BudgetAlert.objects.create(
        license=license,
        period="daily",
        window_start=utc(2026, 1, 14, 23),
        holder="license",
        spent=8,
        threshold=8,
        limit=10,
    )
    mail.outbox.clear()
    send_budget_alert(alert.pk)
    assert "in the daily window from 2026-01-15 (Europe/Berlin)" in mail.outbox[0].body
