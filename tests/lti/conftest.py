"""Two institutions; Alpha School's LMS is a fake LTI 1.3 platform on 127.0.0.1
(fake_upstreams/lti.py), and the helpers that walk a launch: the LMS's login initiation and
the launch POST through Django's test client, the platform's auth endpoint over real HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from fake_upstreams.lti import LtiFake
from fake_upstreams.server import FakeServer
from licensing.access.services import license_create
from licensing.models import AuditEvent, Institution, License, LtiPlatform
from licensing.signin import lti


@pytest.fixture(scope="session")
def lti_server():
    server = FakeServer(LtiFake(client_id="gw-tool", deployment_id="dep-1"))
    server.start()
    yield server.app
    server.stop()


@pytest.fixture
def platform_fake(lti_server, settings):
    """The fake reset, the key cache empty, loopback allowed for the JWKS fetch."""
    lti_server.reset()
    lti.jwks_cache.clear()
    port = int(urlsplit(lti_server.origin).port or 0)
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
    }
    yield lti_server
    lti.jwks_cache.clear()


@dataclass
class World:
    institution: Institution
    license: License
    platform: LtiPlatform
    fake: LtiFake
    other: Institution
    other_license: License


@pytest.fixture
def world(db, platform_fake):
    license = license_create(
        name="Alpha courses", institution="Alpha School", limit=10**12, strategy="per_user"
    )
    other = license_create(
        name="Beta courses", institution="Beta College", limit=10**12, strategy="per_user"
    )
    platform, _ = lti.lti_platform_configure(
        institution=license.institution,
        issuer=platform_fake.issuer,
        client_id=platform_fake.client_id,
        deployment_ids=["dep-1"],
        jwks_url=platform_fake.jwks_url,
        auth_login_url=platform_fake.auth_url,
        license=license,
        allowance=5_000_000,
        allowance_period="week",
    )
    return World(license.institution, license, platform, platform_fake, other.institution, other)


def login_params(fake: LtiFake, **override) -> dict[str, str]:
    params = {
        "iss": fake.issuer,
        "login_hint": "hint-42",
        "target_link_uri": "http://testserver/lti/launch/",
        "lti_message_hint": "msg-7",
        "client_id": fake.client_id,
        "lti_deployment_id": "dep-1",
    }
    params.update(override)
    return {k: v for k, v in params.items() if v is not None}


def initiate(client, fake: LtiFake, **override) -> str:
    """The LMS's login initiation (a POST, as Moodle sends it): the platform's auth URL."""
    response = client.post("/lti/login/", login_params(fake, **override))
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


class _Form(HTMLParser):
    def __init__(self):
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action") or ""
        elif tag == "input" and a.get("name"):
            self.fields[a["name"]] = a.get("value") or ""


def at_platform(auth_url: str) -> tuple[str, dict[str, str]]:
    """The platform's answer to the browser: its auto-posting form (action, fields)."""
    answer = httpx.get(auth_url, timeout=10)
    assert answer.status_code == 200, answer.text
    form = _Form()
    form.feed(answer.text)
    return urlsplit(form.action).path, form.fields


def launch(client, fake: LtiFake, sub: str = "s-1", /, **claims):
    """A whole launch of `sub` (claims: roles, context, extra): the gateway's answer."""
    fake.launch_next(sub, **claims)
    path, fields = at_platform(initiate(client, fake))
    return client.post(path, fields)


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def refusals() -> list[str]:
    return [
        e.detail.get("reason")
        for e in AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN_REFUSED).order_by("id")
    ]


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


@pytest.fixture
def browser():
    """Django's test client that enforces CSRF like a browser's POST would meet it."""
    from django.test import Client

    return Client(enforce_csrf_checks=True)
