"""SAML sign-in through Django's test client against pysaml2's IdP on 127.0.0.1."""

from __future__ import annotations

from licensing.models import AuditEvent, EndUser, SamlAssertionUse, SsoIdentity

from .conftest import sign_in

STUDENT = {
    "eduPersonPrincipalName": "alice@alpha.example.edu",
    "mail": "alice@alpha.example.edu",
    "displayName": "Alice",
    "eduPersonAffiliation": ["student", "member"],
}


def test_student_signs_in(alpha, idp, client_browser):
    idp.sign_in_next("alice", **STUDENT)
    answer = sign_in(client_browser, alpha.provider)
    assert answer.status_code == 302, answer.content[:2000]
    assert answer["Location"] == "/portal/"
    identity = SsoIdentity.objects.get(provider=alpha.provider)
    assert identity.subject == "alice@alpha.example.edu"
    assert identity.user.email == "alice@alpha.example.edu"
    assert "student" in identity.groups
    assert EndUser.objects.filter(user=identity.user, license=alpha.license, active=True).exists()
    assert SamlAssertionUse.objects.filter(provider=alpha.provider).count() == 1
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SIGN_IN).exists()
