"""`manage.py configure_lti` (docs/lti.md): the two lines to paste into the LMS, updates, and
a clear error on bad input; the admin pages of platforms, scoped to the institution."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from licensing.access.services import license_create
from licensing.models import AdminProfile, AuditEvent, LtiPlatform

ISSUER = "https://moodle.alpha.example"


@pytest.fixture
def licenses(db, public_dns):
    alpha = license_create(name="Alpha courses", institution="Alpha School", strategy="per_user")
    beta = license_create(name="Beta courses", institution="Beta College", strategy="per_user")
    return alpha, beta


@pytest.fixture
def public_dns(monkeypatch):
    """The made-up LMS host names resolve to one public address (nothing connects to it)."""
    from core import outbound

    monkeypatch.setattr(outbound, "getaddrinfo_sync", lambda host, port: ["93.184.215.14"])


def run(*args: str, **options) -> str:
    out = StringIO()
    call_command("configure_lti", *args, stdout=out, **options)
    return out.getvalue()


def base_args(**override) -> list[str]:
    values = {
        "--issuer": ISSUER,
        "--client-id": "tool-1",
        "--jwks-url": ISSUER + "/mod/lti/certs.php",
        "--auth-url": ISSUER + "/mod/lti/auth.php",
        "--license": "Alpha courses",
        "--allowance": "2000000",
        "--allowance-period": "week",
    }
    values.update(override)
    args = ["Alpha School", "--deployment-id", "1"]
    for name, value in values.items():
        if value is not None:
            args += [name, value]
    return args


def test_configure_prints_the_two_urls_and_updates(licenses):
    out = run(*base_args())
    assert out == (
        "login_url: http://127.0.0.1:8000/lti/login/\n"
        "launch_url: http://127.0.0.1:8000/lti/launch/\n"
    )
    platform = LtiPlatform.objects.get()
    assert (platform.issuer, platform.client_id, platform.deployment_ids) == (
        ISSUER,
        "tool-1",
        ["1"],
    )
    assert (platform.license, platform.allowance, platform.allowance_period) == (
        licenses[0],
        2_000_000,
        "week",
    )
    assert platform.institution.name == "Alpha School"
    out = run(*base_args(**{"--allowance-period": "day"}), "--deployment-id", "2")
    assert out.count("\n") == 2
    platform.refresh_from_db()
    assert platform.deployment_ids == ["1", "2"] and platform.allowance_period == "day"
    assert LtiPlatform.objects.count() == 1
    events = AuditEvent.objects.filter(action=AuditEvent.Action.SSO_CONFIGURED)
    assert [e.detail["created"] for e in events.order_by("id")] == [True, False]
    assert events.first().actor_name == "manage.py configure_lti"


@pytest.mark.parametrize(
    "override, message",
    [
        ({"--allowance": str(2**64)}, "--allowance is between"),
        ({"--allowance": "-1"}, "--allowance is between"),
        ({"--allowance": "lots"}, "whole number"),
        ({"--license": "Nope"}, "No license named"),
        ({"--license": "Beta courses"}, "belongs to another institution"),
        ({"--issuer": "https://x\x00.example"}, "NUL"),
        ({"--client-id": "\ud800"}, "invalid character"),
        ({"--jwks-url": "http://10.0.0.1/certs"}, "jwks_url"),
        ({"--auth-url": "file:///etc/passwd"}, "auth_login_url"),
        ({"--issuer": "x" * 600}, "issuer"),
    ],
)
def test_configure_refuses_bad_input(licenses, override, message):
    with pytest.raises(CommandError, match=message):
        run(*base_args(**override))
    assert not LtiPlatform.objects.exists()


def test_configure_refuses_an_unknown_institution_and_another_institutions_platform(licenses):
    with pytest.raises(CommandError, match="No institution named"):
        run("Nowhere", *base_args()[1:])
    with pytest.raises(CommandError, match="NUL"):
        run("Alpha\x00School", *base_args()[1:])
    run(*base_args())
    with pytest.raises(CommandError, match="Another institution"):
        run("Beta College", *base_args(**{"--license": "Beta courses"})[1:])


def test_an_institution_admin_manages_only_its_platforms(licenses, client_factory):
    alpha, beta = licenses
    run(*base_args())
    run("Beta College", *base_args(**{"--license": "Beta courses", "--client-id": "t2"})[1:])
    mine, theirs = (
        LtiPlatform.objects.get(client_id="tool-1"),
        LtiPlatform.objects.get(client_id="t2"),
    )
    user = get_user_model().objects.create_user("alpha-admin", is_staff=True)
    AdminProfile.objects.create(user=user, institution=alpha.institution, role="admin")
    browser = client_factory(user)
    listing = browser.get("/admin/licensing/ltiplatform/")
    assert listing.status_code == 200
    assert f"/ltiplatform/{mine.pk}/change/".encode() in listing.content
    assert f"/ltiplatform/{theirs.pk}/change/".encode() not in listing.content
    page = browser.get(f"/admin/licensing/ltiplatform/{mine.pk}/change/")
    assert page.status_code == 200
    assert b"login_url: http://127.0.0.1:8000/lti/login/" in page.content
    assert browser.get(f"/admin/licensing/ltiplatform/{theirs.pk}/change/").status_code == 404
    teacher = get_user_model().objects.create_user("t", is_staff=True)
    AdminProfile.objects.create(user=teacher, institution=alpha.institution, role="teacher")
    assert client_factory(teacher).get("/admin/licensing/ltiplatform/").status_code == 403


@pytest.fixture
def client_factory():
    from django.test import Client

    def make(user):
        c = Client()
        c.force_login(user)
        return c

    return make


def test_the_admin_form_checks_urls_and_the_license(licenses, client_factory):
    alpha, beta = licenses
    alpha.institution.currency, alpha.institution.micro_credits_per_currency_unit = "EUR", 10**6
    alpha.institution.save()
    user = get_user_model().objects.create_user("alpha-admin", is_staff=True)
    AdminProfile.objects.create(user=user, institution=alpha.institution, role="admin")
    browser = client_factory(user)
    form = {
        "institution": str(alpha.institution.pk),
        "issuer": ISSUER,
        "client_id": "tool-9",
        "deployment_ids": '["1"]',
        "jwks_url": "http://10.0.0.1/certs",
        "auth_login_url": ISSUER + "/auth",
        "license": str(alpha.pk),
        "allowance": "1.50",  # money, in the institution's currency (EUR below)
        "allowance_period": "week",
        "active": "on",
    }
    refused = browser.post("/admin/licensing/ltiplatform/add/", form)
    assert refused.status_code == 200
    assert b"not a public address" in refused.content
    other = browser.post(
        "/admin/licensing/ltiplatform/add/",
        {**form, "jwks_url": ISSUER + "/certs", "license": str(beta.pk)},
    )
    assert other.status_code == 200 and b"errorlist" in other.content
    # (a lone surrogate cannot be encoded by the test client; the forms' own tests send its bytes)
    for hostile in (str(2**64), "1e400", "-1", "1\x00", "NaN", "1.0000001", "x" * 10_000):
        refused = browser.post(
            "/admin/licensing/ltiplatform/add/",
            {**form, "jwks_url": ISSUER + "/certs", "allowance": hostile},
        )
        assert refused.status_code == 200 and b"errorlist" in refused.content, hostile
    assert not LtiPlatform.objects.exists()
    saved = browser.post(
        "/admin/licensing/ltiplatform/add/", {**form, "jwks_url": ISSUER + "/certs"}
    )
    assert saved.status_code == 302
    platform = LtiPlatform.objects.get()
    assert platform.institution == alpha.institution and platform.deployment_ids == ["1"]
    assert platform.allowance == 1_500_000  # 1.50 EUR at 1,000,000 micro-credits a euro
    listing = browser.get("/admin/licensing/ltiplatform/").content.decode()
    assert "1.50 EUR (1,500,000 micro-credits)" in listing
    event = AuditEvent.objects.get(action=AuditEvent.Action.SSO_CONFIGURED)
    assert event.actor == user and event.detail["method"] == "lti"
