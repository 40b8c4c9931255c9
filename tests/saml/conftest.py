"""Two institutions' SAML providers: pysaml2's own IdP on 127.0.0.1 (fake_upstreams/saml_idp.py)
for Alpha School, its metadata fetched by URL through the outbound guard; and the helper that
walks a browser's sign-in: the gateway through Django's test client, the IdP over real HTTP."""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from fake_upstreams.saml_idp import SamlIdpFake
from fake_upstreams.server import FakeServer
from licensing.access.services import license_create
from licensing.models import IdentityProvider, Institution, License
from licensing.signin import saml
from licensing.signin.saml import SamlSource, saml_provider_configure


@pytest.fixture(scope="session", autouse=True)
def _sp_keys_once_per_name():
    """An institution's SP key pair is made once for the session, not once per test: a 3072-bit
    RSA key is 0.3-3 s of CPU and nearly every test configures a provider. Two institutions
    still have two key pairs."""
    made = functools.cache(saml.sp_key_pair_new)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(saml, "sp_key_pair_new", made)
        yield


@pytest.fixture(scope="session")
def idp_server():
    server = FakeServer(SamlIdpFake())
    server.start()
    yield server.app
    server.stop()


@pytest.fixture
def idp(idp_server, settings):
    """The fake reset, the metadata cache empty, loopback allowed for the outbound guard."""
    idp_server.reset()
    saml.metadata_cache.clear()
    port = int(urlsplit(idp_server.origin).port or 0)
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, port}),
    }
    yield idp_server
    saml.metadata_cache.clear()


@dataclass
class Side:
    institution: Institution
    license: License
    provider: IdentityProvider


def configure(name: str, source: SamlSource) -> Side:
    short = name.split()[0].lower()
    license = license_create(
        name=f"{name} students", institution=name, limit=1_000_000, strategy="per_user"
    )
    provider = saml_provider_configure(
        institution=license.institution,
        source=source,
        mapping={
            "admin_groups": [f"{short}-admins"],
            "teacher_groups": ["faculty"],
            "student_groups": ["student"],
            "student_license": license,
            "email_domains": [f"{short}.example.edu"],
        },
    )
    return Side(license.institution, license, provider)


@pytest.fixture
def alpha(db, idp, client_browser) -> Side:
    side = configure("Alpha School", SamlSource(metadata_url=idp.entity_id))
    answer = client_browser.get(f"/sso/{side.provider.pk}/saml/metadata/")
    assert answer.status_code == 200
    idp.trust_sp(answer.content.decode())
    return side


@pytest.fixture
def client_browser():
    from django.test import Client

    return Client()


def start(client, provider, next_path=None) -> str:
    """GET /sso/<id>/login/ and on: the IdP's SSO URL with the AuthnRequest."""
    query = {"next": next_path} if next_path is not None else {}
    answer = client.get(f"/sso/{provider.pk}/login/", query)
    assert answer.status_code == 302, answer.content[:500]
    answer = client.get(answer["Location"])
    assert answer.status_code == 302, answer.content[:500]
    return answer["Location"]


def at_idp(sso_url: str) -> tuple[str, str]:
    """The IdP's auto-posting form: the ACS path and the SAMLResponse."""
    page = httpx.get(sso_url, timeout=20)
    assert page.status_code == 200, page.text
    action = html.unescape(re.search(r'action="([^"]+)"', page.text).group(1))
    value = html.unescape(re.search(r'name="SAMLResponse" value="([^"]+)"', page.text).group(1))
    return urlsplit(action).path, value


def sign_in(client, provider, next_path=None):
    acs, response = at_idp(start(client, provider, next_path))
    return client.post(acs, {"SAMLResponse": response})
