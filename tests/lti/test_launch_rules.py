"""LTI launches with the platform's access rules (docs/access-rules.md): LTI roles and custom
claims as attributes; teacher or student by the first rule that matches; no rule, a hostile
value: refused with a page and an audit row; no rules: today's launch; configure_lti --rules."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from licensing.access.services import license_create
from licensing.models import AdminProfile, Course, CourseMember, EndUser, LtiPlatform
from licensing.signin import lti

from .conftest import launch, refusals, signed_in

pytestmark = pytest.mark.django_db

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
INSTRUCTOR = [LIS + "membership#Instructor"]
LEARNER = [LIS + "membership#Learner"]
MENTOR = [LIS + "membership#Mentor"]


def _set_rules(world, rules):
    lti.lti_platform_configure(
        institution=world.institution,
        issuer=world.fake.issuer,
        client_id=world.fake.client_id,
        deployment_ids=["dep-1"],
        jwks_url=world.fake.jwks_url,
        auth_login_url=world.fake.auth_url,
        license=world.license,
        allowance=5_000_000,
        allowance_period="week",
        access_rules=rules,
    )


@pytest.fixture
def ruled(world):
    primary = license_create(
        name="Alpha primary", institution=world.institution.name, limit=10**9, strategy="per_user"
    )
    _set_rules(
        world,
        [
            {
                "when": [
                    {"attribute": "roles", "contains": INSTRUCTOR[0]},
                    {"attribute": "custom.stage", "is": "primary"},
                ],
                "role": "teacher",
                "license": primary.pk,
            },
            {"when": [{"attribute": "roles", "contains": INSTRUCTOR[0]}], "role": "teacher"},
            {"when": [{"attribute": "roles", "any_of": [LEARNER[0], MENTOR[0]]}], "role": "student"
             , "license": world.license.pk},
        ],
    )  # fmt: skip
    return world, primary


def test_a_rule_puts_the_created_course_on_its_license(ruled, browser):
    world, primary = ruled
    response = launch(
        browser, world.fake, "t-1", roles=INSTRUCTOR, **{CLAIM + "custom": {"stage": "primary"}}
    )
    assert response.status_code == 302, response.content[:500]
    course = Course.objects.get()
    assert course.license == primary
    assert AdminProfile.objects.get(user__lti_identities__subject="t-1").role == "teacher"


def test_a_rule_lets_a_mentor_in_as_a_student(ruled, browser):
    world, primary = ruled
    assert launch(browser, world.fake, "t-2", roles=INSTRUCTOR).status_code == 302
    course = Course.objects.get()
    assert course.license == world.license  # the second rule: the platform's license
    from django.test import Client

    pupil = Client(enforce_csrf_checks=True)
    response = launch(pupil, world.fake, "m-1", roles=MENTOR)
    assert response.status_code == 302, response.content[:500]
    member = CourseMember.objects.get(course=course)
    assert member.end_user.subject == "m-1" and member.end_user.license == world.license


def test_no_rule_matches_refused(ruled, browser):
    world, _ = ruled
    response = launch(browser, world.fake, "x-1", roles=[LIS + "membership#ContentDeveloper"])
    assert response.status_code == 403
    assert refusals()[-1] == "no_matching_rule" and not signed_in(browser)


@pytest.mark.parametrize(
    "custom", [{"stage": "pri\u0000mary"}, {"stage": ["a", {"b": 1}]}, {"stage": 2**64}]
)
def test_hostile_custom_claims_refused(ruled, browser, custom):
    world, _ = ruled
    response = launch(browser, world.fake, "t-3", roles=INSTRUCTOR, **{CLAIM + "custom": custom})
    assert response.status_code == 400, response.content[:300]
    assert refusals()[-1] == "invalid_attributes" and not signed_in(browser)
    assert not Course.objects.exists() and not EndUser.objects.exists()


def test_without_rules_the_launch_is_todays(world, browser):
    assert LtiPlatform.objects.get().access_rules == []
    response = launch(browser, world.fake, "m-2", roles=MENTOR)
    assert response.status_code == 403 and refusals()[-1] == "no_lti_role"


def test_lti_rules_give_no_admin_and_stay_in_the_institution(world):
    with pytest.raises(ValidationError):
        _set_rules(world, [{"when": [], "role": "admin"}])
    with pytest.raises(ValidationError):
        _set_rules(world, [{"when": [], "role": "student", "license": world.other_license.pk}])
    assert LtiPlatform.objects.get().access_rules == []


def test_configure_lti_rules_option(world, tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps(
            [
                {
                    "when": [{"attribute": "roles", "contains": "Learner"}],
                    "role": "student",
                    "license": world.license.pk,
                }
            ]
        )
    )
    args = [
        "configure_lti", world.institution.name, "--issuer", world.fake.issuer,
        "--client-id", world.fake.client_id, "--deployment-id", "dep-1",
        "--jwks-url", world.fake.jwks_url, "--auth-url", world.fake.auth_url,
        "--license", world.license.name,
    ]  # fmt: skip
    call_command(*args, "--rules", str(path))
    assert LtiPlatform.objects.get().access_rules[0]["role"] == "student"
    path.write_text('[{"role": "teacher"}, NaN]')
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command(*args, "--rules", str(path))
    call_command(*args)  # left out: kept
    assert len(LtiPlatform.objects.get().access_rules) == 1


def test_the_platform_admin_page_edits_and_tries_rules(world):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from licensing.models import AdminProfile

    user = get_user_model().objects.create_user("alpha-admin", is_staff=True)
    AdminProfile.objects.create(user=user, institution=world.institution, role="admin")
    browser = Client()
    browser.force_login(user)
    url = f"/admin/licensing/ltiplatform/{world.platform.pk}/change/"
    form = {
        "institution": str(world.institution.pk),
        "issuer": world.fake.issuer,
        "client_id": world.fake.client_id,
        "deployment_ids": '["dep-1"]',
        "jwks_url": world.fake.jwks_url,
        "auth_login_url": world.fake.auth_url,
        "license": str(world.license.pk),
        "allowance": "",
        "allowance_period": "week",
        "active": "on",
    }
    teacher = {"when": [{"attribute": "custom.stage", "is": "staff"}], "role": "teacher"}
    bad = browser.post(url, {**form, "access_rules": json.dumps([{**teacher, "role": "admin"}])})
    assert bad.status_code == 200 and "an LTI rule gives teacher, student" in bad.content.decode()
    foreign = [{"when": [], "role": "student", "license": world.other_license.pk}]
    bad = browser.post(url, {**form, "access_rules": json.dumps(foreign)})
    assert bad.status_code == 200 and "No license of this institution" in bad.content.decode()
    assert LtiPlatform.objects.get().access_rules == []
    saved = browser.post(url, {**form, "access_rules": json.dumps([teacher])})
    assert saved.status_code == 302, [
        str(e) for e in saved.context["adminform"].form.errors.items()
    ]
    assert LtiPlatform.objects.get().access_rules[0]["role"] == "teacher"
    page = browser.get(url).content.decode()
    assert "custom.stage is staff" in page and 'id="try-rules"' in page
    try_url = f"/admin/licensing/ltiplatform/{world.platform.pk}/try-rules/"
    claims = {CLAIM + "custom": {"stage": "staff"}}
    answer = browser.post(try_url, {"attributes": json.dumps(claims)}).json()
    assert (answer["outcome"], answer["rule"], answer["role"]) == ("matched", 1, "teacher")
    claims = {CLAIM + "custom": {"stage": "\u0000"}}
    assert browser.post(try_url, {"attributes": json.dumps(claims)}).json()["outcome"] == "refused"
