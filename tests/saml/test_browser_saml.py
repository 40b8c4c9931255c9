"""SAML sign-in in a real browser (Debian's chromium driven by Playwright): the server started
as the README starts it (`bash scripts/run.sh`), pysaml2's IdP on 127.0.0.1
(fake_upstreams/saml_idp.py), its institution configured with `manage.py configure_saml`.
An admin signs in from the admin's login page; a forged (unsigned) answer shows the refusal
page and opens no session. Screenshots in var/screenshots/saml-*.png."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest

from fake_upstreams.saml_idp import SamlIdpFake
from fake_upstreams.server import FakeServer
from tests import browser as browser_helpers
from tests.browser import (
    BROWSER_TEST,
    assert_accessible,
    browser_page,
    running_server,
    shot,
    tab_to,
)
from tests.ports import run_script_ports

pytestmark = BROWSER_TEST


@pytest.fixture(scope="module")
def idp():
    server = FakeServer(SamlIdpFake())
    server.start()
    yield server.app
    server.stop()


@pytest.fixture(scope="module")
def server(idp):
    ports = run_script_ports()
    env = {
        "GATEWAY_OUTBOUND_ALLOW": "127.0.0.1/32",
        "GATEWAY_OUTBOUND_ALLOWED_PORTS": f"443,{urlsplit(idp.origin).port}",
        "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{ports['PORT']}",
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(browser_helpers, "run_script_ports", lambda: ports)
        for name, value in env.items():
            patch.setenv(name, value)
        with running_server() as run:
            _, out = run.manage_many(
                ("create_license", "Demo students", "--institution", "Demo school",
                 "--limit", "2000000", "--period", "monthly", "--strategy", "per_user"),
                ("configure_saml", "Demo school", "--metadata-url", idp.entity_id,
                 "--admin-group", "gateway-admins", "--student-group", "student",
                 "--student-license", "Demo students"),
            )  # fmt: skip
            metadata_url = f"{env['GATEWAY_PUBLIC_URL']}/sso/1/saml/metadata/"
            assert metadata_url in out
            idp.trust_sp(httpx.get(metadata_url, timeout=10).text)
            yield run


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as page:
        yield page


def test_admin_signs_in_with_saml(server, idp, page):
    page.context.clear_cookies()
    page.goto(server.url + "/admin/login/")
    button = page.locator("a.sso-button", has_text="Sign in with Demo school")
    assert button.count() == 1
    idp.sign_in_next(
        "ada",
        eduPersonPrincipalName="ada@demo.example.edu",
        mail="ada@demo.example.edu",
        memberOf=["gateway-admins"],
    )
    button.click()
    page.wait_for_url(server.url + "/admin/")
    page.wait_for_selector("#content-main")
    assert "ada@demo.example.edu" in page.inner_text("#user-tools").lower()
    shot(page, "saml-01-admin-signed-in")


def test_an_unsigned_answer_is_refused(server, idp, page):
    page.context.clear_cookies()
    idp.tamper = "unsigned"
    try:
        idp.sign_in_next(
            "eve", eduPersonPrincipalName="eve@demo.example.edu", memberOf=["gateway-admins"]
        )
        page.goto(server.url + "/admin/login/")
        with page.expect_response(lambda r: "/saml/acs/" in r.url and r.status != 200) as answer:
            page.click("a.sso-button")
        assert answer.value.status == 403
        page.wait_for_selector(".sso-refused")
        assert "saml_signature" in page.inner_text("#content")
        shot(page, "saml-02-refused")
        assert_accessible(page, "a refused SAML sign-in")
        page.goto(server.url + "/admin/")
        assert "/admin/login/" in page.url
    finally:
        idp.tamper = None


@pytest.fixture
def other_idp():
    server = FakeServer(SamlIdpFake())
    server.start()
    yield server.app
    server.stop()


def test_a_superuser_adds_a_saml_provider_in_the_admin(server, other_idp, page):
    """The admin's SAML form, as a superuser uses it: the protocol chosen by keyboard, a refusal
    shown on its field, the provider saved from pasted metadata, and what to give the IdP on its
    page; each page passes axe."""
    server.manage("create_license", "Other students", "--institution", "Other school",
                  "--limit", "1000", "--period", "monthly", "--strategy", "per_user")  # fmt: skip
    page.context.clear_cookies()
    browser_helpers.login(page, server, "admin", server.admin_password())
    page.goto(server.url + "/admin/licensing/identityprovider/add/")
    assert page.locator("#id_client_id").count() == 1  # OpenID Connect first
    page.focus("#protocol-choice input[value=saml]")
    page.keyboard.press("Space")
    tab_to(page, "#protocol-choice button")
    page.keyboard.press("Enter")
    page.wait_for_url("**/identityprovider/add/?protocol=saml")
    assert page.locator("#id_client_id").count() == 0
    assert_accessible(page, "the SAML add page")

    browser_helpers.pick(page, "id_institution", "Other school")
    browser_helpers.pick(page, "id_student_license", "Other students")
    page.fill("#id_saml_metadata_url", "http://169.254.169.254/metadata")
    page.fill("#id_student_groups", '["student"]')
    page.click("input[name=_save]")
    error = page.locator(".field-saml_metadata_url .errorlist")
    assert "refused" in error.inner_text()
    shot(page, "saml-03-admin-refused-url")
    assert_accessible(page, "the SAML add page with a refused metadata URL")

    page.fill("#id_saml_metadata_url", "")
    page.fill("#id_saml_metadata_xml", httpx.get(other_idp.entity_id, timeout=10).text)
    page.click("input[name=_continue]")
    page.wait_for_selector(".field-saml_sp_metadata_url")
    sp_metadata = page.inner_text(".field-saml_sp_metadata_url .readonly")
    assert sp_metadata.startswith(server.url + "/sso/") and sp_metadata.endswith("/metadata/")
    assert "/saml/acs/" in page.inner_text(".field-saml_acs_url .readonly")
    assert "PRIVATE KEY" not in page.content()
    assert httpx.get(sp_metadata, timeout=10).status_code == 200
    shot(page, "saml-04-admin-saved")
    assert_accessible(page, "a saved SAML provider's page")
