"""Issue 35 item 2 for LTI: a campus Moodle whose certificate comes from the institution's own
CA. The fake platform is served over https with a CA the test makes
(tests/sso/test_internal_ca.py); without `GATEWAY_EXTRA_CA_CERTS` its key set cannot be
fetched (a clear refusal, and the log line naming `certificate_untrusted`), with it the
launch goes through."""

from __future__ import annotations

import logging
import ssl
from urllib.parse import urlsplit

import httpx
import pytest

from fake_upstreams.lti import INSTRUCTOR, LtiFake
from fake_upstreams.server import FakeServer
from licensing.access.services import license_create
from licensing.models import Course
from licensing.signin import lti
from tests.tls import make_ca_and_server

from .conftest import _Form, initiate, signed_in
from .test_launch import assert_refused

pytestmark = pytest.mark.django_db


@pytest.fixture
def jwks_lines():
    """The `gateway` log's lines about key sets (it does not propagate to caplog's handler)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("gateway")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def campus_ca(tmp_path_factory):
    return make_ca_and_server(tmp_path_factory.mktemp("campus-ca"))


@pytest.fixture(scope="module")
def https_platform_server(campus_ca):
    _, chain, key = campus_ca
    server = FakeServer(
        LtiFake(client_id="gw-tool", deployment_id="dep-1"), tls=(str(chain), str(key))
    )
    server.start()
    yield server.app
    server.stop()


@pytest.fixture
def campus(db, https_platform_server, settings):
    fake = https_platform_server
    fake.reset()
    lti.jwks_cache.clear()
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, urlsplit(fake.origin).port}),
        "EXTRA_CA_CERTS": None,
    }
    license = license_create(
        name="Alpha courses", institution="Alpha School", limit=10**12, strategy="per_user"
    )
    lti.lti_platform_configure(
        institution=license.institution,
        issuer=fake.issuer,
        client_id=fake.client_id,
        deployment_ids=["dep-1"],
        jwks_url=fake.jwks_url,
        auth_login_url=fake.auth_url,
        license=license,
        allowance=None,
        allowance_period="week",
    )
    yield fake
    lti.jwks_cache.clear()


def launch_over_https(browser, fake: LtiFake, ca) -> object:
    """The LMS's login initiation, the browser at the platform (it trusts the campus CA), the
    auto-posted launch: the gateway's answer."""
    fake.launch_next("teach-1", roles=INSTRUCTOR)
    context = ssl.create_default_context(cafile=str(ca))
    answer = httpx.get(initiate(browser, fake), timeout=10, verify=context)
    assert answer.status_code == 200, answer.text
    form = _Form()
    form.feed(answer.text)
    return browser.post(urlsplit(form.action).path, form.fields)


def test_a_campus_lms_needs_its_ca(browser, campus, campus_ca, settings, jwks_lines):
    ca = campus_ca[0]
    assert campus.issuer.startswith("https://")
    response = launch_over_https(browser, campus, ca)
    assert_refused(response, 403, "bad_signature", browser)
    assert any(
        line.startswith("JWKS ") and "(certificate_untrusted)" in line for line in jwks_lines
    ), jwks_lines

    settings.GATEWAY = {**settings.GATEWAY, "EXTRA_CA_CERTS": str(ca)}
    lti.jwks_cache.clear()  # an operator sets it and restarts
    response = launch_over_https(browser, campus, ca)
    assert response.status_code == 302, response.content[:800]
    assert signed_in(browser)
    assert Course.objects.count() == 1
