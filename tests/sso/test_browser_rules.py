"""The access rules' admin in Chromium: a superuser opens the identity provider's page, reads
the rules' table, pastes attributes into "Try these attributes" and sees the rule that matches,
then a hostile value refused; axe finds nothing on the page."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from licensing.access.services import license_create
from licensing.signin.sso import identity_provider_configure
from tests.browser import BROWSER_TEST, assert_accessible, browser_page, shot
from tests.live_helpers import session_cookie

pytestmark = BROWSER_TEST


@pytest.mark.django_db(transaction=True)
def test_try_these_attributes_in_the_browser(gateway, public_dns):
    pupils = license_create(name="Pupils", institution="Rules School", strategy="per_user")
    provider = identity_provider_configure(
        institution=pupils.institution,
        issuer="https://idp.rules.example",
        client_id="gw",
        client_secret="s",
        access_rules=[
            {
                "when": [{"attribute": "eduPersonAffiliation", "contains": "student"}],
                "role": "student",
                "license": pupils.pk,
            },
            {"when": [{"attribute": "groups", "any_of": ["heads"]}], "role": "admin"},
        ],
    )
    root = get_user_model().objects.create_superuser("root", password="pw")
    name, value = session_cookie(root).split("=", 1)
    with browser_page(1280, 900) as page:
        page.context.add_cookies([{"name": name, "value": value, "url": gateway.url}])
        page.goto(f"{gateway.url}/admin/licensing/identityprovider/{provider.pk}/change/")
        assert "eduPersonAffiliation contains student" in page.inner_text(".field-rules_table")
        page.fill("#try-attributes", '{"eduPersonAffiliation": ["member", "student"]}')
        page.click("#try-rules-submit")
        page.wait_for_selector("#try-rules-result p")
        assert page.inner_text("#try-rules-result") == (
            "Rule 1 matches: role student, license Pupils (Open access), courses -."
        )
        shot(page, "rules-01-try-matched")
        page.fill("#try-attributes", '{"groups": ["heads", {"x": 1}]}')
        page.click("#try-rules-submit")
        page.wait_for_function(
            "document.querySelector('#try-rules-result').innerText.includes('nested')"
        )
        assert_accessible(page, "identity provider with access rules")
