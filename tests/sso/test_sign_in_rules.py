"""Access rules at OIDC sign-in, end to end with the fake IdP over real HTTP: a pupil whose
attributes change moves tier (license) at the next sign-in, a rule's courses are joined,
hostile attribute values are refused with a page and an audit row; configure_sso --rules; the
groups fields written as rules (the data migration's function)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import SESSION_KEY
from django.core.management import CommandError, call_command

from licensing.access.credentials import api_key_create
from licensing.access.services import license_create
from licensing.models import ApiKey, AuditEvent, Course, CourseMember, EndUser, IdentityProvider
from licensing.signin.sso import identity_provider_configure, sign_in_providers

from .conftest import sign_in

pytestmark = pytest.mark.django_db


def _rules(alpha, primary, secondary, course=None):
    return [
        {
            "when": [
                {"attribute": "eduPersonAffiliation", "contains": "student"},
                {"attribute": "age_group", "is": "u13"},
            ],
            "role": "student",
            "license": primary.pk,
            "courses": [course.pk] if course else [],
        },
        {
            "when": [{"attribute": "eduPersonAffiliation", "contains": "student"}],
            "role": "student",
            "license": secondary.pk,
        },
    ]


def _configure(alpha, rules):
    return identity_provider_configure(
        institution=alpha.institution,
        issuer=alpha.idp.issuer,
        client_id=alpha.idp.client_id,
        admin_groups=[],
        reviewer_groups=[],
        teacher_groups=[],
        student_groups=[],
        student_license=None,
        access_rules=rules,
    )


@pytest.fixture
def tiers(world):
    alpha = world[0]
    primary = license_create(
        name="Primary", institution=alpha.institution.name, limit=1000, strategy="per_user"
    )
    course = Course.objects.create(
        institution=alpha.institution, license=primary, code="P4", name="Year 4"
    )
    provider = _configure(alpha, _rules(alpha, primary, alpha.license, course))
    return alpha, provider, primary, course


def test_a_pupil_moves_tier_at_the_next_sign_in(browser, tiers):
    alpha, provider, primary, course = tiers
    claims = {"eduPersonAffiliation": ["student", "member"], "age_group": "u13"}
    alpha.idp.sign_in_next("pia", email="pia@alpha.example.edu", **claims)
    assert sign_in(browser, provider).status_code == 302
    pupil = EndUser.objects.get(user__username="pia@alpha.example.edu")
    assert pupil.license == primary and pupil.active
    assert CourseMember.objects.filter(course=course, end_user=pupil).exists()
    key, _ = api_key_create(name="portal", license=primary, end_user=pupil)
    # She turns 13: the IdP says u18 now; the next sign-in moves her to the secondary license.
    browser.logout()
    alpha.idp.sign_in_next(
        "pia", email="pia@alpha.example.edu", eduPersonAffiliation=["student"], age_group="u18"
    )
    assert sign_in(browser, provider).status_code == 302
    now = EndUser.objects.get(user__username="pia@alpha.example.edu", active=True)
    assert now.license == alpha.license
    pupil.refresh_from_db()
    assert not pupil.active  # the old tier's end user ends, with its keys
    assert not ApiKey.objects.get(pk=key.pk).active
    changes = AuditEvent.objects.filter(action="role_changed").values_list(
        "detail__change", flat=True
    )
    assert "student role removed (1 portal keys revoked)" in changes


def test_no_rule_matches_no_role(browser, tiers):
    alpha, provider, *_ = tiers
    alpha.idp.sign_in_next("sam", email="sam@alpha.example.edu", eduPersonAffiliation=["staff"])
    response = sign_in(browser, provider)
    assert response.status_code == 403 and b"Sign-in refused" in response.content
    assert SESSION_KEY not in browser.session


@pytest.mark.parametrize(
    "raw",
    ['"stu\\u0000dent"', '"\\ud800"', '[{"x": 1}]', "1e400", "18446744073709551616"],
)
def test_hostile_attribute_values_refused(browser, tiers, raw):
    alpha, provider, *_ = tiers
    alpha.idp.sign_in_next("eve", email="eve@alpha.example.edu", raw={"eduPersonAffiliation": raw})
    response = sign_in(browser, provider)
    assert response.status_code == 403, response.content[:500]
    assert b"Sign-in refused" in response.content
    assert SESSION_KEY not in browser.session
    row = AuditEvent.objects.filter(action="sign_in_refused").latest("pk")
    assert row.detail["reason"] == "invalid_attributes"
    assert not EndUser.objects.filter(user__username="eve@alpha.example.edu").exists()


def test_a_rule_naming_a_deleted_license_refuses(browser, tiers):
    alpha, provider, primary, course = tiers
    course.delete()
    alpha.idp.sign_in_next(
        "pia", email="pia@alpha.example.edu", eduPersonAffiliation="student", age_group="u13"
    )
    response = sign_in(browser, provider)
    assert response.status_code == 403
    assert (
        AuditEvent.objects.filter(action="sign_in_refused").latest("pk").detail["reason"]
        == "rule_target_missing"
    )


def test_rules_and_groups_not_both_and_other_institutions_ids_refused(world):
    alpha, beta = world
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        identity_provider_configure(
            institution=alpha.institution,
            issuer=alpha.idp.issuer,
            client_id=alpha.idp.client_id,
            admin_groups=["x"],
            access_rules=[{"when": [], "role": "teacher"}],
        )
    with pytest.raises(ValidationError):
        _configure(alpha, [{"when": [], "role": "student", "license": beta.license.pk}])
    alpha.provider.refresh_from_db()
    assert alpha.provider.admin_groups == ["alpha-admins"]  # nothing changed


def test_portal_buttons_follow_the_rules(tiers):
    names = [p.institution for p in sign_in_providers(students_only=True)]
    assert "Alpha School" in names


def test_configure_sso_rules_option(world, tmp_path):
    alpha, beta = world
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps([{"when": [{"attribute": "groups", "contains": "t"}], "role": "teacher"}])
    )
    call_command(
        "configure_sso", alpha.institution.name, "--issuer", alpha.idp.issuer,
        "--client-id", alpha.idp.client_id, "--rules", str(path),
    )  # fmt: skip
    provider = IdentityProvider.objects.get(pk=alpha.provider.pk)
    assert provider.access_rules == [
        {
            "when": [{"attribute": "groups", "contains": "t"}],
            "role": "teacher",
            "license": None,
            "courses": [],
        }
    ]
    assert provider.admin_groups == [] and provider.student_license is None
    path.write_text(json.dumps([{"role": "student", "license": beta.license.pk}]))
    with pytest.raises(CommandError, match="No license of this institution"):
        call_command(
            "configure_sso", alpha.institution.name, "--issuer", alpha.idp.issuer,
            "--client-id", alpha.idp.client_id, "--rules", str(path),
        )  # fmt: skip
    path.write_text('[{"role": "teacher", "license": 1e400}]')
    with pytest.raises(CommandError):
        call_command(
            "configure_sso", alpha.institution.name, "--issuer", alpha.idp.issuer,
            "--client-id", alpha.idp.client_id, "--rules", str(path),
        )  # fmt: skip


def test_groups_fields_are_rules_on_every_save(world):
    """What the data migration writes for existing providers: the same function, on save."""
    alpha = world[0]
    provider = alpha.provider
    assert provider.access_rules == provider.rules_of_groups()
    assert [r["role"] for r in provider.access_rules] == [
        "admin", "admin", "reviewer", "reviewer", "teacher", "teacher", "student",
    ]  # fmt: skip
    provider.teacher_groups = []
    provider.save(update_fields=["teacher_groups"])
    provider.refresh_from_db()
    assert "teacher" not in [r["role"] for r in provider.access_rules]
