"""The admin in a real browser (Debian's chromium driven by Playwright), on a server started
the way the README starts it (`bash scripts/run.sh`, with a database of its own): log in,
create a license and an API key through the forms (autocomplete widgets need their static
JavaScript), use the key, see spent/remaining, use the policy "try a request" panel, and check
that /v1/docs renders. Screenshots land in var/screenshots/ (git-ignored) for a person."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from tests.browser import BROWSER_TEST, ROOT, SHOTS, login, pick, shot

pytestmark = BROWSER_TEST

# This module's institution on the session's README server (tests/conftest.py, `server`): its
# colleague list holds this module's people only.
SCHOOL = "Browser school"


@pytest.fixture(scope="module", autouse=True)
def school(server):
    server.manage("create_license", "browser-seed", "--institution", SCHOOL)
    return SCHOOL


def test_the_admin_in_a_browser(server, page):
    password = server.printed(r"Admin user created: admin / (\S+)")
    static = httpx.get(server.url + "/static/admin/css/base.css")
    assert static.status_code == 200 and "text/css" in static.headers["content-type"]

    page.goto(server.url + "/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")
    # Styled: the stylesheet loaded (the header has the admin's dark background).
    assert page.eval_on_selector("#header", "e => getComputedStyle(e).display") == "flex"
    shot(page, "01-admin-index")

    # A license, through the form with its autocomplete widgets.
    page.goto(server.url + "/admin/licensing/license/add/")
    page.fill("#id_name", "browser-class")
    pick(page, "id_institution", SCHOOL)
    pick(page, "id_license_type", "Open access")
    page.fill("#id_budget_limit", "1.00")  # USD, the school's: 1,000,000 micro-credits
    page.select_option("#id_budget_period", "daily")
    page.fill("#id_alert_threshold_percent", "80")
    shot(page, "02-license-add")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    assert "browser-class" in page.inner_text(".messagelist")

    # An API key for it; the key is shown once in the success message.
    page.goto(server.url + "/admin/licensing/apikey/add/")
    pick(page, "id_license", "browser-class")
    page.fill("#id_name", "made in the browser")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    key = re.search(r"sk-svc-[A-Za-z0-9_-]{43}", page.inner_text(".messagelist")).group(0)
    shot(page, "03-api-key-created")

    for _ in range(2):
        answer = httpx.post(
            server.url + "/v1/embeddings",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "text-embedding-3-small", "input": "hello from the browser test"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    remaining = answer.json()["usage"]["credits_remaining"]
    spent = 1_000_000 - remaining

    # Spent and remaining on the license list and page; last use on the key list.
    page.goto(server.url + "/admin/licensing/license/?q=browser-class")
    row = page.inner_text("#result_list tbody tr")
    assert f"{spent:,}" in row and f"{remaining:,}" in row
    shot(page, "04-license-list-usage")
    page.click("#result_list tbody tr th a")
    page.wait_for_selector("#license_form")
    usage = page.inner_text("fieldset:has-text('Usage in the current window')")
    assert f"{spent:,}" in usage and f"{remaining:,}" in usage and "daily from" in usage
    shot(page, "05-license-page-usage")
    page.goto(server.url + "/admin/licensing/apikey/")
    assert "made in the browser" in page.inner_text("#result_list")
    assert "-" != page.inner_text("#result_list tbody tr td.field-last_used").strip()
    shot(page, "06-api-key-list-last-used")

    # A license type with a policy, then the "try a request" panel.
    page.goto(server.url + "/admin/licensing/licensetype/add/")
    page.fill("#id_name", "School chat")
    pick(page, "id_institution", SCHOOL)
    page.click("summary:has-text('Policy as JSON')")  # the JSON view is folded under the form
    page.fill(
        "#id_policy",
        '{"version": 1, "services": {"chat_completions": {"providers": ["direct"], '
        '"params": {"model": {"allowed": ["gpt-4o-mini"]}, "max_tokens": {"max": 500}}}}}',
    )
    page.click("input[name=_continue]")
    page.wait_for_selector("#try-request")
    page.select_option("#try-service", "chat_completions")
    page.fill(
        "#try-body",
        '{"model": "gpt-4o-mini", "max_completion_tokens": 900, '
        '"messages": [{"role": "user", "content": "hi"}]}',
    )
    page.click("#try-submit")
    page.wait_for_selector("#try-result pre")
    result = page.inner_text("#try-result")
    assert "Denied" in result and "'max_completion_tokens' must be <= 500" in result
    assert "services.chat_completions.params.max_tokens" in result
    page.locator("#try-request").scroll_into_view_if_needed()
    shot(page, "07-try-request-denied")
    page.fill(
        "#try-body", '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    )
    page.click("#try-submit")
    page.wait_for_selector("#try-result:has-text('Allowed')")
    assert "direct" in page.inner_text("#try-result")
    shot(page, "08-try-request-allowed")

    # The provider connections: weight, tags and each one's circuit (nothing has failed yet).
    page.goto(server.url + "/admin/catalog/connection/")
    page.wait_for_selector("#result_list")
    header = page.inner_text("#result_list thead").lower()
    for column in ("weight", "tags", "circuit", "last error", "cool-down until"):
        assert column in header, header
    assert "closed" in page.inner_text("#result_list tbody")
    shot(page, "085-connections")

    # /v1/docs renders (Swagger UI from the static files).
    page.goto(server.url + "/v1/docs")
    page.wait_for_selector(".swagger-ui .opblock")
    assert "/v1/embeddings" in page.inner_text(".swagger-ui")
    shot(page, "09-v1-docs")


def test_an_institution_admin_invites_a_colleague(server, page):
    """A superuser invites an institution admin, who sets a password through the invitation
    link, invites a reviewer, makes their own API token and reads the audit log."""
    password = server.printed(r"Admin user created: admin / (\S+)")
    browser = page.context.browser

    def fresh_page():
        new = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        new.set_default_timeout(20_000)
        return new

    def invitation(p) -> str:
        p.wait_for_selector(".messagelist .success")
        found = re.search(r"https?://\S+/admin/invitation/\S+/\S+/", p.inner_text(".messagelist"))
        assert found, p.inner_text(".messagelist")
        return found.group(0)

    root = fresh_page()
    login(root, server, "admin", password)
    root.goto(server.url + "/admin/licensing/colleague/add/")
    root.fill("#id_username", "principal")
    root.select_option("#id_role", "admin")
    root.select_option("#id_institution", label=SCHOOL)
    root.click("input[name=_save]")
    link = invitation(root)

    principal = fresh_page()
    principal.goto(link)
    principal.wait_for_selector("#id_new_password1")
    principal.fill("#id_new_password1", "Springfield-principal-2026")
    principal.fill("#id_new_password2", "Springfield-principal-2026")
    shot(principal, "10-invitation-set-password")
    principal.click("input[type=submit]")
    principal.wait_for_url("**/admin/invitation/done/")
    assert "Your password has been set" in principal.inner_text("#content")
    login(principal, server, "principal", "Springfield-principal-2026")
    assert "Colleagues" in principal.inner_text("#content-main")
    assert principal.locator("a[href='/admin/auth/user/']").count() == 0  # not theirs

    principal.goto(server.url + "/admin/licensing/colleague/add/")
    assert principal.locator("#id_institution").count() == 0  # always their own
    principal.fill("#id_username", "ms-reviewer")
    principal.fill("#id_email", "reviewer@demo-school.example")
    principal.select_option("#id_role", "reviewer")
    shot(principal, "11-colleague-add")
    principal.click("input[name=_save]")
    assert "/admin/invitation/" in invitation(principal)
    shot(principal, "12-colleague-invited")
    names = principal.locator("#result_list tbody th a").all_inner_texts()
    assert sorted(names) == ["ms-reviewer", "principal"]  # no superuser, no other school

    principal.click("#my-token-link")
    principal.click("#rotate-token")
    token = principal.inner_text("#new-token").strip()
    assert re.fullmatch(r"[0-9a-f]{40}", token)
    shot(principal, "13-my-api-token")

    principal.goto(server.url + "/admin/licensing/auditevent/")
    log = principal.inner_text("#result_list tbody")
    assert "User created" in log and "Management token created" in log
    shot(principal, "14-audit-log")
    api = httpx.get(
        server.url + "/manage/v1/audit",
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert api.status_code == 200, api.text
    actions = {row["action"] for row in api.json()["results"]}
    assert {"user_created", "token_created"} <= actions


def test_screenshots_are_ignored_by_git():
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(SHOTS / "x.png")], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, sys.stderr
