"""SAML sign-in across two gateway worker processes on PostgreSQL: the AuthnRequest made by
worker 0, the IdP's answer taken by worker 1 (the pending request lives in the database-backed
session), and the same answer replayed to worker 0 refused by the replay store both share
(SamlAssertionUse). A real client (httpx) keeps the cookies; the IdP is pysaml2's own."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore

from licensing.models import AuditEvent, SamlAssertionUse, SsoIdentity
from licensing.signin.saml import SamlSource

from .conftest import at_idp, configure
from .test_saml_hostile import _in_response_to
from .test_saml_sign_in import STUDENT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PUBLIC_URL = "http://gateway.test"  # both workers behind one name, as behind a balancer


def test_sign_in_spans_two_workers_and_a_replay_is_refused(transactional_db, idp, tmp_path):
    from django.db import connection

    from tests.processes import running_workers

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: workers on one database, as deployed")
    side = configure("Alpha School", SamlSource(metadata_url=idp.entity_id))
    env = {
        "GATEWAY_PUBLIC_URL": PUBLIC_URL,
        "GATEWAY_OUTBOUND_ALLOW": "127.0.0.1/32",
        "GATEWAY_OUTBOUND_ALLOWED_PORTS": f"443,{urlsplit(idp.origin).port}",
    }
    with running_workers(2, tmp_path, env=env) as (zero, one):
        metadata = zero.http.get(f"/sso/{side.provider.pk}/saml/metadata/")
        assert metadata.status_code == 200, metadata.text[:2000]
        idp.trust_sp(metadata.text)
        with httpx.Client(timeout=30) as browser:
            idp.sign_in_next("alice", **STUDENT)
            acs, response = at_idp(_authn_request(browser, zero.url, side.provider.pk))
            assert acs == f"/sso/{side.provider.pk}/saml/acs/"
            answer = browser.post(one.url + acs, data={"SAMLResponse": response})
            assert answer.status_code == 302, answer.text[:3000]
            assert answer.headers["Location"] == "/portal/"
            assert SsoIdentity.objects.get().subject == "alice@alpha.example.edu"
            assert SamlAssertionUse.objects.count() == 1
            # The session worker 1 made is worker 0's too (anonymous: a redirect to log in).
            assert browser.get(zero.url + "/portal/").status_code == 200

            # The replay: a new sign-in on worker 0 whose pending request is made the
            # answered one's, so only the shared store can tell.
            _authn_request(browser, zero.url, side.provider.pk)
            _pending_request_set(browser, _in_response_to(response))
            replay = browser.post(zero.url + acs, data={"SAMLResponse": response})
    assert replay.status_code == 403, replay.text[:3000]
    assert "saml_replay" in replay.text
    row = AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN_REFUSED).latest("pk")
    assert row.detail["reason"] == "saml_replay"
    assert SamlAssertionUse.objects.count() == 1


def _authn_request(browser: httpx.Client, base: str, provider_pk: int) -> str:
    """The login button on `base`: its redirects up to the IdP's SSO URL."""
    answer = browser.get(f"{base}/sso/{provider_pk}/login/")
    assert answer.status_code == 302, answer.text[:2000]
    answer = browser.get(base + answer.headers["Location"])
    assert answer.status_code == 302, answer.text[:2000]
    return answer.headers["Location"]


def _pending_request_set(browser: httpx.Client, request_id: str) -> None:
    session = SessionStore(session_key=browser.cookies[settings.SESSION_COOKIE_NAME])
    pending = session["saml_pending"]
    session["saml_pending"] = {**pending, "request_id": request_id}
    session.save()
