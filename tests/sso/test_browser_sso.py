"""Single sign-on in a real browser (Debian's chromium driven by Playwright): the server
started as the README starts it (`bash scripts/run.sh`), a fake OpenID Connect provider on
127.0.0.1 (fake_upstreams/oidc.py), its institution configured with `manage.py configure_sso`.
An admin signs in and lands on the admin with the institution's pages; a reviewer signs in; a
person with no mapped group sees the 403 page; a student signs in from the portal's button and
makes a key that the openai SDK uses. Screenshots in var/screenshots/sso-*.png."""

from __future__ import annotations

from urllib.parse import urlsplit

import openai
import pytest

from fake_upstreams.oidc import OidcFake
from fake_upstreams.server import FakeServer
from tests import browser as browser_helpers
from tests.browser import BROWSER_TEST, assert_accessible, browser_page, running_server, shot
from tests.ports import run_script_ports

pytestmark = BROWSER_TEST


@pytest.fixture(scope="module")
def idp():
    server = FakeServer(OidcFake(client_id="gw-demo", client_secret="demo-secret"))
    server.start()
    yield server.app
    server.stop()


@pytest.fixture(scope="module")
def server(idp):
    ports = run_script_ports()
    idp_port = urlsplit(idp.origin).port
    env = {
        "GATEWAY_OUTBOUND_ALLOW": "127.0.0.1/32",
        "GATEWAY_OUTBOUND_ALLOWED_PORTS": f"443,{idp_port}",
        "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{ports['PORT']}",
        "DEMO_OIDC_SECRET": "demo-secret",
    }
    with pytest.MonkeyPatch.context() as patch:
        # run.sh on the ports the redirect URI names; the IdP reachable through the guard.
        patch.setattr(browser_helpers, "run_script_ports", lambda: ports)
        for name, value in env.items():
            patch.setenv(name, value)
        with running_server() as run:
            _, out = run.manage_many(  # one process, not one per command
                ("create_license", "Demo students", "--institution", "Demo school",
                 "--limit", "2000000", "--period", "monthly", "--strategy", "per_user"),
                ("configure_sso", "Demo school", "--issuer", idp.issuer,
                 "--client-id", "gw-demo", "--client-secret-env", "DEMO_OIDC_SECRET",
                 "--admin-group", "gateway-admins", "--reviewer-group", "gateway-reviewers",
                 "--student-group", "pupils", "--student-license", "Demo students",
                 "--email-domain", "demo.example.edu"),
            )  # fmt: skip
            assert f"{env['GATEWAY_PUBLIC_URL']}/sso/1/callback/" in out
            yield run


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as page:
        yield page


def _fresh(page):
    page.context.clear_cookies()


def test_admin_signs_in_with_the_institutions_idp(server, idp, page):
    _fresh(page)
    page.goto(server.url + "/admin/login/")
    button = page.locator("a.sso-button", has_text="Sign in with Demo school")
    assert button.count() == 1
    assert page.locator("#id_password").count() == 1  # the local form stays
    shot(page, "sso-01-admin-login-page")
    idp.sign_in_next("ada-sub", email="ada@demo.example.edu", groups=["gateway-admins", "staff"])
    button.click()
    page.wait_for_url(server.url + "/admin/")
    page.wait_for_selector("#content-main")
    text = page.inner_text("#content-main")
    assert "Licenses" in text and "API keys" in text
    assert "ada@demo.example.edu" in page.inner_text("#user-tools").lower()
    shot(page, "sso-02-admin-signed-in")
    page.goto(server.url + "/admin/licensing/license/")
    assert "demo" in page.inner_text("#result_list")
    shot(page, "sso-03-admin-institution-licenses")


def test_reviewer_signs_in(server, idp, page):
    _fresh(page)
    idp.sign_in_next("rex-sub", email="rex@demo.example.edu", groups=["gateway-reviewers"])
    page.goto(server.url + "/admin/login/")
    page.click("a.sso-button")
    page.wait_for_url(server.url + "/admin/")
    page.wait_for_selector("#content-main")
    assert "rex@demo.example.edu" in page.inner_text("#user-tools").lower()
    # A reviewer reads licenses, and has no add button.
    page.goto(server.url + "/admin/licensing/license/")
    assert "demo" in page.inner_text("#result_list")
    assert page.locator("a.addlink").count() == 0
    shot(page, "sso-04-reviewer-signed-in")


def test_a_refused_user_sees_why_and_whom_to_ask(server, idp, page):
    _fresh(page)
    idp.sign_in_next("nora-sub", email="nora@demo.example.edu", groups=["students-2027"])
    page.goto(server.url + "/admin/login/")
    with page.expect_response(lambda r: "/callback/" in r.url) as answer:
        page.click("a.sso-button")
    assert answer.value.status == 403
    page.wait_for_selector(".sso-refused")
    text = page.inner_text("#content")
    assert "Sign-in refused" in text
    assert "None of your groups" in text
    # Whom to ask: the institution's admins (ada signed in as one above).
    assert "ada@demo.example.edu" in text
    # Styled like the admin: its header is there.
    assert page.eval_on_selector("#header", "e => getComputedStyle(e).display") == "flex"
    shot(page, "sso-05-refused")
    assert_accessible(page, "a refused sign-in: no group")
    # No session: the admin still asks to sign in.
    page.goto(server.url + "/admin/")
    assert "/admin/login/" in page.url


def test_a_student_signs_in_from_the_portal_and_uses_a_key(server, idp, page):
    _fresh(page)
    idp.sign_in_next("pia-sub", email="pia@demo.example.edu", groups=["pupils"])
    page.goto(server.url + "/portal/")
    page.click("a.button:has-text('Sign in with Demo school')")
    page.wait_for_selector("#wallet")
    assert page.url == server.url + "/portal/"
    assert "Demo students" in page.inner_text("h1")
    shot(page, "sso-06-student-portal")
    page.goto(server.url + "/portal/keys/")
    if page.locator("#key-form").count() == 0:  # terms of use first, when the school has any
        page.goto(server.url + "/portal/terms/")
        page.check("input[name=accept]")
        page.click("input[type=submit][value=Accept]")
    page.wait_for_selector("#key-form")
    page.fill("#id_name", "laptop")
    page.click("#key-form input[type=submit]")
    page.wait_for_selector("#new-key")
    key = page.inner_text("#new-key-value").strip()
    shot(page, "sso-07-student-key")
    sdk = openai.OpenAI(api_key=key, base_url=server.url + "/v1", max_retries=0, timeout=30)
    answer = sdk.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello after SSO"}]
    )
    assert answer.choices[0].message.content
