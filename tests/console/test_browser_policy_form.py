"""The policy form in a real browser (Debian's chromium, the README's `scripts/run.sh` server):
a person turns a service off, ticks a model, sets max tokens, saves, finds the rules in the JSON
view (with a rule only the JSON view shows kept), and the "try a request" panel answers by the
new rules. Screenshots in var/screenshots/ (policy-form-*.png)."""

from __future__ import annotations

import json

from tests.browser import BROWSER_TEST, SHOTS, login, pick, shot

pytestmark = BROWSER_TEST


def _try(page, service: str, body: str) -> str:
    page.select_option("#try-service", service)
    page.fill("#try-body", body)
    page.evaluate("document.getElementById('try-result').textContent = ''")
    page.click("#try-submit")
    page.wait_for_selector("#try-result p")
    return page.inner_text("#try-result")


def test_a_person_edits_a_license_type_through_the_policy_form(server, page):
    password = server.printed(r"Admin user created: admin / (\S+)")
    login(page, server, "admin", password)

    # A new license type starts open; a rule only the JSON view can write goes in there.
    page.goto(server.url + "/admin/licensing/licensetype/add/")
    page.fill("#id_name", "Form school")
    pick(page, "id_institution", "Demo school")
    page.click("summary:has-text('Policy as JSON')")
    document = json.loads(page.input_value("#id_policy"))
    document["services"]["chat_completions"] = {"params": {"user": {"patterns": ["s[0-9]+"]}}}
    page.fill("#id_policy", json.dumps(document))
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    form = "#policy-form"
    chat = f"{form} [data-service=chat_completions]"
    # Everything the document enables is ticked; no model is ticked (every model).
    assert page.is_checked("input[name='policyform-image_generation__enabled']")
    assert not page.is_checked(f"{chat} input[value='gpt-4o-mini']")
    page.uncheck("input[name='policyform-image_generation__enabled']")
    page.check(f"{chat} input[name='policyform-chat_completions__models'][value='gpt-4o-mini']")
    page.fill("input[name='policyform-chat_completions__max_tokens__max']", "300")
    page.fill("input[name='policyform-chat_completions__temperature__max']", "0.7")
    page.evaluate("document.getElementById('policy-form').scrollIntoView()")
    # The viewport only (the docs' picture: docs/admin-guide.md), then the whole page.
    page.screenshot(path=str(SHOTS / "policy-form-0-viewport.png"))
    shot(page, "policy-form-1-edited")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    # The form shows what was saved, and so does the JSON view.
    assert not page.is_checked("input[name='policyform-image_generation__enabled']")
    assert page.is_checked(f"{chat} input[value='gpt-4o-mini']")
    assert page.input_value("input[name='policyform-chat_completions__max_tokens__max']") == "300"
    page.click("summary:has-text('Policy as JSON')")
    saved = json.loads(page.input_value("#id_policy"))
    assert "image_generation" not in saved["services"]
    assert saved["services"]["chat_completions"] == {
        "params": {
            "user": {"patterns": ["s[0-9]+"]},
            "model": {"allowed": ["gpt-4o-mini"]},
            "max_tokens": {"max": 300},
            "temperature": {"max": 0.7},
        }
    }
    page.locator("#id_policy").scroll_into_view_if_needed()
    shot(page, "policy-form-2-json-view")

    # The "try a request" panel answers by the new rules.
    chat_body = '"messages": [{"role": "user", "content": "hi"}]'
    result = _try(page, "chat_completions", '{"model": "gpt-4o", ' + chat_body + "}")
    assert "Denied" in result and "'model' must be one of: [gpt-4o-mini]" in result
    result = _try(
        page,
        "chat_completions",
        '{"model": "gpt-4o-mini", "max_tokens": 301, ' + chat_body + "}",
    )
    assert "'max_tokens' must be <= 300" in result
    result = _try(page, "image_generation", '{"model": "gpt-image-1", "prompt": "a cat"}')
    assert "service 'image_generation' is not enabled for this license" in result
    result = _try(
        page,
        "chat_completions",
        '{"model": "gpt-4o-mini", "max_tokens": 300, "user": "s42", ' + chat_body + "}",
    )
    assert "Allowed" in result, result
    page.locator("#try-request").scroll_into_view_if_needed()
    shot(page, "policy-form-3-try-allowed")
