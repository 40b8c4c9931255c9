"""The admin in a real browser (Debian's chromium driven by Playwright), on a server started
the way the README starts it (`bash scripts/run.sh`, with a database of its own): log in,
create a license and an API key through the forms (autocomplete widgets need their static
JavaScript), use the key, see spent/remaining, use the policy "try a request" panel, and check
that /v1/docs renders. Screenshots land in var/screenshots/ (git-ignored) for a person."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.ports import run_script_ports

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "var" / "screenshots"
CHROMIUM = shutil.which("chromium")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)


class RunScript:
    """`bash scripts/run.sh` in its own process group, its output collected."""

    def __init__(self, workdir: Path):
        ports = run_script_ports()
        self.port, sim_port = int(ports["PORT"]), int(ports["SIMULATOR_PORT"])
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "DJANGO_SETTINGS_MODULE")
        }
        env.update(
            PORT=str(self.port),
            SIMULATOR_PORT=str(sim_port),
            DATABASE_URL=f"sqlite:///{workdir / 'db.sqlite3'}",
            STATIC_ROOT=str(workdir / "static"),
            DEBUG="false",
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.output: list[str] = []
        self.proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "run.sh")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.output.append(line)

    def wait_ready(self, timeout=240.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("run.sh exited:\n" + "".join(self.output))
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError("run.sh did not start:\n" + "".join(self.output))

    def printed(self, pattern: str) -> str:
        found = re.search(pattern, "".join(self.output))
        assert found, "".join(self.output)
        return found.group(1)

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except ProcessLookupError:
            pass  # run.sh and its children are gone already
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.reader.join(timeout=10)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory(prefix="gateway-browser-") as workdir:
        run = RunScript(Path(workdir))
        try:
            run.wait_ready()
            yield run
        finally:
            run.stop()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(20_000)
        yield page
        browser.close()


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def pick(page, field_id: str, text: str):
    """Choose `text` in an admin autocomplete (select2) widget."""
    page.click(f"#{field_id} + .select2 .select2-selection")
    page.fill(".select2-container--open .select2-search__field", text)
    page.click(f".select2-results__option:has-text('{text}')")


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
    pick(page, "id_institution", "Demo school")
    pick(page, "id_license_type", "Open access")
    page.fill("#id_budget_limit", "1000000")
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
    pick(page, "id_institution", "Demo school")
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

    # /v1/docs renders (Swagger UI from the static files).
    page.goto(server.url + "/v1/docs")
    page.wait_for_selector(".swagger-ui .opblock")
    assert "/v1/embeddings" in page.inner_text(".swagger-ui")
    shot(page, "09-v1-docs")


def test_screenshots_are_ignored_by_git():
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(SHOTS / "x.png")], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, sys.stderr
