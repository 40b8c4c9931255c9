"""Hostile SAML answers: each refused with the refusal page and an audit row
`sign_in_refused`, never a session, never a 500."""

from __future__ import annotations

import base64

import pytest

from licensing.models import AuditEvent, SsoIdentity
from licensing.signin import saml

from .conftest import at_idp, sign_in, start
from .test_saml_sign_in import STUDENT

SESSION_KEY = "_auth_user_id"


def refused(answer, reason: str, status: int = 403) -> None:
    assert answer.status_code == status, answer.content[:3000]
    body = answer.content.decode()
    assert reason in body
    assert SESSION_KEY not in answer.wsgi_request.session
    row = AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN_REFUSED).latest("pk")
    assert row.detail["reason"] == reason
    assert not SsoIdentity.objects.exists()


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("unsigned", "saml_signature"),
        ("other_key", "saml_signature"),
        ("wrong_audience", "saml_invalid"),
        ("wrong_destination", "saml_destination"),
        ("wrong_in_response_to", "saml_in_response_to"),
        ("xsw_beside", "saml_assertion_count"),
        ("xsw_wrap", "saml_assertion_count"),
        ("xsw_extensions", "saml_assertion_count"),
        ("billion_laughs", "saml_xml_refused"),
        ("external_entity", "saml_xml_refused"),
    ],
)
def test_hostile_answer_refused(alpha, idp, client_browser, tamper, reason):
    idp.tamper = tamper
    idp.sign_in_next("alice", **STUDENT)
    answer = sign_in(client_browser, alpha.provider)
    refused(answer, reason)


@pytest.mark.parametrize("tamper", ["response_signed", "encrypted"])
def test_signed_response_and_encrypted_assertion_accepted(alpha, idp, client_browser, tamper):
    idp.tamper = tamper
    idp.sign_in_next("alice", **STUDENT)
    answer = sign_in(client_browser, alpha.provider)
    assert answer.status_code == 302, answer.content[:3000]
    assert SsoIdentity.objects.get().subject == "alice@alpha.example.edu"


def test_replayed_answer_refused(alpha, idp, client_browser):
    idp.sign_in_next("alice", **STUDENT)
    acs, response = at_idp(start(client_browser, alpha.provider))
    assert client_browser.post(acs, {"SAMLResponse": response}).status_code == 302
    SsoIdentity.objects.all().delete()
    client_browser.logout()
    # A replay with the session's pending request: the same answer, the same request id.
    start(client_browser, alpha.provider)
    session = client_browser.session
    pending = session["saml_pending"]
    pending["request_id"] = _in_response_to(response)
    session["saml_pending"] = pending
    session.save()
    refused(client_browser.post(acs, {"SAMLResponse": response}), "saml_replay")


def test_replay_without_pending_login_refused(alpha, idp, client_browser):
    idp.sign_in_next("alice", **STUDENT)
    acs, response = at_idp(start(client_browser, alpha.provider))
    assert client_browser.post(acs, {"SAMLResponse": response}).status_code == 302
    SsoIdentity.objects.all().delete()
    answer = client_browser.post(acs, {"SAMLResponse": response, "gw_bounced": "1"})
    assert answer.status_code == 400
    assert b"no_pending_login" in answer.content


def _in_response_to(response: str) -> str:
    text = base64.b64decode(response).decode()
    return text.split('InResponseTo="', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize(
    ("shift", "reason"), [(3600, "saml_expired"), (-3600, "saml_not_yet_valid")]
)
def test_validity_window_by_the_injected_clock(
    alpha, idp, client_browser, monkeypatch, shift, reason
):
    import time

    from licensing.signin import saml_views

    idp.sign_in_next("alice", **STUDENT)
    acs, response = at_idp(start(client_browser, alpha.provider))
    monkeypatch.setattr(saml, "clock", lambda: time.time() + shift)
    monkeypatch.setattr(saml_views, "clock", lambda: time.time() + 1)
    refused(client_browser.post(acs, {"SAMLResponse": response}), reason)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not base64 at all \x00",
        "A" * (saml.MAX_RESPONSE + 8),
        "PD94bWwgdmVyc2lvbj0iMS4wIj8+PGZvby8+",
    ],
    ids=["empty", "nul", "huge", "not_a_response"],
)
def test_garbage_answers_refused(alpha, idp, client_browser, value):
    start(client_browser, alpha.provider)
    answer = client_browser.post(f"/sso/{alpha.provider.pk}/saml/acs/", {"SAMLResponse": value})
    assert answer.status_code == 400, answer.content[:2000]
    assert SESSION_KEY not in answer.wsgi_request.session
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN_REFUSED).exists()


def test_huge_attribute_values_are_dropped(alpha, idp, client_browser):
    idp.sign_in_next(
        "alice",
        **{**STUDENT, "eduPersonAffiliation": ["student", "x" * 5000], "displayName": "A" * 100000},
    )
    answer = sign_in(client_browser, alpha.provider)
    assert answer.status_code == 302, answer.content[:2000]
    assert SsoIdentity.objects.get().groups == ["student"]


def test_claims_of_drops_nul_surrogates_and_escalation(alpha):
    ava = {
        "eduPersonPrincipalName": ["\x00root", "bob@alpha.example.edu"],
        "mail": ["bob\ud800@alpha.example.edu"],
        "eduPersonAffiliation": ["student", "alpha-admins\x00", "y" * 256, 2**64, None],
        "memberOf": ["z"] * 100000,
    }
    claims = saml.claims_of(alpha.provider, ava)
    # A value with a NUL is dropped, not cut at the NUL: "alpha-admins\x00" gives no admin.
    assert claims["sub"] == "bob@alpha.example.edu"
    assert "email" not in claims
    assert claims["groups"] == ["z", "student"]


def test_no_usable_subject_refused(alpha):
    with pytest.raises(saml.SamlError) as caught:
        saml.claims_of(
            alpha.provider, {"mail": ["a@alpha.example.edu"], "eduPersonPrincipalName": ["\x00"]}
        )
    assert caught.value.reason == "saml_no_subject"


def test_assertion_for_another_provider_refused(alpha, idp, client_browser, django_user_model):
    import httpx

    from .conftest import configure

    text = httpx.get(idp.entity_id).text.replace(idp.entity_id, "https://beta.example/idp")
    other = configure("Beta College", saml.SamlSource(metadata_xml=text))
    idp.sign_in_next("alice", **STUDENT)
    acs, response = at_idp(start(client_browser, alpha.provider))
    answer = client_browser.post(f"/sso/{other.provider.pk}/saml/acs/", {"SAMLResponse": response})
    assert answer.status_code == 400
    assert b"no_pending_login" in answer.content
    # With a sign-in pending at the other provider: still refused (sent to Alpha's ACS).
    start(client_browser, other.provider)
    answer = client_browser.post(f"/sso/{other.provider.pk}/saml/acs/", {"SAMLResponse": response})
    refused(answer, "saml_destination")


def test_bounce_of_a_cross_site_post(alpha, idp):
    from django.test import Client

    fresh = Client()
    answer = fresh.post(f"/sso/{alpha.provider.pk}/saml/acs/", {"SAMLResponse": "abc"})
    assert answer.status_code == 200
    assert b'name="gw_bounced" value="1"' in answer.content
    assert not AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN_REFUSED).exists()
