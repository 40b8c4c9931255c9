"""The policy form in a real browser (Debian's chromium, the README's `scripts/run.sh` server):
a person sets the models of chat and responses at once, turns a service off, sets max tokens,
saves, finds the rules in the JSON view (with a rule only the JSON view shows kept), and the "try
a request" panel answers by the new rules; a chat-only model list is stopped with the warning
until confirmed; services are named in words, the models no connection serves are folded; the
policy help is a rendered page; an institution's time zone is set on its page. Screenshots in
var/screenshots/ (policy-form-*.png, institution-time-zone.png)."""

from __future__ import annotations

import json

from tests.browser import BROWSER_TEST, SHOTS, login, pick, shot

pytestmark = BROWSER_TEST

P = "policyform-"


def _try(page, service: str, body: str) -> str:
    page.select_option("#try-service", service)
    page.fill("#try-body", body)
    page.evaluate("document.getElementById('try-result').textContent = ''")
    page.click("#try-submit")
    page.wait_for_selector("#try-result p")
    return page.inner_text("#try-result")


def _json_view(page) -> dict:
    page.click("summary:has-text('Policy as JSON')")
    return json.loads(page.input_value("#id_policy"))


def test_a_person_edits_a_license_type_through_the_policy_form(server, page):
    password = server.printed(r"Admin user created: admin / (\S+)")
    login(page, server, "admin", password)

    # A new license type starts open; a rule only the JSON view can write goes in there.
    page.goto(server.url + "/admin/licensing/licensetype/add/")
    page.fill("#id_name", "Form school")
    pick(page, "id_institution", "Demo school")
    document = _json_view(page)
    document["services"]["chat_completions"] = {"params": {"user": {"patterns": ["s[0-9]+"]}}}
    page.fill("#id_policy", json.dumps(document))
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    form = "#policy-form"
    chat = f"{form} [data-service=chat_completions]"
    # Services in words, not code names.
    assert "Chat (chat completions)" in page.inner_text(chat)
    assert "Embeddings in Gemini's format" in page.inner_text(
        f"{form} [data-service=gemini_embeddings]"
    )
    assert "gemini_embeddings" not in page.inner_text(form)
    # What a connection serves comes first; the rest (Claude: no connection) is folded.
    models = f"{form} [data-scope=models]"
    assert page.is_visible(f"{models} input[value='gpt-4o-mini']")
    claude = f"{models} input[name='{P}models__text'][value='claude-haiku-4-5']"
    assert not page.is_visible(claude)
    page.click(f"{models} .field-models__text summary")
    assert page.is_visible(claude)
    assert "claude-haiku-4-5 (no connection)" in page.inner_text(f"{models} .field-models__text")
    assert "aggregator: OpenRouter (OpenAI-compatible) (not connected)" in page.inner_text(chat)

    # One list for both text services; image generation off; limits.
    assert page.is_checked(f"input[name='{P}image_generation__enabled']")
    page.check(f"{models} input[name='{P}models__text'][value='gpt-4o-mini']")
    page.uncheck(f"input[name='{P}image_generation__enabled']")
    page.fill(f"input[name='{P}chat_completions__max_tokens__max']", "300")
    page.fill(f"input[name='{P}chat_completions__temperature__max']", "0.7")
    page.evaluate("document.getElementById('policy-form').scrollIntoView()")
    # The viewport only (the docs' picture: docs/admin-guide.md), then the whole page.
    page.screenshot(path=str(SHOTS / "policy-form-0-viewport.png"))
    shot(page, "policy-form-1-edited")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    # The form shows what was saved, and so does the JSON view.
    assert not page.is_checked(f"input[name='{P}image_generation__enabled']")
    assert page.is_checked(f"{models} input[name='{P}models__text'][value='gpt-4o-mini']")
    assert page.input_value(f"input[name='{P}chat_completions__max_tokens__max']") == "300"
    saved = _json_view(page)
    assert saved["models"] == {"text": {"allowed": ["gpt-4o-mini"]}}
    assert "image_generation" not in saved["services"]
    assert saved["services"]["chat_completions"] == {
        "params": {
            "user": {"patterns": ["s[0-9]+"]},
            "max_tokens": {"max": 300},
            "temperature": {"max": 0.7},
        }
    }
    page.locator("#id_policy").scroll_into_view_if_needed()
    shot(page, "policy-form-2-json-view")

    # The "try a request" panel answers by the new rules, through chat and responses alike.
    chat_body = '"messages": [{"role": "user", "content": "hi"}]'
    result = _try(page, "chat_completions", '{"model": "gpt-4.1", ' + chat_body + "}")
    assert "Denied" in result and "'model' must be one of: [gpt-4o-mini]" in result
    result = _try(page, "responses", '{"model": "gpt-4.1", "input": "hi"}')
    assert "Denied" in result and "'model' must be one of: [gpt-4o-mini]" in result
    assert "Responses (chat with tools" in page.inner_text("#try-service")
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

    # Issue 37's report: a model list for chat only is stopped before saving, with the fix.
    page.uncheck(f"{models} input[name='{P}models__text'][value='gpt-4o-mini']")
    page.check(f"{chat} input[name='{P}chat_completions__models'][value='gpt-4o-mini']")
    page.click("input[name=_continue]")
    page.wait_for_selector(".policy-split .errorlist")
    warning = page.inner_text(".policy-split")
    assert "Chat and responses allow different models" in warning
    assert "chat: gpt-4o-mini; responses: every model" in warning
    page.locator(".policy-split").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "policy-form-4-split-warning.png"))
    assert _json_view(page)  # the page kept the edits; nothing saved yet
    page.check(f"input[name='{P}confirm_split']")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    # Saved as confirmed, and still noted on the page.
    assert "Chat and responses allow different models" in page.inner_text(".policy-split")
    assert "models" not in _json_view(page)

    # The policy help is a page of the admin, rendered.
    page.goto(server.url + "/admin/licensing/licensetype/policy-docs/")
    assert page.inner_text("#policy-docs h1") == "Policy documents"
    assert page.is_visible("#policy-docs table")
    assert "Models for several services" in page.inner_text("#policy-docs")
    assert "reserved" not in page.inner_text("#policy-docs")
    page.click("#policy-docs a[href='#models-for-several-services']")
    shot(page, "policy-form-5-help")


def test_an_admin_sets_the_institutions_time_zone(server, page):
    password = server.printed(r"Admin user created: admin / (\S+)")
    login(page, server, "admin", password)
    page.goto(server.url + "/admin/licensing/institution/add/")
    page.fill("#id_name", "Zone school")
    # A name the host does not know is refused on the field.
    page.fill("#id_timezone", "Europe/Atlantis")
    page.click("input[name=_continue]")
    page.wait_for_selector(".field-timezone .errorlist")
    # The field offers the zones as one types (a datalist), Berlin among the first.
    options = page.eval_on_selector_all(
        "#id_timezone-choices option", "options => options.map(o => o.value)"
    )
    assert options[:3] == ["UTC", "Europe/Amsterdam", "Europe/Berlin"] and len(options) > 300
    page.fill("#id_timezone", "Europe/Berlin")
    page.select_option("#id_language", index=0)
    page.locator("#id_timezone").scroll_into_view_if_needed()
    shot(page, "institution-time-zone")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")
    assert page.input_value("#id_timezone") == "Europe/Berlin"
