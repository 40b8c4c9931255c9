"""An institution's time zone and language (issue 37, item 3): set in its admin page and by
`configure_institution`, both checked alike (an unknown zone, "../etc", NUL, a lone surrogate,
10 kB: a form error or a command error, nothing saved), audited; and used by its staff's pages
(the admin's times, the review page's filters and days, the usage page's days), its students'
portal, while a superuser keeps UTC."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from core.zones import COMMON, zone_choices
from licensing.models import AuditEvent, Institution, Transaction

from ..access.test_scoping import login_as
from .test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db

HOSTILE_ZONES = [
    "Mars/Olympus",
    "../etc/passwd",
    "/etc/localtime",
    "localtime",
    "Europe/Berlin\x00",
    "Europe/\ud800",
    "x" * 10_000,
    "europe/berlin",
]


@pytest.fixture
def found():
    return make_licensing("tz")


def _post(client: Client, institution, **changes):
    change = url(Institution, "change", institution.pk)
    data = {**form_data(client.get(change)), **changes}
    # A lone surrogate cannot be put in a str a test client encodes: send the bytes a browser
    # would (%ED%A0%80).
    body = urlencode(data, doseq=True, errors="surrogatepass")
    return client.post(change, body, content_type="application/x-www-form-urlencoded")


def test_the_admin_page_offers_the_zones_common_ones_first(admin_client, found):
    page = admin_client.get(url(Institution, "change", found["institution"].pk)).content.decode()
    assert 'name="timezone"' in page and 'list="id_timezone-choices"' in page
    datalist = page.split('<datalist id="id_timezone-choices">')[1].split("</datalist>")[0]
    options = [part.split('"')[0] for part in datalist.split('<option value="')[1:]]
    assert options[: len(COMMON)] == list(COMMON)
    assert options == list(zone_choices()) and "Asia/Tokyo" in options
    assert "localtime" not in options and "Factory" not in options
    assert 'name="language"' in page and "The gateway&#x27;s default" in page


def test_the_admin_sets_a_zone_and_a_language_audited(admin_client, found):
    institution = found["institution"]
    response = _post(admin_client, institution, timezone=" Europe/Berlin ", language="de")
    assert response.status_code == 302
    institution.refresh_from_db()
    assert (institution.timezone, institution.language) == ("Europe/Berlin", "de")
    event = AuditEvent.objects.get(action="budget_changed", target=f"institution:{institution.pk}")
    assert event.detail["before"] == {"timezone": "UTC"}
    assert event.detail["after"] == {"timezone": "Europe/Berlin"}


@pytest.mark.parametrize("value", HOSTILE_ZONES, ids=lambda v: repr(v)[:24])
def test_a_zone_that_is_no_zone_is_a_form_error(admin_client, found, value):
    institution = found["institution"]
    response = _post(admin_client, institution, timezone=value)
    assert response.status_code == 200
    assert "timezone" in response.context["adminform"].form.errors
    institution.refresh_from_db()
    assert institution.timezone == "UTC"


@pytest.mark.parametrize("value", ["xx", "de\x00", "d\ud800", "e" * 10_000, "../de"])
def test_a_language_the_gateway_does_not_speak_is_a_form_error(admin_client, found, value):
    institution = found["institution"]
    response = _post(admin_client, institution, language=value)
    assert response.status_code == 200
    assert "language" in response.context["adminform"].form.errors
    institution.refresh_from_db()
    assert institution.language == ""


def test_an_institution_admin_sets_their_own_zone_not_its_name_or_rate(found):
    institution = found["institution"]
    client = login_as("admin", institution)
    page = client.get(url(Institution, "change", institution.pk)).content.decode()
    assert 'name="timezone"' in page and 'name="language"' in page
    assert 'name="currency"' not in page and 'name="name"' not in page  # the operator's
    forged = {"timezone": "Europe/Zurich", "currency": "XAU", "name": "Renamed"}
    assert _post(client, institution, **forged).status_code == 302
    institution.refresh_from_db()
    assert (institution.timezone, institution.currency) == ("Europe/Zurich", "")
    assert institution.name == "Institution tz"
    # Another institution's page is a 404, its row untouched; reviewers may not change theirs.
    other = make_licensing("elsewhere")["institution"]
    response = client.post(url(Institution, "change", other.pk), {"timezone": "Asia/Tokyo"})
    assert response.status_code == 404
    other.refresh_from_db()
    assert other.timezone == "UTC"
    reviewer = login_as("reviewer", institution)
    denied = reviewer.post(url(Institution, "change", institution.pk), {"timezone": "UTC"})
    assert denied.status_code == 403


# --- configure_institution ---------------------------------------------------------------------


def _command(*args) -> str:
    out = io.StringIO()
    call_command("configure_institution", *args, stdout=out)
    return out.getvalue()


def test_the_command_sets_the_settings_and_keeps_the_rest(found):
    institution = found["institution"]
    institution.currency = "CHF"
    institution.save()
    out = _command(institution.name, "--timezone", "Europe/Vienna", "--language", "de")
    assert "timezone='Europe/Vienna'" in out and "currency='CHF'" in out
    institution.refresh_from_db()
    assert (institution.timezone, institution.language, institution.currency) == (
        "Europe/Vienna",
        "de",
        "CHF",
    )
    event = AuditEvent.objects.get(action="budget_changed", target=f"institution:{institution.pk}")
    assert event.actor_name == "configure_institution"
    _command(institution.name, "--language", "", "--portal-key-limit", "7")
    institution.refresh_from_db()
    assert (institution.language, institution.portal_key_limit) == ("", 7)


def test_the_command_creates_an_institution_only_when_asked(tmp_path):
    with pytest.raises(CommandError, match="No institution named 'New school'"):
        _command("New school", "--timezone", "Europe/Paris")
    assert not Institution.objects.filter(name="New school").exists()
    terms = tmp_path / "terms.txt"
    terms.write_text("Be kind.\n", encoding="utf-8")
    _command("New school", "--create", "--timezone", "Europe/Paris", "--terms-file", str(terms))
    created = Institution.objects.get(name="New school")
    assert (created.timezone, created.terms_of_use) == ("Europe/Paris", "Be kind.")


@pytest.mark.parametrize("value", HOSTILE_ZONES, ids=lambda v: repr(v)[:24])
def test_the_command_refuses_what_the_form_refuses(found, value):
    institution = found["institution"]
    # Each refused with the form's reason (not a zone; NUL; over 64 characters).
    with pytest.raises(CommandError, match="^--timezone: "):
        _command(institution.name, "--timezone", value)
    with pytest.raises(CommandError, match="^--language: "):
        _command(institution.name, "--language", value)
    institution.refresh_from_db()
    assert (institution.timezone, institution.language) == ("UTC", "")
    assert not AuditEvent.objects.filter(target=f"institution:{institution.pk}").exists()


def test_the_command_refuses_a_bad_rate_and_an_unreadable_terms_file(found, tmp_path):
    name = found["institution"].name
    with pytest.raises(CommandError, match="--micro-credits-per-currency-unit"):
        _command(name, "--micro-credits-per-currency-unit", str(2**64))
    with pytest.raises(CommandError, match="--currency"):
        _command(name, "--currency", "euro")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"\xff\xfe")
    with pytest.raises(CommandError, match="--terms-file"):
        _command(name, "--terms-file", str(latin))
    with pytest.raises(CommandError, match="--terms-file"):
        _command(name, "--terms-file", str(tmp_path / "missing.txt"))


# --- the staff's pages in the zone ---------------------------------------------------------------


def test_staff_read_times_in_their_zone_and_superusers_in_utc(found, admin_client):
    institution = found["institution"]
    institution.timezone = "Europe/Berlin"
    institution.save()
    row = Transaction.objects.filter(license=found["license"]).first()
    Transaction.objects.filter(pk=row.pk).update(
        created_at=datetime(2026, 1, 15, 23, 30, tzinfo=UTC)
    )
    changelist = url(Transaction, "changelist")
    staff = login_as("reviewer", institution).get(changelist).content.decode()
    assert "Time (Europe/Berlin)" in staff and "2026-01-16 00:30" in staff
    superuser = admin_client.get(changelist).content.decode()
    assert "Time (UTC)" in superuser and "2026-01-15 23:30" in superuser


def test_the_review_filters_read_the_staffs_zone(found):
    institution = found["institution"]
    institution.timezone = "Europe/Berlin"
    institution.save()
    Transaction.objects.filter(license=found["license"]).update(
        created_at=datetime(2026, 1, 15, 23, 30, tzinfo=UTC)  # 00:30 on the 16th in Berlin
    )
    client = login_as("reviewer", institution)
    changelist = url(Transaction, "changelist")
    # "since 16 January" is Berlin's midnight (23:00 UTC on the 15th): the row is in.
    page = client.get(changelist, {"since": "2026-01-16T00:00"}).content.decode()
    assert "0 rows" not in page and "2026-01-16 00:30" in page
    assert "from (Europe/Berlin)</label>" in page and "to (Europe/Berlin)</label>" in page
    page = client.get(changelist, {"since": "2026-01-16T01:00"}).content.decode()
    assert "2026-01-16 00:30" not in page


def test_the_usage_page_counts_the_staffs_days(found, admin_client):
    institution = found["institution"]
    institution.timezone = "Europe/Berlin"
    institution.save()
    rows = Transaction.objects.filter(license=found["license"])
    count = rows.count()
    rows.update(created_at=datetime(2026, 1, 15, 23, 30, tzinfo=UTC))  # the 16th in Berlin
    usage = url(Transaction, "changelist") + "usage/"
    span = {"since": "2026-01-15", "until": "2026-01-17"}
    staff = login_as("reviewer", institution).get(usage, span)
    assert staff.status_code == 200
    assert staff.context["report"].total.requests == [0, count]
    assert "2 days, Europe/Berlin" in staff.context["subtitle"]
    everyone = admin_client.get(usage, {**span, "institution": institution.pk})
    assert everyone.context["report"].total.requests == [count, 0]  # a superuser: UTC days
