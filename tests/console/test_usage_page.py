"""The usage page (/admin/licensing/transaction/usage/) and GET /manage/v1/usage: what each
kind of user sees (superuser, institution admin, reviewer, staff without a role, anonymous),
totals against sums computed here from the rows the test made, bad parameters (a clear 400,
never a 500), escaped labels, links to the filtered transactions, bounded query counts, and
the OpenAPI document."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from licensing.console.usage_report import OUTCOMES, today_utc
from licensing.models import License, Transaction

from .test_manage_api import token_client, user_with
from .test_usage_report import SINCE, UNTIL, in_range, make_holders, make_ledger, per_day

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

PAGE = "/admin/licensing/transaction/usage/"
API = "/manage/v1/usage"
RANGE = {"since": SINCE.isoformat(), "until": UNTIL.isoformat()}


@pytest.fixture
def world(db):
    a, b = make_holders("a"), make_holders("b", licenses=1)
    rows = make_ledger(a + b)
    return {
        "rows": rows,
        "a": a[0][0].institution,
        "b": b[0][0].institution,
        "license_a": a[0][0],
        "license_b": b[0][0],
    }


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser(world):
    return user_with(None, superuser=True)


@pytest.fixture(params=["admin", "reviewer"])
def staff_a(request, world):
    return user_with(request.param, world["a"])


def shown_totals(response) -> dict[str, str]:
    html = response.content.decode()
    return dict(re.findall(r'<div id="total-([a-z_]+)"[^>]*><dt>[^<]*</dt><dd>([\d,]+)</dd>', html))


def expected_totals(rows) -> dict[str, str]:
    totals = {"credits": sum(r.credits for r in rows), "requests": len(rows)}
    for outcome in OUTCOMES:
        totals[outcome] = sum(1 for r in rows if r.outcome == outcome)
    return {k: f"{v:,}" for k, v in totals.items()}


def svgs(response) -> list[ET.Element]:
    found = re.findall(r"<svg [^>]*usage-chart.*?</svg>", response.content.decode(), flags=re.S)
    return [ET.fromstring(svg) for svg in found]


# --- the page ----------------------------------------------------------------------------------


def test_the_url_name_and_the_page(world, superuser):
    assert reverse("admin:licensing_transaction_usage") == PAGE
    response = browser(superuser).get(PAGE, RANGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<div class="breadcrumbs">' in html and "&rsaquo; Usage" in html
    assert "2025-01-10 to 2025-01-19 (10 days, UTC)" in html
    charts = svgs(response)
    assert len(charts) == 8  # five per-day charts, three top lists
    bars = [r for g in charts[0].iter() if g.get("class") == "bars" for r in g]
    services = per_day(in_range(world["rows"]), lambda r: r.service)
    assert len(bars) == sum(1 for days in services.values() for c, _ in days.values() if c > 0)


def test_superuser_sees_every_institution_or_the_one_chosen(world, superuser):
    client = browser(superuser)
    everything = client.get(PAGE, RANGE)
    assert shown_totals(everything) == expected_totals(in_range(world["rows"]))
    assert 'name="institution"' in everything.content.decode()
    for institution in (world["a"], world["b"]):
        chosen = client.get(PAGE, {**RANGE, "institution": institution.pk})
        assert chosen.status_code == 200
        rows = in_range(world["rows"], institution=institution)
        assert shown_totals(chosen) == expected_totals(rows)
        assert institution.name in chosen.content.decode()


def test_institution_staff_see_their_institution_only(world, staff_a):
    client = browser(staff_a)
    response = client.get(PAGE, RANGE)
    assert response.status_code == 200
    assert shown_totals(response) == expected_totals(
        in_range(world["rows"], institution=world["a"])
    )
    html = response.content.decode()
    assert 'name="institution"' not in html and world["license_b"].name not in html
    assert world["license_a"].name in html
    own = client.get(PAGE, {**RANGE, "institution": world["a"].pk})
    assert own.status_code == 200 and shown_totals(own) == shown_totals(response)
    other = client.get(PAGE, {**RANGE, "institution": world["b"].pk})
    assert other.status_code == 400
    assert "Unknown institution, or not one you may see." in other.content.decode()
    assert "total-credits" not in other.content.decode()
    lic = client.get(PAGE, {**RANGE, "license": world["license_b"].pk})
    assert lic.status_code == 400 and "Unknown license" in lic.content.decode()


def test_staff_without_a_role_is_refused_and_anonymous_goes_to_login(world):
    assert browser(user_with(None)).get(PAGE).status_code == 403
    anonymous = Client().get(PAGE)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")


@pytest.mark.parametrize(
    "params, message",
    [
        ({"since": "2026-13-45"}, "From: Enter a date as YYYY-MM-DD."),
        ({"until": "yesterday"}, "Until (not included): Enter a date as YYYY-MM-DD."),
        ({"since": "2024-01-01", "until": "2025-01-03"}, "The range is at most 366 days."),
        ({"since": "2025-01-10", "until": "2025-01-09"}, "&#x27;until&#x27; must be after"),
        ({"since": "1900-01-01", "until": "1900-02-01"}, "Dates start at 1970-01-01."),
        ({"since": "2025-01-01\x00"}, "Enter a date as YYYY-MM-DD."),
        ({"institution": "abc"}, "Unknown institution"),
        ({"institution": "9" * 30}, "Unknown institution"),
        ({"institution": "\x00"}, "Institution: Null characters are not allowed."),
        ({"license": "-1"}, "Unknown license"),
    ],
)
def test_bad_parameters_are_a_message_on_the_page(world, superuser, params, message):
    response = browser(superuser).get(PAGE, params)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="usage-errors"' in html and message in html
    assert 'id="usage-form"' in html and "Last 30 days" in html  # a way back


def test_a_license_of_another_institution_than_the_one_chosen(world, superuser):
    params = {**RANGE, "institution": world["a"].pk, "license": world["license_b"].pk}
    response = browser(superuser).get(PAGE, params)
    assert response.status_code == 400
    assert "This license belongs to another institution." in response.content.decode()


def test_one_license(world, superuser):
    lic = world["license_a"]
    response = browser(superuser).get(PAGE, {**RANGE, "license": lic.pk})
    rows = [r for r in in_range(world["rows"]) if r.license_id == lic.pk]
    assert shown_totals(response) == expected_totals(rows)
    assert f"License {lic.name}" in response.content.decode()


def test_the_default_range_is_the_last_30_days(world, superuser):
    lic = world["license_a"]
    now = datetime.now(UTC)
    for i, when in enumerate([now, now - timedelta(days=29), now - timedelta(days=31)]):
        Transaction.objects.create(
            created_at=when,
            request_id=f"recent-{i}",
            license=lic,
            service="embeddings",
            requested_model="m",
            provider="direct",
            status_code=200,
            credits=1000 * (i + 1),
        )
    response = browser(superuser).get(PAGE)
    report = response.context["report"]
    assert (report.since, report.until) == (
        today_utc() - timedelta(days=29),
        today_utc() + timedelta(days=1),
    )
    totals = shown_totals(response)
    assert (totals["credits"], totals["requests"]) == ("3,000", "2")
    assert '<a href="?since=' in response.content.decode() and 'aria-current="page"' in (
        response.content.decode()
    )
    empty = browser(superuser).get(PAGE, {"since": "", "until": "", "institution": ""})
    assert shown_totals(empty) == totals
    assert f'value="{report.since.isoformat()}"' in empty.content.decode()  # shown in the form


def test_names_from_users_are_escaped(world, superuser):
    lic = world["license_a"]
    License.objects.filter(pk=lic.pk).update(name='<script>alert("x")</script>')
    Transaction.objects.filter(request_id="usage-00000").update(
        billed_model="<img src=x onerror=alert(1)>", license=lic
    )
    response = browser(superuser).get(PAGE, RANGE)
    html = response.content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    for svg in svgs(response):  # each chart is still well-formed XML
        assert not [e for e in svg.iter() if e.tag.endswith("script")]


def test_top_lists_link_to_the_filtered_transactions(world, superuser):
    response = browser(superuser).get(PAGE, RANGE)
    html = response.content.decode()
    report = response.context["report"]
    changelist = reverse("admin:licensing_transaction_changelist")
    span = "since=2025-01-10&amp;until=2025-01-20"
    for param, rows in (
        ("license", report.top_licenses),
        ("api_key", report.top_api_keys),
        ("end_user", report.top_end_users),
    ):
        assert rows
        for row in rows:
            assert f'href="{changelist}?{param}={row.id}&amp;{span}"' in html
    assert f'href="{changelist}?{span}"' in html  # "Transactions in this range"


def page_queries(client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(PAGE, RANGE).status_code == 200
    return len(ctx.captured_queries)


def test_a_bounded_number_of_queries_whatever_the_rows(db):
    make_ledger(make_holders("q"), count=10, seed=3)
    client = browser(user_with(None, superuser=True))
    few = page_queries(client)
    Transaction.objects.all().delete()
    make_ledger(make_holders("r") + make_holders("s"), count=800, seed=4)
    assert page_queries(client) == few <= 12


def test_the_license_page_links_to_its_usage(world, superuser, staff_a):
    lic = world["license_a"]
    change = reverse("admin:licensing_license_change", args=[lic.pk])
    for user in (superuser, staff_a):
        html = browser(user).get(change).content.decode()
        assert f'href="{PAGE}?license={lic.pk}"' in html


# --- the API -----------------------------------------------------------------------------------


def check_body(body, rows, institution=None):
    assert body["since"] == RANGE["since"] and body["until"] == RANGE["until"]
    assert body["unit"] == "micro_credits" and len(body["days"]) == 10
    assert body["institution"] == institution
    expected = expected_totals(rows)
    totals = body["totals"]
    assert f"{totals['credits']:,}" == expected["credits"]
    assert f"{totals['requests']:,}" == expected["requests"]
    assert {k: f"{v:,}" for k, v in totals["requests_by_outcome"].items()} == {
        k: expected[k] for k in OUTCOMES
    }
    days = [datetime.fromisoformat(d).date() for d in body["days"]]
    services = per_day(rows, lambda r: r.service)
    assert {s["name"]: s["credits"] for s in body["by_service"]} == {
        name: [sums.get(d, [0, 0])[0] for d in days] for name, sums in services.items()
    }
    assert sum(body["total"]["requests"]) == len(rows)
    assert [s["name"] for s in body["by_outcome"]] == list(OUTCOMES)


def test_api_superuser(world, superuser):
    client = token_client(superuser)
    response = client.get(API, RANGE)
    assert response.status_code == 200, response.content
    check_body(response.json(), in_range(world["rows"]))
    chosen = client.get(API, {**RANGE, "institution": world["b"].pk}).json()
    check_body(chosen, in_range(world["rows"], institution=world["b"]), world["b"].pk)
    assert {row["id"] for row in chosen["top"]["licenses"]} == {world["license_b"].pk}


def test_api_institution_staff(world, staff_a):
    client = token_client(staff_a)
    response = client.get(API, RANGE)
    assert response.status_code == 200, response.content
    rows = in_range(world["rows"], institution=world["a"])
    check_body(response.json(), rows, world["a"].pk)
    assert client.get(API, {**RANGE, "institution": world["a"].pk}).json() == response.json()
    other = client.get(API, {**RANGE, "institution": world["b"].pk})
    assert other.status_code == 400
    assert other.json() == {
        "institution": [f'Invalid pk "{world["b"].pk}" - object does not exist.']
    }


def test_api_empty_parameters_mean_the_defaults(world, superuser):
    body = token_client(superuser).get(API, {"since": "", "until": "", "institution": ""}).json()
    tomorrow = today_utc() + timedelta(days=1)
    assert (body["since"], body["until"]) == (
        (tomorrow - timedelta(days=30)).isoformat(),
        tomorrow.isoformat(),
    )
    assert body["institution"] is None and len(body["days"]) == 30


def test_api_refuses_staff_without_a_role_and_anonymous(world):
    assert token_client(user_with(None)).get(API).status_code == 403
    assert Client().get(API).status_code == 401
    bad = Client(headers={"Authorization": "Token nope"}).get(API)
    assert bad.status_code == 401 and bad.json() == {"detail": "Invalid token."}
    assert browser(user_with(None, superuser=True)).get(API).status_code == 200  # session


@pytest.mark.parametrize(
    "params, field, message",
    [
        ({"since": "2026-13-45"}, "since", "Date has wrong format"),
        ({"since": "2025-01-10T00:00:00"}, "since", "Date has wrong format"),
        ({"since": "2024-01-01", "until": "2025-01-03"}, "until", "at most 366 days"),
        ({"since": "2025-01-10", "until": "2025-01-10"}, "until", "must be after"),
        ({"until": "0001-01-01"}, "until", "1970-01-01"),
        ({"since": "\x00"}, "since", "Date has wrong format"),
        ({"institution": "abc"}, "institution", "Incorrect type"),
        ({"institution": "9" * 30}, "institution", "object does not exist"),
        ({"license": "1.5"}, "license", "Incorrect type"),
    ],
)
def test_api_bad_parameters(world, superuser, params, field, message):
    response = token_client(superuser).get(API, params)
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body) == [field] and message in body[field][0]


def test_api_license_of_another_institution(world, superuser):
    params = {"institution": world["a"].pk, "license": world["license_b"].pk}
    response = token_client(superuser).get(API, params)
    assert response.status_code == 400
    assert response.json() == {"license": ["This license belongs to another institution."]}


def test_api_queries_are_bounded(db):
    make_ledger(make_holders("q"), count=10, seed=5)
    client = token_client(user_with(None, superuser=True))

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(API, RANGE).status_code == 200
        return len(ctx.captured_queries)

    few = count()
    Transaction.objects.all().delete()
    make_ledger(make_holders("r") + make_holders("s"), count=800, seed=6)
    assert count() == few <= 10


def test_api_is_in_the_openapi_document(world):
    document = Client().get("/manage/v1/openapi.json").json()
    operation = document["paths"]["/manage/v1/usage"]["get"]
    names = {p["name"] for p in operation["parameters"]}
    assert {"since", "until", "institution", "license"} <= names
    schema = operation["responses"]["200"]["content"]["application/json"]
    assert schema["schema"]["$ref"].endswith("/UsageReport")
    report = document["components"]["schemas"]["UsageReport"]
    assert {"days", "totals", "by_service", "by_model", "by_outcome", "top"} <= set(
        report["properties"]
    )
