"""The management API's docs page in a real browser (Debian's chromium driven by Playwright), on
the server started the way the README starts it: an institution admin makes their token on "My
API token", follows its link to /manage/v1/docs (Swagger UI from the site's own static files),
and in a browser that is not signed in authorizes with the token (`Bearer`) and tries
`GET /manage/v1/licenses`: their institution's license, and no other. Screenshots land in
var/screenshots/manage-docs-*.png (git-ignored)."""

from __future__ import annotations

from tests.browser import BROWSER_TEST, SHOTS, login

pytestmark = BROWSER_TEST

SCHOOL = "Docs school"
ADMIN = ("dora", "an-admin-password-2")


def test_the_docs_page_from_my_api_token(server, page):
    server.manage_many(
        ("create_license", "docs-class", "--institution", SCHOOL),
        ("create_license", "docs-elsewhere", "--institution", "Docs elsewhere"),
        (
            ("create_institution_admin", SCHOOL, ADMIN[0], "--role", "admin", "--noinput"),
            {"DJANGO_SUPERUSER_PASSWORD": ADMIN[1]},
        ),
    )
    login(page, server, *ADMIN)
    page.goto(server.url + "/admin/my-token/")
    page.click("#rotate-token")
    token = page.inner_text("#new-token").strip()
    assert len(token) == 40
    assert "Authorization: Bearer" in page.inner_text("#content-main")
    page.click("#manage-docs-link")
    page.wait_for_selector(".swagger-ui .opblock")
    assert page.url == server.url + "/manage/v1/docs"
    listed = page.inner_text(".swagger-ui")
    for path in ("/manage/v1/licenses", "/manage/v1/usage", "/manage/v1/courses"):
        assert path in listed
    assert "Authorization: Bearer <token>" in page.inner_text(".swagger-ui .info")
    page.screenshot(path=str(SHOTS / "manage-docs-01-page.png"))  # the top: what and how

    # Signed out, the token alone: "Authorize", then try the licenses.
    other = page.context.browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    other.set_default_timeout(20_000)
    other.goto(server.url + "/manage/v1/docs#/licenses/licenses_list")
    other.wait_for_selector(".swagger-ui .opblock")
    other.click(".swagger-ui .auth-wrapper .authorize")
    scheme = other.locator(".swagger-ui .modal-ux .auth-container", has_text="managementToken")
    scheme.locator("input").fill(token)
    scheme.locator(".auth-btn-wrapper .authorize").click()
    scheme.locator(".auth-btn-wrapper .btn-done").click()
    operation = other.locator("#operations-licenses-licenses_list")
    if not operation.locator(".try-out").is_visible():
        operation.locator(".opblock-summary").click()
    operation.locator(".try-out__btn").click()
    licenses = server.url + "/manage/v1/licenses"
    with other.expect_response(lambda r: r.url.startswith(licenses)) as sent:
        operation.locator(".execute").click()
    answer = sent.value
    assert answer.status == 200
    assert answer.request.headers["authorization"] == f"Bearer {token}"
    names = [row["name"] for row in answer.json()["results"]]
    assert names == ["docs-class"]  # the institution's own, not the other school's
    operation.locator(".live-responses-table").wait_for()
    assert "docs-class" in operation.locator(".live-responses-table").inner_text()
    operation.screenshot(path=str(SHOTS / "manage-docs-02-tried.png"))
    other.close()
