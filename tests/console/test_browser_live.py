"""The live feed in a real browser (Debian's chromium driven by Playwright), on a server started
the way the README starts it (`bash scripts/run.sh`: one gunicorn worker, the in-memory channel
layer): the superuser and a reviewer open the live page, API requests made with the official
openai SDK appear without a reload (a refused one marked with its reason, a model name that
looks like HTML shown as text), pause holds rows back, and every column fits at 1440 px.
Screenshots land in var/screenshots/."""

from __future__ import annotations

import json
import re
import time

import openai
import pytest

from tests.browser import BROWSER_TEST, SharedServer, browser_page, login, shot

pytestmark = BROWSER_TEST

LIVE = "/admin/licensing/transaction/live/"
REVIEWER, REVIEWER_PASSWORD = "lena", "reviewer-pw-1234"
DENYING_POLICY = {"version": 1, "services": {"image_generation": {}}}


@pytest.fixture(scope="module")
def server(readme_server, tmp_path_factory):
    """The session's README server; this module's reviewer, its licenses and their keys."""
    run = SharedServer(readme_server)
    policy = tmp_path_factory.mktemp("policy") / "images-only.json"
    policy.write_text(json.dumps(DENYING_POLICY))
    reviewer = ("create_institution_admin", "Demo school", REVIEWER, "--role", "reviewer")
    licenses = [
        ("create_license", name, "--institution", school, "--policy-file", str(policy))
        for name, school in (("images-only", "Demo school"), ("elsewhere", "Elsewhere school"))
    ]
    *_, images_only, elsewhere = run.manage_many(
        ((*reviewer, "--noinput"), {"DJANGO_SUPERUSER_PASSWORD": REVIEWER_PASSWORD}),
        *licenses,
        ("create_api_key", "images-only"),
        ("create_api_key", "elsewhere"),
    )
    run.keys = {
        "demo": run.printed(r"Demo API key[^:]*: (sk-svc-\S+)"),
        "images-only": images_only.strip(),
        "elsewhere": elsewhere.strip(),
    }
    return run


def embed(server, license: str, model: str = "text-embedding-3-small") -> str:
    """An embeddings request with the license's key through the official SDK; its request id."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.keys[license], max_retries=0)
    try:
        raw = client.embeddings.with_raw_response.create(
            model=model, input="hello from the live page", encoding_format="float"
        )
    except openai.APIStatusError as refused:
        return refused.response.headers["x-request-id"]
    return raw.headers["x-request-id"]


def open_live(page, server, username: str, password: str) -> None:
    login(page, server, username, password)
    page.goto(server.url + LIVE)
    page.wait_for_selector("#live-status.live-live")
    page.evaluate("window.notReloaded = true")


def row(page, request_id: str):
    found = page.locator(f'#live-rows tr[data-request-id="{request_id}"]')
    found.wait_for(timeout=10_000)
    return found


def assert_fits(page) -> None:
    """Every column on screen: nothing wider than the window."""
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    right = page.evaluate("document.querySelector('#live-table').getBoundingClientRect().right")
    assert right <= width


def test_the_superuser_watches_requests_arrive(server):
    with browser_page() as page:
        open_live(page, server, "admin", server.admin_password())
        assert page.inner_text("#live-status-text") == "Live"
        shot(page, "live-01-connected")

        served = embed(server, "demo")
        tr = row(page, served)
        text = tr.inner_text()
        assert "demo" in text and "embeddings" in text and "200" in text and "success" in text
        assert "key " in text and " tok" in text
        assert tr.get_attribute("class") == "live-row live-new live-success"

        refused = embed(server, "images-only")
        tr = row(page, refused)
        assert "live-denied" in tr.get_attribute("class")
        reason = tr.locator(".live-reason").inner_text()
        assert reason == "policy_denied service 'embeddings' is not enabled for this license"
        assert "403" in tr.inner_text() and "denied" in tr.inner_text()

        # Another institution's refusal: the superuser sees every institution.
        elsewhere = embed(server, "elsewhere")
        row(page, elsewhere)

        # A model name is the caller's text: shown as text, never run as HTML.
        hostile = '<img src=x onerror="window.pwned=1">'
        odd = embed(server, "demo", model=hostile)
        tr = row(page, odd)
        assert hostile in tr.inner_text()
        assert page.evaluate("window.pwned") is None
        assert tr.locator("img").count() == 0

        # A chat completion: a longer service name and the provider's answer id.
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.keys["demo"])
        chat = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
        tr = row(page, chat.headers["x-request-id"])
        assert "chat_completions" in tr.inner_text()
        assert tr.locator(".live-upstream").inner_text() == chat.parse().id

        # Newest first, without a reload.
        ids = page.eval_on_selector_all(
            "#live-rows tr", "rows => rows.map(r => r.dataset.requestId)"
        )
        assert ids[:5] == [chat.headers["x-request-id"], odd, elsewhere, refused, served]
        assert page.evaluate("window.notReloaded") is True
        shot(page, "live-02-rows-arrived")
        assert_fits(page)

        # Paused: rows wait, then come in on resume.
        page.click("#live-pause")
        waiting = embed(server, "demo")
        page.wait_for_selector("#live-waiting:has-text('1 new row waiting')")
        assert page.locator(f'#live-rows tr[data-request-id="{waiting}"]').count() == 0
        shot(page, "live-03-paused")
        page.click("#live-pause")
        row(page, waiting)
        assert page.is_hidden("#live-waiting")

        # The page started from the server's rows: after a reload they are all there.
        page.reload()
        page.wait_for_selector("#live-status.live-live")
        for request_id in (served, refused, elsewhere, waiting):
            assert page.locator(f'#live-rows tr[data-request-id="{request_id}"]').count() == 1


LOGOUT = """async () => {
  const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
  return (await fetch("/admin/logout/", {method: "POST", headers: {"X-CSRFToken": token}})).status;
}"""
LOGIN = """async (password) => {
  const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
  const body = new FormData();
  for (const [k, v] of [["username", "admin"], ["password", password],
                        ["csrfmiddlewaretoken", token], ["next", "/admin/"]]) body.append(k, v);
  return (await fetch("/admin/login/", {method: "POST", body})).url;
}"""


def test_the_page_reconnects_with_backoff(server):
    """The socket drops (as in a server restart) while the session has ended: each refused
    attempt waits longer; once logged in again the page is live again by itself. The page's
    back-off timers run on Playwright's clock, moved on as each wait is shown, so the test does
    not sit through the real waits (1 + 2 + 4 + 8 s)."""
    with browser_page() as page:
        page.clock.install()  # before the page loads, so that its timers are the fake's
        sockets = []

        def through(route):  # the real server behind; the test can cut the page's side
            sockets.append(route)
            route.connect_to_server()

        page.route_web_socket(re.compile(r".*/ws/admin/transactions/$"), through)
        open_live(page, server, "admin", server.admin_password())
        assert page.evaluate(LOGOUT) == 200
        sockets[-1].close(code=1012)
        delays = []
        deadline = time.monotonic() + 20
        while len(sockets) < 4 and time.monotonic() < deadline:
            found = re.fullmatch(r"Reconnecting in (\d+) s…", page.inner_text("#live-status-text"))
            if found and (not delays or delays[-1][0] != len(sockets)):
                delays.append((len(sockets), int(found.group(1))))
                if len(delays) == 2:
                    shot(page, "live-05-reconnecting")
                page.clock.fast_forward((int(found.group(1)) + 1) * 1000)  # its rounded wait
            time.sleep(0.05)
        seconds = [d for _, d in delays]
        assert len(seconds) >= 3 and seconds == sorted(seconds) and seconds[-1] >= 3, delays
        assert page.get_attribute("#live-status", "class") == "live-reconnecting"

        assert page.evaluate(LOGIN, server.admin_password()).endswith("/admin/")
        deadline = time.monotonic() + 20
        while not page.locator("#live-status.live-live").count() and time.monotonic() < deadline:
            page.clock.fast_forward(30_000)  # the next attempt now (the back-off's cap is 30 s)
            time.sleep(0.2)
        page.wait_for_selector("#live-status.live-live", timeout=20_000)
        row(page, embed(server, "demo"))
        assert page.evaluate("window.notReloaded") is True


def test_a_reviewer_sees_its_institutions_requests_only(server):
    with browser_page() as page:
        open_live(page, server, REVIEWER, REVIEWER_PASSWORD)
        assert "Your institution's requests" in page.inner_text(".live-scope")
        elsewhere = embed(server, "elsewhere")
        served = embed(server, "demo")
        row(page, served)
        time.sleep(0.5)  # both were published together or before: the other one is not coming
        assert page.locator(f'#live-rows tr[data-request-id="{elsewhere}"]').count() == 0
        assert page.evaluate("window.notReloaded") is True
        shot(page, "live-04-reviewer")
        assert_fits(page)
