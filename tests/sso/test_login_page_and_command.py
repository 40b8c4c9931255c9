"""The admin's login page (buttons per institution, the e-mail finder when there are many),
--sso-only (local passwords refused, superusers keep theirs), `manage.py configure_sso` and the
admin pages of identity providers."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.auth import SESSION_KEY, get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from core.crypto import reveal
from licensing.access.services import license_create
from licensing.models import AdminProfile, AuditEvent, IdentityProvider, Institution
from licensing.signin.sso import identity_provider_configure, sign_in_providers

from .conftest import sign_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("public_dns")]

User = get_user_model()


# --- the login page --------------------------------------------------------------------------


def test_the_admin_login_page_lists_the_buttons(browser, world):
    alpha, beta = world
    page = browser.get("/admin/login/?next=/admin/licensing/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Sign in with Alpha School" in html and "Sign in with Beta College" in html
    assert f'href="/sso/{alpha.provider.pk}/login/?next=%2Fadmin%2Flicensing%2F"' in html
    assert 'name="password"' in html  # the local form stays
    assert "/sso/find/" not in html  # two institutions: no finder
    # The admin's own redirect to its login page lands here too.
    assert browser.get("/admin/")["Location"].startswith("/admin/login/")


def test_many_institutions_get_the_email_finder(browser, world):
    for n in range(5):
        license = license_create(name=f"L{n}", institution=f"School {n}")
        identity_provider_configure(
            institution=license.institution,
            issuer=f"https://idp{n}.example.edu",
            client_id="c",
            client_secret="s",
        )
    assert len(sign_in_providers()) == 7
    html = browser.get("/admin/login/").content.decode()
    assert 'action="/sso/find/"' in html
    assert html.count('class="button sso-button"') == 7


def test_providers_for_the_portal_are_those_with_a_student_license(world):
    alpha = world[0]
    alpha.provider.student_license = None
    alpha.provider.student_groups = []
    alpha.provider.save()
    assert [p.institution for p in sign_in_providers(students_only=True)] == ["Beta College"]


def test_no_providers_no_buttons(browser, db):
    html = browser.get("/admin/login/").content.decode()
    assert "Sign in with" not in html and 'name="password"' in html


# --- --sso-only ------------------------------------------------------------------------------


def _password_login(browser, username, password):
    return browser.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
    )


def test_sso_only_refuses_local_passwords_but_not_superusers(browser, world):
    alpha = world[0]
    local = User.objects.create_user("local-admin", password="pw-123456", is_staff=True)
    AdminProfile.objects.create(user=local, institution=alpha.institution, role="admin")
    root = User.objects.create_superuser("root", "root@example.org", "root-pw-123")
    AdminProfile.objects.create(user=root, institution=alpha.institution, role="admin")
    # Without --sso-only the password works.
    assert _password_login(browser, "local-admin", "pw-123456").status_code == 302
    browser.logout()
    alpha.provider.sso_only = True
    alpha.provider.save()
    response = _password_login(browser, "local-admin", "pw-123456")
    assert response.status_code == 200
    assert SESSION_KEY not in browser.session
    assert "signs in with its identity provider only" in response.content.decode()
    assert "Sign in with Alpha School" in response.content.decode()
    event = AuditEvent.objects.get(action="sign_in_refused")
    assert event.detail["reason"] == "sso_only" and event.actor_name == "local-admin"
    # A wrong password says nothing about SSO (no hint to a guesser).
    wrong = _password_login(browser, "local-admin", "nope")
    assert "identity provider only" not in wrong.content.decode()
    # Break-glass: the superuser's password still opens the admin.
    assert _password_login(browser, "root", "root-pw-123").status_code == 302
    assert browser.session[SESSION_KEY] == str(root.pk)


def test_sso_only_leaves_other_institutions_alone(browser, world):
    alpha, beta = world
    alpha.provider.sso_only = True
    alpha.provider.save()
    user = User.objects.create_user("beta-local", password="pw-123456", is_staff=True)
    AdminProfile.objects.create(user=user, institution=beta.institution, role="reviewer")
    assert _password_login(browser, "beta-local", "pw-123456").status_code == 302


def test_sso_only_users_still_sign_in_with_the_idp(browser, world):
    alpha = world[0]
    alpha.provider.sso_only = True
    alpha.provider.save()
    alpha.idp.sign_in_next("z", email="z@alpha.example.edu", groups=["alpha-admins"])
    assert sign_in(browser, alpha.provider).status_code == 302
    assert browser.get("/admin/").status_code == 200  # the session holds on later requests


# --- configure_sso ---------------------------------------------------------------------------


def _run(*args, stdin=""):
    out = io.StringIO()
    import sys

    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        call_command("configure_sso", *args, stdout=out)
    finally:
        sys.stdin = old
    return out.getvalue()


def test_configure_sso_creates_with_a_secret_from_stdin(db, settings):
    license = license_create(name="Gamma students", institution="Gamma", strategy="per_user")
    out = _run(
        "Gamma",
        "--issuer",
        "https://login.gamma.example.edu/realms/school/",
        "--client-id",
        "gateway",
        "--client-secret",
        "-",
        "--admin-group",
        "it-staff",
        "--admin-group",
        "heads",
        "--student-group",
        "pupils",
        "--student-license",
        "Gamma students",
        "--sso-only",
        "--email-domain",
        "Gamma.Example.edu",
        stdin="the-secret\n",
    )
    provider = IdentityProvider.objects.get()
    assert provider.issuer == "https://login.gamma.example.edu/realms/school"
    assert reveal(provider.client_secret) == "the-secret"
    assert provider.admin_groups == ["it-staff", "heads"]
    assert provider.student_groups == ["pupils"] and provider.student_license == license
    assert provider.sso_only and provider.email_domains == "gamma.example.edu"
    assert f"http://127.0.0.1:8000/sso/{provider.pk}/callback/" in out
    assert "the-secret" not in out
    event = AuditEvent.objects.get(action="sso_configured")
    assert event.detail["created"] is True and "the-secret" not in str(event.detail)
    # At rest the secret is encrypted.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT client_secret FROM licensing_identityprovider")
        assert "the-secret" not in cursor.fetchone()[0]


def test_configure_sso_updates_with_a_secret_from_the_environment(db):
    license_create(name="Delta L", institution="Delta")
    _run(
        "Delta",
        "--issuer",
        "https://idp.delta.example",
        "--client-id",
        "a",
        "--client-secret",
        "-",
        "--reviewer-group",
        "r",
        stdin="s1\n",
    )
    out = _run(
        "Delta",
        "--issuer",
        "https://idp.delta.example",
        "--client-id",
        "b",
        "--client-secret-env",
        "DELTA_OIDC_SECRET",
        "--base-url",
        "https://gateway.delta.example/",
    )
    provider = IdentityProvider.objects.get()
    assert (provider.client_id, provider.client_secret_env) == ("b", "DELTA_OIDC_SECRET")
    assert not provider.client_secret
    assert provider.reviewer_groups == ["r"]  # left out: kept
    assert not provider.sso_only
    _run(*("Delta", "--issuer", "https://idp.delta.example", "--client-id", "b", "--sso-only"))
    _run("Delta", "--issuer", "https://idp.delta.example", "--client-id", "b")
    provider.refresh_from_db()
    assert provider.sso_only and provider.client_secret_env == "DELTA_OIDC_SECRET"
    _run("Delta", "--issuer", "https://idp.delta.example", "--client-id", "b", "--no-sso-only")
    provider.refresh_from_db()
    assert not provider.sso_only
    assert f"https://gateway.delta.example/sso/{provider.pk}/callback/" in out
    assert "updated" in out


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["Nowhere", "--issuer", "https://x.example", "--client-id", "c"], "", "No institution"),
        (["Eps", "--issuer", "https://x.example", "--client-id", "c"], "", "needs --client"),
        (
            ["Eps", "--issuer", "https://x.example", "--client-id", "c", "--client-secret", "s"],
            "",
            "takes '-'",
        ),
        (
            ["Eps", "--issuer", "https://x.example", "--client-id", "c", "--client-secret", "-"],
            "",
            "No client secret",
        ),
        (
            ["Eps", "--issuer", "http://10.0.0.1", "--client-id", "c", "--client-secret-env", "X"],
            "",
            "refused",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example/\x00", "--client-id", "c"),
                *("--client-secret", "-"),
            ],
            "s\n",
            "NUL",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example", "--client-id", "c"),
                *("--client-secret-env", "X", "--admin-group", "\x00bad"),
            ],
            "",
            "NUL",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example", "--client-id", "c"),
                *("--client-secret-env", "X", "--student-license", "Other L"),
            ],
            "",
            "No license named",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example", "--client-id", "c"),
                *("--client-secret-env", "X", "--student-group", "pupils"),
            ],
            "",
            "need a student license",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example", "--client-id", "c"),
                *("--client-secret-env", "1BAD NAME"),
            ],
            "",
            "environment variable",
        ),
        (
            [
                *("Eps", "--issuer", "https://x.example", "--client-id", "c"),
                *("--client-secret-env", "X", "--email-domain", "not a domain"),
            ],
            "",
            "e-mail domain",
        ),
    ],
)
def test_configure_sso_refuses_bad_input(db, args, stdin, message):
    license_create(name="Eps L", institution="Eps")
    license_create(name="Other L", institution="Other")
    with pytest.raises(CommandError, match=re.escape(message)):
        _run(*args, stdin=stdin)
    assert not IdentityProvider.objects.exists()


def test_an_issuer_belongs_to_one_institution(world):
    alpha, beta = world
    with pytest.raises(CommandError, match="Another institution"):
        _run(
            "Beta College",
            "--issuer",
            alpha.idp.issuer,
            "--client-id",
            "c",
            "--client-secret-env",
            "X",
        )


# --- the admin pages -------------------------------------------------------------------------


def test_identity_provider_admin_is_for_superusers_only(browser, world):
    alpha = world[0]
    url = reverse("admin:licensing_identityprovider_change", args=[alpha.provider.pk])
    staff = User.objects.create_user("inst-admin", password="pw", is_staff=True)
    AdminProfile.objects.create(user=staff, institution=alpha.institution, role="admin")
    browser.force_login(staff)
    assert browser.get(url).status_code in (302, 403)
    assert browser.get(reverse("admin:licensing_identityprovider_changelist")).status_code == 403
    assert browser.get(reverse("admin:licensing_ssoidentity_changelist")).status_code == 403


def test_identity_provider_admin_keeps_the_secret_write_only(browser, world):
    alpha = world[0]
    root = User.objects.create_superuser("root", "root@example.org", "pw")
    browser.force_login(root)
    url = reverse("admin:licensing_identityprovider_change", args=[alpha.provider.pk])
    page = browser.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "alpha-secret" not in html
    assert f"/sso/{alpha.provider.pk}/callback/" in html
    data = {
        "issuer": alpha.idp.issuer,
        "client_id": "gw-alpha",
        "client_secret": "",
        "client_secret_env": "",
        "groups_claim": "roles",
        "admin_groups": '["heads"]',
        "reviewer_groups": "[]",
        "teacher_groups": "[]",
        "student_groups": '["alpha-students"]',
        "student_license": str(alpha.license.pk),
        "email_domains": "alpha.example.edu",
        "active": "on",
    }
    response = browser.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    alpha.provider.refresh_from_db()
    assert alpha.provider.groups_claim == "roles" and alpha.provider.admin_groups == ["heads"]
    assert reveal(alpha.provider.client_secret) == "alpha-secret"  # blank: kept
    assert AuditEvent.objects.filter(action="sso_configured", actor=root).exists()
    # Bad input: a clear form error, nothing saved.
    bad = browser.post(url, {**data, "admin_groups": '["", 3]', "issuer": "ftp://x"})
    assert bad.status_code == 200
    assert "non-empty strings" in bad.content.decode() and "issuer" in bad.content.decode()
    other = license_create(name="Foreign", institution="Beta College")
    bad = browser.post(url, {**data, "student_license": str(other.pk)})
    assert "another institution" in bad.content.decode()


def test_identity_provider_add_page(browser, world):
    root = User.objects.create_superuser("root", "root@example.org", "pw")
    browser.force_login(root)
    institution = Institution.objects.create(name="Zeta")
    response = browser.post(
        reverse("admin:licensing_identityprovider_add"),
        {
            "institution": str(institution.pk),
            "issuer": "https://idp.zeta.example",
            "client_id": "z",
            "client_secret": "zeta-secret",
            "client_secret_env": "",
            "groups_claim": "groups",
            "admin_groups": '["z-admins"]',
            "reviewer_groups": "[]",
            "teacher_groups": "[]",
            "student_groups": "[]",
            "email_domains": "",
            "active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    provider = IdentityProvider.objects.get(institution=institution)
    assert reveal(provider.client_secret) == "zeta-secret"
