"""The student portal's pages as a student sees them (Django's test client, a student signed
in with force_login until the SSO flow lands): who gets in, the wallet and usage in credits and
money, the models, the data-flow notice, the terms gate, their own keys and the limit, and
hostile input (forged ids, NUL, another student's keys, missing CSRF): a 4xx, never a 500."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from licensing.access.credentials import api_key_create
from licensing.models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    EndUser,
    Institution,
    License,
    Transaction,
    Wallet,
)
from licensing.portal import selectors

from .conftest import identity_provider, make_student, signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.both_databases]

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")


def text(response) -> str:
    return response.content.decode()


def ledger_row(end_user, *, credits, model="gpt-4o-mini", when=None, api_key=None):
    return Transaction.objects.create(
        request_id=uuid.uuid4().hex,
        created_at=when or timezone.now(),
        license=end_user.license if end_user is not None else None,
        end_user=end_user,
        api_key=api_key,
        service="chat_completions",
        requested_model=model,
        billed_model=model,
        provider="direct",
        status_code=200,
        credits=credits,
    )


# --- who gets in ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/portal/", "/portal/keys/", "/portal/data/", "/portal/terms/"])
def test_anonymous_goes_to_the_login_page(anon, path):
    response = anon.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/portal/login/?next={path.replace('/', '%2F')}"


def test_login_page_lists_institutions_with_a_student_license(anon):
    _, end_user = make_student()
    hill = end_user.license.institution
    identity_provider(hill, end_user.license)
    staff_only = Institution.objects.create(name="Staff Only College")
    identity_provider(staff_only, None)  # no student license: not listed
    off = Institution.objects.create(name="Switched Off Academy")
    provider = identity_provider(off, end_user.license)
    provider.active = False
    provider.save()

    response = anon.get("/portal/login/?next=/portal/keys/")
    assert response.status_code == 200
    body = text(response)
    hill_idp = hill.identity_provider
    assert f'href="/sso/{hill_idp.pk}/login/?next=%2Fportal%2Fkeys%2F"' in body
    assert "Sign in with Hill School" in body
    assert "Staff Only College" not in body and "Switched Off Academy" not in body
    assert 'action="/sso/find/"' not in body  # few institutions: no e-mail field


@pytest.mark.parametrize(
    "wanted", ["https://evil.example/portal/", "//evil.example/", "/admin/", "/portal/\\evil"]
)
def test_login_next_stays_on_the_portal(anon, wanted):
    _, end_user = make_student()
    provider = identity_provider(end_user.license.institution, end_user.license)
    response = anon.get("/portal/login/", {"next": wanted})
    assert response.status_code == 200
    assert f'href="/sso/{provider.pk}/login/?next=%2Fportal%2F"' in text(response)


def test_login_page_with_many_institutions_finds_them_by_email(anon):
    for n in range(6):
        _, end_user = make_student(institution=f"School {n}", license=f"students-{n}")
        identity_provider(end_user.license.institution, end_user.license, n)
    body = text(anon.get("/portal/login/"))
    assert body.count("Sign in with School ") == 6
    assert 'action="/sso/find/"' in body and 'name="email"' in body
    assert 'name="next" value="/portal/"' in body


def test_login_page_sends_a_signed_in_student_to_the_overview(portal):
    response = portal.get("/portal/login/")
    assert response.status_code == 302 and response["Location"] == "/portal/"


def test_user_without_an_end_user_gets_the_no_access_page(db):
    user = get_user_model().objects.create_user("visitor", email="v@hill.example")
    response = signed_in(user).get("/portal/")
    assert response.status_code == 403
    body = text(response)
    assert "no\nstudent access" in body or "no student access" in body
    assert "IT staff" in body


@pytest.mark.parametrize("what", ["end_user", "license", "license_type"])
def test_inactive_student_access_is_a_403_naming_whom_to_ask(db, what):
    user, end_user = make_student()
    admin = get_user_model().objects.create_user(
        "hill-admin", email="it@hill.example", is_staff=True
    )
    AdminProfile.objects.create(
        user=admin, institution=end_user.license.institution, role=AdminProfile.Role.ADMIN
    )
    if what == "end_user":
        end_user.active = False
        end_user.save()
    elif what == "license":
        License.objects.filter(pk=end_user.license_id).update(active=False)
    else:
        end_user.license.license_type.active = False
        end_user.license.license_type.save()
    client = signed_in(user)
    for path in ["/portal/", "/portal/keys/", "/portal/data/"]:
        response = client.get(path)
        assert response.status_code == 403, path
        assert "Hill School" in text(response)
        assert "mailto:it@hill.example" in text(response)
    assert client.post("/portal/keys/", {"name": "x"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_staff_without_a_student_end_user_is_not_let_in(admin_client):
    assert admin_client.get("/portal/").status_code == 403


def test_sign_out_ends_the_session_and_is_audited(portal, student):
    assert portal.get("/portal/logout/").status_code == 405  # a POST only
    response = portal.post("/portal/logout/")
    assert response.status_code == 302 and response["Location"] == "/portal/login/"
    assert portal.get("/portal/").status_code == 302
    event = AuditEvent.objects.get(action=AuditEvent.Action.SIGN_OUT)
    assert event.actor == student[0]
    assert event.institution_id == student[1].license.institution_id


# --- the overview -----------------------------------------------------------------------------


def test_overview_shows_license_wallet_and_reset_in_credits_and_money(db):
    user, end_user = make_student(limit=5_000_000, period="monthly")
    institution = end_user.license.institution
    institution.currency = "CHF"
    institution.micro_credits_per_currency_unit = 2_000_000
    institution.save()
    ledger_row(end_user, credits=1_250_000)
    Wallet.objects.create(
        license=end_user.license,
        holder=f"user:{end_user.pk}",
        period="monthly",
        window_start=selectors.window_start("monthly", timezone.now()),
        unit="micro_credits",
        spent=1_250_000,
    )
    response = signed_in(user).get("/portal/")
    assert response.status_code == 200
    body = text(response)
    assert "hill-students" in body and "Hill School" in body
    assert "1.88 CHF" in body  # 3,750,000 remaining at 2,000,000 per franc
    assert "3,750,000 of 5,000,000 micro-credits left" in body
    assert "0.62 CHF of 2.50 CHF used" in body  # half-even: 0.625 -> 0.62
    now = timezone.now()
    first = (now.replace(day=1) + timedelta(days=32)).replace(day=1)
    assert f"Resets {first:%a} {first.day} {first:%b %Y}, 00:00 UTC" in body
    assert "your own wallet" in body and "What remains this month" in body
    assert 'id="usage-by-model"' in body and "gpt-4o-mini" in body


def test_overview_of_an_unlimited_pooled_license(db):
    user, end_user = make_student(limit=None, strategy="pooled", period="lifetime")
    ledger_row(end_user, credits=30_000)
    body = text(signed_in(user).get("/portal/"))
    assert "Unlimited" in body and "What remains</h2>" in body
    assert "Does not reset" in body
    assert "shared wallet" in body
    assert "0.03 USD" in body  # the gateway's default rate: 1,000,000 per USD


def test_wallet_view_reads_the_budget_window_of_the_given_instant(db):
    _, end_user = make_student(limit=1000, period="weekly")
    thursday = datetime(2026, 11, 26, 15, 0, tzinfo=UTC)
    Wallet.objects.create(
        license=end_user.license,
        holder=f"user:{end_user.pk}",
        period="weekly",
        window_start=datetime(2026, 11, 23, tzinfo=UTC),
        unit="micro_credits",
        spent=400,
    )
    view = selectors.wallet_view(end_user, now=thursday)
    assert (view.used, view.remaining, view.limit) == (400, 600, 1000)
    assert view.window_start == datetime(2026, 11, 23, tzinfo=UTC)
    assert view.resets_at == datetime(2026, 11, 30, tzinfo=UTC)
    assert selectors.next_window_start("daily", thursday) == datetime(2026, 11, 27, tzinfo=UTC)
    assert selectors.next_window_start("monthly", datetime(2026, 12, 31, 23, tzinfo=UTC)) == (
        datetime(2027, 1, 1, tzinfo=UTC)
    )
    assert selectors.next_window_start("lifetime", thursday) is None


def test_usage_by_day_and_model_is_the_students_own_and_30_days_only(db):
    user, mine = make_student()
    _, other = make_student()
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    ledger_row(mine, credits=100, model="gpt-4o-mini", when=now - timedelta(hours=1))
    ledger_row(mine, credits=50, model="gpt-4o-mini", when=now - timedelta(days=1))
    ledger_row(mine, credits=7, model="o4-mini", when=now - timedelta(days=29, hours=11))
    ledger_row(mine, credits=999, model="old-model", when=now - timedelta(days=30, hours=1))
    ledger_row(other, credits=4321, model="someone-elses-model", when=timezone.now())
    usage = selectors.usage_of(mine, now=now)
    assert len(usage.by_day) == 30 and usage.days[-1].isoformat() == "2026-11-26"
    days = {row.label: (row.requests, row.credits) for row in usage.by_day if row.requests}
    assert days == {"2026-11-26": (1, 100), "2026-11-25": (1, 50), "2026-10-28": (1, 7)}
    assert [(r.label, r.requests, r.credits) for r in usage.by_model] == [
        ("gpt-4o-mini", 2, 150),
        ("o4-mini", 1, 7),
    ]
    assert (usage.total.requests, usage.total.credits) == (3, 157)

    body = text(signed_in(user).get("/portal/"))
    assert "gpt-4o-mini" in body or "No requests" in body
    assert "someone-elses-model" not in body and "4321" not in body


def test_models_are_the_policy_over_the_catalog(db):
    from catalog.services import catalog_load_defaults, connection_configure
    from core.localcache import clear_all

    catalog_load_defaults()
    connection_configure(
        provider_slug="direct", base_url="https://api.direct.example/v1", api_key="k"
    )
    clear_all()
    policy = {"version": 1, "services": {"embeddings": {"providers": ["direct"]}}}
    user, end_user = make_student(license="embed-only", policy=policy)
    models = selectors.usable_models(end_user)
    assert models and all(m.services == ["embeddings"] for m in models)
    assert "text-embedding-3-small" in {m.model_id for m in models}
    body = text(signed_in(user).get("/portal/"))
    assert "text-embedding-3-small" in body and "gpt-4o-mini</code>" not in body


def test_models_you_may_use_say_what_each_is_for_in_words(db):
    """Issue 37: the list said "responses" for gpt-4.1 under a license whose chat allowed
    gpt-4o-mini only; with one list for both text services it names each model's uses in
    words."""
    from catalog.services import catalog_load_defaults, connection_configure
    from core.localcache import clear_all

    catalog_load_defaults()
    connection_configure(
        provider_slug="direct", base_url="https://api.direct.example/v1", api_key="k"
    )
    clear_all()
    policy = {
        "version": 1,
        "models": {"text": {"allowed": ["gpt-4o-mini"]}},
        "services": {
            "chat_completions": {},
            "responses": {},
            "embeddings": {},
            "image_generation": {},
        },
    }
    user, end_user = make_student(license="words", policy=policy)
    found = {m.model_id: m for m in selectors.usable_models(end_user)}
    assert "gpt-4.1" not in found and "gpt-4o" not in found
    assert found["gpt-4o-mini"].purpose == "chat and responses"
    assert found["text-embedding-3-small"].purpose == "embeddings (document search)"
    assert found["gpt-image-1"].purpose == "images"
    body = text(signed_in(user).get("/portal/"))
    models = body.split('id="models"')[1].split("</table>")[0]
    assert "<td>chat and responses</td>" in models
    assert "<td>embeddings (document search)</td>" in models and "<td>images</td>" in models
    assert "chat_completions" not in models and "gpt-4.1" not in models


def test_the_portal_counts_and_shows_the_institutions_days(db):
    """A Berlin student's budget resets at Berlin's midnight, the page says when in Berlin's
    time, and the usage days are Berlin's."""
    from licensing.models import Transaction

    user, end_user = make_student(license="berlin-students", period="daily")
    institution = end_user.license.institution
    institution.timezone = "Europe/Berlin"
    institution.save()
    now = datetime(2026, 1, 15, 22, 30, tzinfo=UTC)  # 23:30 in Berlin
    view = selectors.wallet_view(end_user, now=now)
    assert view.window_start == datetime(2026, 1, 14, 23, tzinfo=UTC)
    assert view.resets_at == datetime(2026, 1, 15, 23, tzinfo=UTC)
    Transaction.objects.create(
        license=end_user.license,
        end_user=end_user,
        service="chat_completions",
        requested_model="gpt-4o-mini",
        status_code=200,
        credits=7,
        request_id="req-berlin",
        provider="direct",
        created_at=datetime(2026, 1, 15, 23, 30, tzinfo=UTC),  # the 16th in Berlin
    )
    usage = selectors.usage_of(end_user, now=datetime(2026, 1, 16, 9, tzinfo=UTC))
    assert usage.by_day[-1].label == "2026-01-16" and usage.by_day[-1].credits == 7
    assert usage.by_day[-2].credits == 0
    body = text(signed_in(user).get("/portal/"))
    assert " CET (daily budget)" in body or " CEST (daily budget)" in body
    assert "Day (UTC)" not in body


def test_an_unreadable_policy_allows_no_model(db):
    user, end_user = make_student()
    end_user.license.license_type.policy = {"version": 99}
    end_user.license.license_type.save()
    assert selectors.usable_models(end_user) == []
    assert "allows no model" in text(signed_in(user).get("/portal/"))


# --- the data-flow notice ---------------------------------------------------------------------


def test_data_page_names_providers_regions_and_who_runs_it(db):
    from catalog.models import Connection
    from catalog.services import catalog_load_defaults, connection_configure
    from core.localcache import clear_all

    catalog_load_defaults()
    connection_configure(
        provider_slug="direct", base_url="https://api.direct.example/v1", api_key="k"
    )
    Connection.objects.filter(provider__slug="direct").update(tags="eu,school-contract")
    clear_all()
    policy = {"version": 1, "services": {"chat_completions": {"providers": ["direct"]}}}
    user, _ = make_student(license="chat-direct", policy=policy)
    response = signed_in(user).get("/portal/data/")
    assert response.status_code == 200
    body = text(response)
    assert "run for you by <strong>Hill School</strong>" in body
    assert "does <strong>not</strong> store your prompts or the answers" in body
    table = body.split('id="destinations"')[1].split("</table>")[0]
    assert "<td>direct</td>" in table and "eu, school-contract" in table
    assert "aggregator" not in table  # the policy allows only `direct`


def test_data_page_without_models_says_nothing_leaves(portal):
    body = text(portal.get("/portal/data/"))
    assert "no request leaves the gateway" in body


# --- the terms of use -------------------------------------------------------------------------


def _set_terms(end_user, terms="Use it for your studies only."):
    institution = end_user.license.institution
    institution.terms_of_use = terms
    institution.save()


def test_terms_must_be_accepted_before_the_first_key(portal, student):
    user, end_user = student
    _set_terms(end_user)
    keys = portal.get("/portal/keys/")
    assert "accept the terms of use" in text(keys) and 'id="key-form"' not in text(keys)
    refused = portal.post("/portal/keys/", {"name": "early"})
    assert refused.status_code == 403 and not ApiKey.objects.exists()

    page = portal.get("/portal/terms/")
    assert "Use it for your studies only." in text(page)
    unticked = portal.post("/portal/terms/", {})
    assert unticked.status_code == 400
    end_user.refresh_from_db()
    assert end_user.terms_accepted_at is None

    accepted = portal.post("/portal/terms/", {"accept": "yes"})
    assert accepted.status_code == 302 and accepted["Location"] == "/portal/keys/"
    end_user.refresh_from_db()
    assert end_user.terms_accepted_at is not None
    event = AuditEvent.objects.get(action=AuditEvent.Action.TERMS_ACCEPTED)
    assert event.actor == user and event.target == f"end_user:{end_user.pk}"
    assert event.institution_id == end_user.license.institution_id
    portal.post("/portal/terms/", {"accept": "yes"})  # again: no second event
    assert AuditEvent.objects.filter(action=AuditEvent.Action.TERMS_ACCEPTED).count() == 1

    assert portal.post("/portal/keys/", {"name": "now"}).status_code == 302
    assert ApiKey.objects.filter(end_user=end_user).count() == 1


def test_no_terms_set_means_no_gate(portal, student):
    assert "has set no terms" in text(portal.get("/portal/terms/"))
    assert portal.post("/portal/keys/", {}).status_code == 302


# --- API keys -----------------------------------------------------------------------------------


def test_create_key_shows_it_once_with_the_sdk_example(portal, student):
    _, end_user = student
    response = portal.post("/portal/keys/", {"name": "  laptop  "})
    assert response.status_code == 302
    row = ApiKey.objects.get()
    assert (row.license_id, row.end_user_id, row.name, row.active) == (
        end_user.license_id,
        end_user.pk,
        "laptop",
        True,
    )
    shown = text(portal.get("/portal/keys/"))
    keys = set(KEY_RE.findall(shown))
    assert len(keys) == 1
    (key,) = keys
    assert key.startswith(row.prefix)
    assert 'base_url="http://testserver/v1"' in shown and "from openai import OpenAI" in shown
    assert 'id="copy-key"' in shown
    again = text(portal.get("/portal/keys/"))
    assert not KEY_RE.search(again) and row.prefix in again  # once only
    event = AuditEvent.objects.get(action=AuditEvent.Action.API_KEY_CREATED)
    assert event.target == f"api_key:{row.pk}" and event.detail["prefix"] == row.prefix
    assert key not in str(event.detail)


@pytest.mark.parametrize("name", ["bad\x00name", "tab\tname", "bell\x07", "x" * 101, "esc\x1b[31m"])
def test_hostile_key_names_are_refused(portal, name):
    response = portal.post("/portal/keys/", {"name": name})
    assert response.status_code == 400
    assert not ApiKey.objects.exists()


def test_lone_surrogate_in_a_name_is_no_500(portal):
    # Form data is UTF-8 decoded with replacement: a lone surrogate arrives as U+FFFD.
    response = portal.post(
        "/portal/keys/", "name=%ED%A0%80x", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code in (302, 400)


def test_key_limit_counts_active_keys_only(portal, student):
    _, end_user = student
    institution = end_user.license.institution
    institution.portal_key_limit = 2
    institution.save()
    assert portal.post("/portal/keys/", {"name": "a"}).status_code == 302
    assert portal.post("/portal/keys/", {"name": "b"}).status_code == 302
    refused = portal.post("/portal/keys/", {"name": "c"})
    assert refused.status_code == 409 and "the most allowed" in text(refused)
    assert ApiKey.objects.filter(end_user=end_user).count() == 2
    first = ApiKey.objects.get(name="a")
    assert portal.post(f"/portal/keys/{first.pk}/revoke/").status_code == 302
    assert portal.post("/portal/keys/", {"name": "c"}).status_code == 302
    assert ApiKey.objects.filter(end_user=end_user, active=True).count() == 2


def test_admin_made_keys_of_the_license_do_not_count_or_show(portal, student):
    _, end_user = student
    api_key_create(license=end_user.license, name="the admin's key")
    body = text(portal.get("/portal/keys/"))
    assert "the admin's key" not in body and "No keys yet" in body


def test_revoke_own_key_is_audited_and_refused_on_v1_caches(portal, student):
    _, end_user = student
    portal.post("/portal/keys/", {"name": "phone"})
    row = ApiKey.objects.get()
    response = portal.post(f"/portal/keys/{row.pk}/revoke/")
    assert response.status_code == 302 and response["Location"] == "/portal/keys/"
    row.refresh_from_db()
    assert row.active is False
    event = AuditEvent.objects.get(action=AuditEvent.Action.API_KEY_REVOKED)
    assert event.target == f"api_key:{row.pk}"
    assert "revoked" in text(portal.get("/portal/keys/"))
    # A revoked key is gone for revoking: 404.
    assert portal.post(f"/portal/keys/{row.pk}/revoke/").status_code == 404


@pytest.mark.parametrize(
    "key_id", [str(2**64), str(2**63), "abc", "0", "-1", "1.5", "%00", "١", "9" * 40]
)
def test_forged_key_ids_are_404(portal, key_id):
    assert portal.post(f"/portal/keys/{key_id}/revoke/").status_code == 404


def test_another_students_key_is_404_and_never_listed(db):
    me, mine = make_student()
    them, theirs = make_student()
    row, _ = api_key_create(license=theirs.license, end_user=theirs, name="their secret project")
    client = signed_in(me)
    assert client.post(f"/portal/keys/{row.pk}/revoke/").status_code == 404
    row.refresh_from_db()
    assert row.active
    assert "their secret project" not in text(client.get("/portal/keys/"))
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.API_KEY_REVOKED).exists()


def test_revoke_is_post_only_and_csrf_protected(student):
    user, end_user = student
    row, _ = api_key_create(license=end_user.license, end_user=end_user)
    client = signed_in(user, enforce_csrf=True)
    assert client.get(f"/portal/keys/{row.pk}/revoke/").status_code == 405
    assert client.post(f"/portal/keys/{row.pk}/revoke/").status_code == 403
    assert client.post("/portal/keys/", {"name": "x"}).status_code == 403
    assert client.post("/portal/terms/", {"accept": "yes"}).status_code == 403
    assert client.post("/portal/logout/").status_code == 403
    row.refresh_from_db()
    assert row.active and ApiKey.objects.count() == 1


def test_api_key_create_refuses_an_end_user_of_another_license(db):
    _, end_user = make_student()
    other = (
        License.objects.exclude(pk=end_user.license_id).first()
        or make_student(license="other-license")[1].license
    )
    with pytest.raises(ValueError):
        api_key_create(license=other, end_user=end_user)


def test_hostile_query_strings_are_no_500(portal):
    for path in ["/portal/?x=%00", "/portal/login/?next=%00", "/portal/login/?next=%ED%A0%80"]:
        assert portal.get(path).status_code in (200, 302), path
    assert EndUser.objects.count() == 1
