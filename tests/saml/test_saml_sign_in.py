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


def test_an_access_rule_on_a_saml_attribute_decides(alpha, idp, client_browser):
    """Rules read the SAML attributes by name: a teacher by eduPersonAffiliation, no group
    mapping needed (licensing.signin.access_rules)."""
    provider = alpha.provider
    for field in ("admin_groups", "reviewer_groups", "teacher_groups", "student_groups"):
        setattr(provider, field, [])
    provider.access_rules = [
        {"when": [{"attribute": "eduPersonAffiliation", "contains": "faculty"}], "role": "teacher"},
        {"when": [{"attribute": "eduPersonAffiliation", "contains": "student"}], "role": "student",
         "license": alpha.license.pk},
    ]  # fmt: skip
    provider.save()
    idp.sign_in_next("tom", **{**STUDENT, "eduPersonPrincipalName": "tom@alpha.example.edu",
                               "mail": "tom@alpha.example.edu",
                               "eduPersonAffiliation": ["faculty", "member"]})  # fmt: skip
    answer = sign_in(client_browser, provider)
    assert answer.status_code == 302, answer.content[:2000]
    identity = SsoIdentity.objects.get(provider=provider, subject="tom@alpha.example.edu")
    assert identity.user.gateway_profile.role == "teacher"
    assert not EndUser.objects.filter(user=identity.user).exists()
