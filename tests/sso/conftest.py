"""Two institutions, each with its own fake OpenID Connect provider on 127.0.0.1
(fake_upstreams/oidc.py), and the helper that walks a browser's sign-in: the gateway through
Django's test client, the IdP over real HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from fake_upstreams.oidc import OidcFake
from fake_upstreams.server import FakeServer
from licensing.access.services import license_create
from licensing.models import IdentityProvider, Institution, License
from licensing.signin import oidc
from licensing.signin.sso import identity_provider_configure


@pytest.fixture(scope="session")
def idp_servers():
    servers = [
        FakeServer(OidcFake(client_id="gw-alpha", client_secret="alpha-secret")),
        FakeServer(OidcFake(client_id="gw-beta", client_secret="beta-secret")),
    ]
    for server in servers:
        server.start()
    yield [server.app for server in servers]
    for server in servers:
        server.stop()


@pytest.fixture
def idps(idp_servers, settings):
    """Both fakes reset, the caches of discovery and keys empty, loopback allowed."""
    for fake in idp_servers:
        fake.reset()
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()
    ports = {int(urlsplit(fake.origin).port or 0) for fake in idp_servers}
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, *ports}),
    }
    yield idp_servers
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()


@dataclass
class Side:
    institution: Institution
    license: License
    provider: IdentityProvider
    idp: OidcFake


@pytest.fixture
def world(db, idps):
    """Alpha School (IdP A) and Beta College (IdP B), each with a per-user student license."""
    sides = []
    for name, fake, secret in (
        ("Alpha School", idps[0], "alpha-secret"),
        ("Beta College", idps[1], "beta-secret"),
    ):
        short = name.split()[0].lower()
        license = license_create(
            name=f"{name} students", institution=name, limit=1_000_000, strategy="per_user"
        )
        institution = license.institution
        provider = identity_provider_configure(
            institution=institution,
            issuer=fake.issuer,
            client_id=fake.client_id,
            client_secret=secret,
            admin_groups=[f"{short}-admins"],
            reviewer_groups=[f"{short}-reviewers"],
            teacher_groups=[f"{short}-teachers"],
            student_groups=[f"{short}-students"],
            student_license=license,
            email_domains=[f"{short}.example.edu"],
        )
        sides.append(Side(institution, license, provider, fake))
    return sides


def start(client, provider, next_path=None):
    """GET /sso/<id>/login/: the redirect to the IdP's authorize URL."""
    query = {"next": next_path} if next_path is not None else {}
    response = client.get(f"/sso/{provider.pk}/login/", query)
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


def at_idp(authorize_url) -> str:
    """The IdP's answer to the browser: the callback URL it redirects to (path and query)."""
    answer = httpx.get(authorize_url, follow_redirects=False, timeout=10)
    assert answer.status_code == 302, answer.text
    parts = urlsplit(answer.headers["location"])
    return f"{parts.path}?{parts.query}"


def sign_in(client, provider, next_path=None):
    """The whole round trip; the gateway's answer to the callback."""
    return client.get(at_idp(start(client, provider, next_path)))


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
def browser():
    """Django's test client (the suite's `client` fixture is an HTTP client of the live
    gateway): one browser with its own cookies."""
    from django.test import Client

    return Client()


@pytest.fixture
def gateway_log():
    """What the `gateway` logger writes (it does not propagate to caplog's root handler)."""
    import logging

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture
def public_dns(monkeypatch):
    """Host names of the tests' made-up IdPs resolve to one public address (the network edge:
    core.outbound's resolver); nothing connects to it."""
    from core import outbound

    monkeypatch.setattr(outbound, "getaddrinfo_sync", lambda host, port: ["93.184.215.14"])
