"""The student portal in a real browser (Debian's chromium driven by Playwright), on a server
started the way the README starts it (`bash scripts/run.sh`, a database of its own).

The student is signed in by writing a Django session for them into run.sh's database (what the
SSO callback will leave behind; the production code has no other way in): then they accept the
terms, create a key and see it once, use it with the openai SDK, see their usage, read the
data-flow notice and revoke the key. Screenshots land in var/screenshots/ (git-ignored); the
ones in docs/ are copies of them."""

from __future__ import annotations

import re

import openai

from tests.browser import BROWSER_TEST, shot

pytestmark = BROWSER_TEST

KEY_RE = re.compile(r"sk-svc-[A-Za-z0-9_-]{43}")
SIGN_IN = "a.button:has-text('Sign in with Demo school')"

# Run with `manage.py shell -c` on run.sh's database: a student license of the demo school with
# terms of use and a display currency, an identity provider offering it, a student (a user with
# an end user, as the SSO sign-in makes them) and a session for them. Prints the session key.
STUDENT_SETUP = """
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from licensing.access.services import license_create
from licensing.models import EndUser, IdentityProvider, Institution

lic = license_create(name="Year 12 students", institution="Demo school", limit=2_000_000,
                     period="monthly", strategy="per_user")
school = Institution.objects.get(name="Demo school")
school.terms_of_use = ("Use the gateway for your school work only.\\n"
                       "Do not paste personal data of other people.\\n"
                       "Your usage (not your prompts) is recorded and visible to the school.")
school.currency = "EUR"
school.micro_credits_per_currency_unit = 1_100_000
school.portal_key_limit = 3
school.save()
IdentityProvider.objects.create(institution=school, issuer="https://login.demo-school.example",
                                client_id="gateway", student_license=lic)
user = get_user_model().objects.create_user("ada", email="ada@demo-school.example",
                                            first_name="Ada", last_name="Lovelace")
EndUser.objects.create(license=lic, user=user, subject="ada-sub")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "licensing.signin.backends.GatewayModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print("SESSION", session.session_key)
"""


def test_the_student_portal_in_a_browser(server, page):
    printed = server.manage("shell", "-c", STUDENT_SETUP)
    session_key = re.search(r"SESSION (\S+)", printed).group(1)

    # Signed out: the login page offers the school's sign-in (the SSO flow's start).
    page.goto(server.url + "/portal/")
    page.wait_for_selector(SIGN_IN)
    assert page.url.startswith(server.url + "/portal/login/")
    href = page.get_attribute(SIGN_IN, "href")
    assert re.fullmatch(r"/sso/\d+/login/\?next=%2Fportal%2F", href), href
    shot(page, "portal-01-login")

    page.context.add_cookies([{"name": "sessionid", "value": session_key, "url": server.url}])

    # The overview: the license, an untouched wallet, the terms still to accept.
    page.goto(server.url + "/portal/")
    page.wait_for_selector("#wallet")
    assert "Year 12 students" in page.inner_text("h1")
    wallet = page.inner_text("#wallet")
    assert "1.82 EUR" in wallet and "2,000,000 of 2,000,000 micro-credits left" in wallet
    assert "accept the terms of use" in page.inner_text("#content")
    # Styled like the admin: its stylesheet loaded.
    assert page.eval_on_selector("#header", "e => getComputedStyle(e).display") == "flex"

    # No key before the terms; accept them.
    page.goto(server.url + "/portal/keys/")
    assert page.locator("#key-form").count() == 0
    page.click("text=accept the terms of use")
    page.wait_for_selector("#terms-text")
    assert "school work only" in page.inner_text("#terms-text")
    shot(page, "portal-02-terms")
    page.check("input[name=accept]")
    page.click("input[type=submit][value=Accept]")

    # A key, shown once with the base URL and the SDK example.
    page.wait_for_selector("#key-form")
    page.fill("#id_name", "laptop")
    page.click("#key-form input[type=submit]")
    page.wait_for_selector("#new-key")
    key = page.inner_text("#new-key-value").strip()
    assert KEY_RE.fullmatch(key)
    assert f'base_url="{server.url}/v1"' in page.inner_text("#sdk-example")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page.click("#copy-key")
    page.wait_for_selector("#copy-state:not(:empty)")
    shot(page, "portal-03-key-created")

    # The key works with the openai SDK against the README's server (its simulator behind).
    sdk = openai.OpenAI(api_key=key, base_url=server.url + "/v1", max_retries=0, timeout=30)
    answer = sdk.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello from the portal"}]
    )
    assert answer.choices[0].message.content

    page.goto(server.url + "/portal/keys/")
    page.wait_for_selector("#key-list")
    assert page.locator("#new-key").count() == 0 and key not in page.content()  # once only
    row = page.inner_text("#key-list tbody tr")
    assert "laptop" in row and "active" in row and key[:15] in row
    shot(page, "portal-04-keys")

    # The overview now shows the request, in credits and in money.
    page.goto(server.url + "/portal/")
    page.wait_for_selector("#usage-by-model")
    assert "gpt-4o-mini" in page.inner_text("#usage-by-model")
    assert "1 request" in page.inner_text("#last-30-days")
    assert "gpt-4o-mini" in page.inner_text("#models")
    shot(page, "portal-05-overview")

    # The data-flow notice.
    page.goto(server.url + "/portal/data/")
    page.wait_for_selector("#destinations")
    body = page.inner_text("#content")
    assert "Demo school" in body and "not store your prompts" in body
    assert "direct" in page.inner_text("#destinations")
    shot(page, "portal-06-data")

    # On a phone: the overview fits the width (nothing wider than the screen but the tables'
    # own scroll boxes).
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server.url + "/portal/")
    page.wait_for_selector("#wallet")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    shot(page, "portal-07-overview-phone")
    page.set_viewport_size({"width": 1440, "height": 900})

    # Revoke: confirmed in a dialog, then refused on /v1.
    page.goto(server.url + "/portal/keys/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#key-list input[value=Revoke]")
    page.wait_for_selector("#key-list td:has-text('revoked')")
    try:
        sdk.models.list()
    except openai.AuthenticationError:
        pass
    else:  # pragma: no cover - the assertion's message
        raise AssertionError("a revoked key was accepted")

    # Sign out: back to the login page, the portal closed.
    page.click("text=Sign out")
    page.wait_for_selector(SIGN_IN)
    page.goto(server.url + "/portal/keys/")
    assert page.url.startswith(server.url + "/portal/login/")
