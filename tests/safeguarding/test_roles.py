"""The safeguarding contact's role comes from an access rule at sign-in (an institution that
signs in only through its identity provider keeps it at every sign-in), or by hand; never from
an LMS launch."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from licensing.models import AdminProfile, IdentityProvider
from licensing.signin.lti import validate_lti_rules
from licensing.signin.sso import sign_in_complete

pytestmark = pytest.mark.django_db

DSL = {"when": [{"attribute": "groups", "contains": "dsl"}], "role": "safeguarding"}
TEACHERS = {"when": [{"attribute": "groups", "contains": "staff"}], "role": "teacher"}


def test_a_rule_gives_the_safeguarding_role_at_every_sign_in(world):
    institution = world["a"]["institution"]
    provider = IdentityProvider.objects.create(
        institution=institution,
        issuer="https://idp.a.example/realms/school",
        client_id="gateway",
        access_rules=[DSL, TEACHERS],
    )
    claims = {"sub": "dsl-1", "email": "dsl@a.example", "email_verified": True}
    signed_in = sign_in_complete(provider=provider, claims={**claims, "groups": ["dsl", "staff"]})
    profile = AdminProfile.objects.get(user=signed_in.user)
    assert (profile.role, profile.institution, signed_in.user.is_staff) == (
        "safeguarding",
        institution,
        True,
    )
    sign_in_complete(provider=provider, claims={**claims, "groups": ["staff"]})
    assert AdminProfile.objects.get(user=signed_in.user).role == "teacher"  # the IdP decides


def test_an_lms_never_gives_it():
    with pytest.raises(ValidationError):
        validate_lti_rules([DSL], institution_id=1)


def test_an_unknown_role_is_refused_naming_the_roles():
    from licensing.rules.access import check_rules

    with pytest.raises(ValidationError) as refused:
        check_rules([{"when": [], "role": "safeguard"}])
    assert "safeguarding" in str(refused.value)
