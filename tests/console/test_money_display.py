"""Money shown as money: each institution's currency and rate (or the gateway's default) beside
the micro-credits in the admin's lists, the review totals, the usage page, and the ledger's
`cost` column in the CSV, the API and the detail page; the institution form refuses a bad
currency or rate."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from licensing.models import AdminProfile, BudgetAlert, Institution, License, Transaction, Wallet

from .test_admin import form_data, make_licensing, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    a, b = make_licensing("a"), make_licensing("b")
    # Institution a counts in euros, 2,000,000 micro-credits to the euro; b keeps the default
    # (USD at 1,000,000).
    Institution.objects.filter(pk=a["institution"].pk).update(
        currency="EUR", micro_credits_per_currency_unit=2_000_000
    )
    Transaction.objects.filter(license=a["license"]).update(credits=1_234_567)
    Transaction.objects.filter(license=b["license"]).update(credits=500_000)
    Wallet.objects.filter(license=a["license"]).update(spent=3_000_000)
    return {"a": a, "b": b}


def test_institution_form_refuses_bad_currency_and_rate(world, admin_client):
    inst = world["b"]["institution"]
    change = url(Institution, "change", inst.pk)
    base = form_data(admin_client.get(change))
    for field, value in [
        ("currency", "eur"),
        ("currency", "EURO"),
        ("currency", "E1R"),
        ("currency", "ÄÖÜ"),
        ("micro_credits_per_currency_unit", str(2**64)),
        ("micro_credits_per_currency_unit", "-1"),
        ("micro_credits_per_currency_unit", "0"),
        ("micro_credits_per_currency_unit", "1e400"),
        ("micro_credits_per_currency_unit", "NaN"),
        ("micro_credits_per_currency_unit", "1.5"),
        ("micro_credits_per_currency_unit", str(10**12 + 1)),
    ]:
        response = admin_client.post(change, {**base, field: value})
        assert response.status_code == 200, (field, value)
        assert field in response.context["adminform"].form.errors, (field, value)
    inst.refresh_from_db()
    assert (inst.currency, inst.micro_credits_per_currency_unit) == ("", None)
    ok = admin_client.post(
        change, {**base, "currency": "CHF", "micro_credits_per_currency_unit": "800000"}
    )
    assert ok.status_code == 302
    inst.refresh_from_db()
    assert (inst.currency, inst.micro_credits_per_currency_unit) == ("CHF", 800_000)


def test_admin_lists_show_money_beside_credits(world, admin_client):
    licenses = admin_client.get(url(License, "changelist")).content.decode()
    # a: 1,000,000 micro-credits at 2,000,000 per euro; b: the default, USD 1:1,000,000.
    assert "0.50 EUR (1,000,000 micro-credits) monthly per holder" in licenses
    assert "1.00 USD (1,000,000 micro-credits) monthly per holder" in licenses
    assert "1.50 EUR (3,000,000 micro-credits); 1 holders, highest 3,000,000" in licenses
    wallets = admin_client.get(url(Wallet, "changelist")).content.decode()
    assert (
        "1.50 EUR (3,000,000 micro-credits)" in wallets
        and "0.0012 USD (1,234 micro-credits)" in wallets
    )
    assert "0.00 EUR (0 micro-credits)" in wallets  # remaining: spent is over the limit
    alerts = admin_client.get(url(BudgetAlert, "changelist")).content.decode()
    assert (
        "0.45 EUR (900,000 micro-credits)" in alerts
        and "0.40 EUR (800,000 micro-credits)" in alerts
    )
    assert "0.90 USD (900,000 micro-credits)" in alerts


def test_review_totals_show_money_per_currency(world, admin_client):
    page = admin_client.get(url(Transaction, "changelist"))
    assert page.context["review_totals"]["money"] == "1.85 EUR + 1.50 USD"
    assert '<strong id="total-money">1.85 EUR + 1.50 USD</strong>' in page.content.decode()
    one = admin_client.get(url(Transaction, "changelist"), {"license": world["b"]["license"].pk})
    assert one.context["review_totals"]["money"] == "1.50 USD"
    none = admin_client.get(url(Transaction, "changelist"), {"q": "nothing-matches-this"})
    assert none.context["review_totals"]["money"] == "0.00 USD"

    reviewer = _staff_client("reviewer", world["a"]["institution"])
    scoped = reviewer.get(url(Transaction, "changelist"))
    assert scoped.context["review_totals"]["money"] == "1.85 EUR"


def _staff_client(role, institution) -> Client:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(f"{role}-x", is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    client = Client()
    client.force_login(user)
    return client


def test_usage_page_shows_the_cost(world, admin_client):
    page = admin_client.get("/admin/licensing/transaction/usage/")
    assert page.status_code == 200
    totals = {t["key"]: t["value"] for t in page.context["totals"]}
    assert totals["money"] == "1.85 EUR + 1.50 USD"
    assert totals["credits"] == "5,203,701"
    own = _staff_client("admin", world["b"]["institution"])
    totals = {
        t["key"]: t["value"]
        for t in own.get("/admin/licensing/transaction/usage/").context["totals"]
    }
    assert totals["money"] == "1.50 USD"


def test_ledger_cost_column_in_csv_api_and_detail_page(world, admin_client):
    export = admin_client.get("/admin/licensing/transaction/export/")
    rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    costs = {(row["institution"], row["credits"], row["cost"]) for row in rows}
    assert costs == {
        ("Institution a", "1234567", "0.62 EUR"),
        ("Institution b", "500000", "0.50 USD"),
    }
    header = list(rows[0])
    assert header.index("cost") == header.index("credits") + 1

    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    admin_a = get_user_model().objects.create_user("admin-a", is_staff=True)
    AdminProfile.objects.create(user=admin_a, institution=world["a"]["institution"])
    api = Client(headers={"Authorization": f"Token {Token.objects.create(user=admin_a).key}"})
    body = api.get("/manage/v1/transactions").json()["results"]
    assert {(row["credits"], row["cost"]) for row in body} == {(1_234_567, "0.62 EUR")}
    api_csv = api.get("/manage/v1/transactions", {"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(b"".join(api_csv.streaming_content).decode())))
    assert {row["cost"] for row in rows} == {"0.62 EUR"}

    tx = Transaction.objects.filter(license=world["a"]["license"]).first()
    detail = admin_client.get(url(Transaction, "change", tx.pk)).content.decode()
    assert "0.62 EUR" in detail
