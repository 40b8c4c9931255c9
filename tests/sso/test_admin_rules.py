"""The identity provider's admin page with access rules: the rules written as JSON (groups
cleared), shown as a table, scoped to the institution, and the "try these attributes" panel
(status, body; hostile pasted values refused, never a 500)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from licensing.access.services import license_create
from licensing.models import IdentityProvider

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def root(browser):
    user = User.objects.create_superuser("root", "root@example.org", "pw")
    browser.force_login(user)
    return user


def _data(alpha, rules, **groups):
    return {
        "issuer": alpha.idp.issuer,
        "client_id": "gw-alpha",
        "client_secret": "",
        "client_secret_env": "",
        "groups_claim": "groups",
        "admin_groups": groups.get("admin", "[]"),
        "reviewer_groups": "[]",
        "teacher_groups": "[]",
        "student_groups": "[]",
        "student_license": "",
        "access_rules": json.dumps(rules),
        "email_domains": "alpha.example.edu",
        "active": "on",
    }


def test_rules_written_in_the_admin_and_tried(browser, world, root):
    alpha = world[0]
    url = reverse("admin:licensing_identityprovider_change", args=[alpha.provider.pk])
    rules = [
        {
            "when": [{"attribute": "eduPersonAffiliation", "contains": "student"}],
            "role": "student",
            "license": alpha.license.pk,
        },
        {"when": [{"attribute": "eduPersonAffiliation", "contains": "faculty"}], "role": "teacher"},
    ]
    response = browser.post(url, _data(alpha, rules))
    assert response.status_code == 302, response.content.decode()[:3000]
    provider = IdentityProvider.objects.get(pk=alpha.provider.pk)
    assert [r["role"] for r in provider.access_rules] == ["student", "teacher"]
    assert provider.admin_groups == []
    page = browser.get(url).content.decode()
    assert "eduPersonAffiliation contains student" in page and 'id="try-rules"' in page
    try_url = reverse("admin:licensing_identityprovider_try", args=[provider.pk])
    answer = browser.post(
        try_url, {"attributes": '{"eduPersonAffiliation": ["member", "student"]}'}
    )
    assert answer.status_code == 200
    assert answer.json() == {
        "outcome": "matched",
        "rule": 1,
        "role": "student",
        "license": f"{alpha.license.name} ({alpha.license.license_type.name})",
        "courses": [],
    }
    assert (
        browser.post(try_url, {"attributes": '{"eduPersonAffiliation": "staff"}'}).json()["outcome"]
        == "none"
    )
    for hostile in ('{"eduPersonAffiliation": "\\u0000"}', '{"eduPersonAffiliation": [{}]}'):
        answer = browser.post(try_url, {"attributes": hostile})
        assert answer.status_code == 200 and answer.json()["outcome"] == "refused"
    for bad in ("[1]", "{", '{"a": NaN}', '{"a": 1e400}'):
        assert browser.post(try_url, {"attributes": bad}).json()["outcome"] == "invalid"


def test_other_institutions_license_and_bad_rules_are_form_errors(browser, world, root):
    alpha = world[0]
    url = reverse("admin:licensing_identityprovider_change", args=[alpha.provider.pk])
    foreign = license_create(name="Elsewhere", institution="Gamma")
    bad = browser.post(url, _data(alpha, [{"when": [], "role": "student", "license": foreign.pk}]))
    assert bad.status_code == 200 and "No license of this institution" in bad.content.decode()
    bad = browser.post(url, _data(alpha, [{"when": [], "role": "root"}]))
    assert bad.status_code == 200 and "role is admin, reviewer" in bad.content.decode()
    alpha.provider.refresh_from_db()
    assert alpha.provider.admin_groups == ["alpha-admins"]  # nothing saved


def test_groups_set_make_the_rules(browser, world, root):
    alpha = world[0]
    url = reverse("admin:licensing_identityprovider_change", args=[alpha.provider.pk])
    response = browser.post(url, _data(alpha, [], admin='["heads"]'))
    assert response.status_code == 302
    provider = IdentityProvider.objects.get(pk=alpha.provider.pk)
    assert provider.access_rules == [
        {"when": [{"attribute": "groups", "any_of": ["heads"]}], "role": "admin", "license": None,
         "courses": []}
    ]  # fmt: skip
