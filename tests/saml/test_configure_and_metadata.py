"""configure_saml, the SP metadata, the login buttons, and the IdP metadata: fetched through
the outbound guard, cached, refreshed, its federation signature checked."""

from __future__ import annotations

import io

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from core.crypto import reveal
from licensing.access.services import license_create
from licensing.models import AuditEvent, IdentityProvider
from licensing.signin import saml
from licensing.signin.sso import sign_in_providers

from .conftest import start


def _institution():
    return license_create(
        name="Gamma students", institution="Gamma School", limit=1000, strategy="per_user"
    )


def test_command_with_metadata_url(db, idp):
    _institution()
    out = io.StringIO()
    call_command(
        "configure_saml",
        "Gamma School",
        "--metadata-url",
        idp.entity_id,
        "--student-group",
        "student",
        "--student-license",
        "Gamma students",
        "--base-url",
        "https://gw.example.org",
        stdout=out,
    )
    provider = IdentityProvider.objects.get()
    assert provider.protocol == "saml"
    assert provider.issuer == idp.entity_id
    assert provider.student_groups == ["student"]
    assert provider.saml_sp_cert.startswith("-----BEGIN CERTIFICATE-----")
    assert reveal(provider.saml_sp_key).startswith("-----BEGIN PRIVATE KEY-----")
    with connection.cursor() as cursor:  # sealed at rest
        cursor.execute("SELECT saml_sp_key FROM licensing_identityprovider")
        assert "PRIVATE" not in cursor.fetchone()[0]
    text = out.getvalue()
    assert f"https://gw.example.org/sso/{provider.pk}/saml/metadata/" in text
    assert f"https://gw.example.org/sso/{provider.pk}/saml/acs/" in text
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SSO_CONFIGURED).exists()
    assert [p.institution for p in sign_in_providers(students_only=True)] == ["Gamma School"]


def test_command_with_metadata_file(db, idp, tmp_path):
    _institution()
    path = tmp_path / "idp.xml"
    path.write_text(httpx.get(idp.entity_id).text)
    call_command(
        "configure_saml", "Gamma School", "--metadata-file", str(path), stdout=io.StringIO()
    )
    provider = IdentityProvider.objects.get()
    assert (
        provider.saml_metadata_xml.startswith("<?xml")
        or "EntityDescriptor" in provider.saml_metadata_xml
    )
    assert provider.saml_metadata_url == ""


@pytest.mark.parametrize(
    "text",
    [
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>',
        "<not-metadata/>",
        "\x00",
    ],
    ids=["entities", "not_metadata", "nul"],
)
def test_command_refuses_bad_metadata(db, tmp_path, text):
    _institution()
    path = tmp_path / "idp.xml"
    path.write_text(text)
    with pytest.raises(CommandError):
        call_command("configure_saml", "Gamma School", "--metadata-file", str(path))
    assert not IdentityProvider.objects.exists()


def test_command_refuses_private_metadata_url(db, settings):
    _institution()
    with pytest.raises(CommandError, match="refused"):
        call_command(
            "configure_saml", "Gamma School", "--metadata-url", "http://169.254.169.254/md"
        )


def test_sp_metadata_served(alpha, client_browser):
    answer = client_browser.get(f"/sso/{alpha.provider.pk}/saml/metadata/")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/samlmetadata+xml"
    body = answer.content.decode()
    assert f"/sso/{alpha.provider.pk}/saml/acs/" in body
    assert "X509Certificate" in body
    assert "PRIVATE" not in body
    assert client_browser.get("/sso/999/saml/metadata/").status_code == 404


def test_login_button_leads_to_the_idp(alpha, idp, client_browser):
    page = client_browser.get("/admin/login/")
    assert f"/sso/{alpha.provider.pk}/login/" in page.content.decode()
    url = start(client_browser, alpha.provider, next_path="/portal/")
    assert url.startswith(f"{idp.origin}/sso?SAMLRequest=")
    assert client_browser.session["saml_pending"]["next"] == "/portal/"


def test_metadata_cached_and_refreshed(alpha, idp):
    now = [1000.0]
    fetched = []

    def fetch(url):
        fetched.append(url)
        return httpx.get(url).text

    cache = saml.MetadataCache(clock=lambda: now[0], fetch=fetch)
    cache.metadata_for(alpha.provider)
    cache.metadata_for(alpha.provider)
    assert len(fetched) == 1
    now[0] += saml.METADATA_LIFESPAN + 1
    cache.metadata_for(alpha.provider)
    assert len(fetched) == 2


def test_metadata_refresh_failure_keeps_the_old_document(alpha, idp):
    now = [1000.0]
    cache = saml.MetadataCache(clock=lambda: now[0], fetch=lambda url: httpx.get(url).text)
    good = cache.metadata_for(alpha.provider)
    idp.fail_next(503, times=5)
    now[0] += saml.METADATA_LIFESPAN + 1
    assert cache.metadata_for(alpha.provider) == good


def test_federation_signature_checked(alpha, idp):
    from fake_upstreams.saml_idp import key_pair

    _, other_cert = key_pair("not the federation")
    alpha.provider.saml_federation_cert = other_cert
    text = httpx.get(idp.entity_id).text  # unsigned metadata
    with pytest.raises(saml.SamlError) as caught:
        saml.checked_metadata(alpha.provider, text)
    assert caught.value.reason == "metadata_signature"


def test_federation_signed_metadata_accepted_and_tampering_refused(alpha, idp):
    idp.sign_metadata = True
    alpha.provider.saml_federation_cert = idp.cert_pem
    text = httpx.get(idp.entity_id).text
    assert "Signature" in text
    assert saml.checked_metadata(alpha.provider, text) == text
    forged = text.replace(f"{idp.origin}/sso", "https://evil.example/sso")
    with pytest.raises(saml.SamlError) as caught:
        saml.checked_metadata(alpha.provider, forged)
    assert caught.value.reason == "metadata_signature"
