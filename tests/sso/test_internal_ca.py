"""Issue 35 item 2: an on-premises IdP whose certificate comes from the institution's own CA.
The test makes a CA and a server certificate for 127.0.0.1 (cryptography), serves the fake
IdP over https with it, and signs in through the real views: refused with a clear page and
audit row without `GATEWAY_EXTRA_CA_CERTS`, signed in with it (discovery, token, JWKS and
userinfo all over https). The same TLS context serves every admin-set URL
(core.outbound.outbound_ssl_context), so a JWT issuer's JWKS and an LTI key set are checked
against it too; the fetcher of /v1/fetch never trusts the extra CAs."""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.contrib.auth import SESSION_KEY

from core import outbound
from core.config import ConfigError, load
from fake_upstreams.oidc import OidcFake
from fake_upstreams.server import FakeServer
from licensing.access.services import license_create
from licensing.models import AuditEvent
from licensing.signin import oidc
from licensing.signin.sso import identity_provider_configure
from tests.tls import make_ca_and_server

from .conftest import query_of, start

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def internal_ca(tmp_path_factory):
    return make_ca_and_server(tmp_path_factory.mktemp("internal-ca"))


@pytest.fixture(scope="module")
def https_idp_server(internal_ca):
    _, chain, key = internal_ca
    server = FakeServer(
        OidcFake(client_id="gw-onprem", client_secret="onprem-secret"), tls=(str(chain), str(key))
    )
    server.start()
    yield server.app
    server.stop()


@pytest.fixture
def https_idp(https_idp_server, settings):
    https_idp_server.reset()
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()
    port = int(urlsplit(https_idp_server.origin).port or 0)
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
        "EXTRA_CA_CERTS": None,
    }
    yield https_idp_server
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()


@pytest.fixture
def onprem(db, https_idp):
    license = license_create(
        name="Alpha students", institution="Alpha School", limit=10**9, strategy="per_user"
    )
    return identity_provider_configure(
        institution=license.institution,
        issuer=https_idp.issuer,
        client_id="gw-onprem",
        client_secret="onprem-secret",
        admin_groups=["alpha-admins"],
    )


def browser_at_idp(authorize_url: str, ca: Path) -> str:
    """The browser's visit of the IdP (it trusts the institution's CA: the school's machines
    do); the callback path and query it is sent back to."""
    context = ssl.create_default_context(cafile=str(ca))
    answer = httpx.get(authorize_url, follow_redirects=False, timeout=10, verify=context)
    assert answer.status_code == 302, answer.text
    parts = urlsplit(answer.headers["location"])
    return f"{parts.path}?{parts.query}"


def test_an_idp_of_an_internal_ca_is_refused_clearly_then_signs_in_with_the_setting(
    browser, onprem, https_idp, internal_ca, settings, gateway_log
):
    ca = internal_ca[0]
    assert https_idp.issuer.startswith("https://127.0.0.1:")
    response = browser.get(f"/sso/{onprem.pk}/login/")
    assert response.status_code == 502
    assert b"Sign-in refused" in response.content
    assert b"not trusted" in response.content and b"GATEWAY_EXTRA_CA_CERTS" in response.content
    event = AuditEvent.objects.get(action="sign_in_refused")
    assert event.detail["reason"] == "idp_unavailable"
    assert "not trusted" in event.detail["message"]
    assert any("(certificate_untrusted)" in line for line in gateway_log)
    assert https_idp.requests == []  # the TLS handshake failed: no request was made

    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": str(ca)}
    oidc.discovery_cache.clear()  # an operator sets it and restarts
    https_idp.claims_at = "userinfo"  # and every call of the flow goes over https
    https_idp.sign_in_next("ana", email="ana@alpha.example.edu", groups=["alpha-admins"])
    authorize = start(browser, onprem)
    assert query_of(authorize)["client_id"] == "gw-onprem"
    response = browser.get(browser_at_idp(authorize, ca))
    assert response.status_code == 302, response.content[:800]
    assert SESSION_KEY in browser.session
    paths = [r.path for r in https_idp.requests]
    for path in ("/.well-known/openid-configuration", "/token", "/jwks", "/userinfo"):
        assert path in paths


def test_fetch_outbound_json_trusts_the_extra_ca(https_idp, internal_ca, settings):
    """The JWKS of JWT issuers and LTI platforms, discovery and userinfo all come here."""
    url = https_idp.issuer + "/jwks"
    with pytest.raises(outbound.Refused) as caught:
        outbound.fetch_outbound_json(url, max_bytes=65536, timeout=5)
    assert caught.value.code == "certificate_untrusted"
    assert "GATEWAY_EXTRA_CA_CERTS" in caught.value.message
    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": str(internal_ca[0])}
    assert outbound.fetch_outbound_json(url, max_bytes=65536, timeout=5)["keys"]
    # Added to certifi's CAs, not instead of them; one context, built once.
    context = outbound.outbound_ssl_context()
    assert context is outbound.outbound_ssl_context()
    subjects = [dict(x[0] for x in c["subject"]) for c in context.get_ca_certs()]
    assert {"commonName": "Alpha School Internal CA"} in subjects
    assert len(subjects) > 50
    # The fetcher of /v1/fetch (URLs an API client chose) keeps certifi's CAs only.
    assert outbound._ssl_context() is not context
    assert len(outbound._ssl_context().get_ca_certs()) == len(subjects) - 1


def test_a_name_the_certificate_lacks_is_still_refused(
    https_idp, internal_ca, settings, monkeypatch
):
    """The extra CA vouches for what it signed only (127.0.0.1 here): the host name is still
    checked, so a server of the institution's CA cannot pass for another name."""
    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": str(internal_ca[0])}
    monkeypatch.setattr(outbound, "getaddrinfo_sync", lambda host, port: ["127.0.0.1"])
    port = urlsplit(https_idp.issuer).port
    with pytest.raises(outbound.Refused) as caught:
        outbound.fetch_outbound_json(
            f"https://idp.alpha.example:{port}/jwks", max_bytes=65536, timeout=5
        )
    assert caught.value.code == "connection_failed"
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
    assert "mismatch" in caught.value.message.lower()


def test_the_setting_is_checked_at_start(tmp_path, monkeypatch, internal_ca):
    monkeypatch.setenv("GATEWAY_EXTRA_CA_CERTS", str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError) as caught:
        load()
    assert caught.value.lines[0].startswith("GATEWAY_EXTRA_CA_CERTS: not a readable PEM file")
    (tmp_path / "empty.pem").write_text("no certificate here\n")
    monkeypatch.setenv("GATEWAY_EXTRA_CA_CERTS", str(tmp_path / "empty.pem"))
    with pytest.raises(ConfigError) as caught:
        load()
    assert caught.value.lines[0].startswith("GATEWAY_EXTRA_CA_CERTS:")
    monkeypatch.setenv("GATEWAY_EXTRA_CA_CERTS", str(internal_ca[0]))
    assert load().gateway()["EXTRA_CA_CERTS"] == str(internal_ca[0].resolve())
    monkeypatch.setenv("GATEWAY_EXTRA_CA_CERTS", "")
    assert load().gateway()["EXTRA_CA_CERTS"] is None
