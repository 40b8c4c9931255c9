"""Real-browser test helpers: `scripts/run.sh` started as the README starts it (own ports, own
SQLite database and static root), and Debian's chromium driven by Playwright. The browser test
modules share one such server for the session (`server`, tests/conftest.py), each acting in an
institution and with users of its own; a module that needs run.sh started with an environment of
its own (an identity provider's or an LMS's address) makes its own `server` from these (see
tests/sso/test_browser_sso.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.ports import run_script_ports

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "var" / "screenshots"
CHROMIUM = shutil.which("chromium")

requires_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
# run.sh serves from a SQLite database of its own whichever database the suite is on, so a
# browser test is the same test on CI's two passes: it runs on the PostgreSQL one (and in a
# plain local run, DATABASE_URL unset), not again on the SQLite one (.ci/run, DATABASE_URL="").
_url = os.environ.get("DATABASE_URL")
not_on_the_sqlite_pass = pytest.mark.skipif(
    _url is not None and not _url.startswith("postgres"),
    reason="run.sh serves from its own SQLite database: the PostgreSQL pass runs the same test",
)
# Every browser test module's pytestmark: the README server and a Chromium page.
BROWSER_TEST = [requires_chromium, not_on_the_sqlite_pass, pytest.mark.slow]


# `manage.py shell -c` running a plan of commands with call_command; the last line printed is
# what each one wrote, as JSON.
_MANY = """
import contextlib, io, json, os
from django.core.management import call_command
outputs = []
for args, env in json.loads(PLAN):
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            call_command(*args, stdout=out)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    outputs.append(out.getvalue())
print()
print(json.dumps(outputs))
"""


class RunScript:
    """`bash scripts/run.sh` in its own process group, its output collected."""

    def __init__(self, workdir: Path, **env_extra: str):
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
            DEMO_KEY_FILE=str(workdir / "demo-api-key"),
            DEBUG="false",
        )
        env.update(env_extra)
        self.env = env
        self.url = f"http://127.0.0.1:{self.port}"
        # The development identity provider and LMS simulator run.sh starts (SIMULATOR_PORT + 3
        # and + 4), unless DEV_SIGN_IN=off or the demo school has real ones.
        self.idp_url = f"http://127.0.0.1:{sim_port + 3}"
        self.lms_url = f"http://127.0.0.1:{sim_port + 4}"
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

    def manage(self, *args: str, env: dict | None = None) -> str:
        """`manage.py` on the server's own database; returns what it printed."""
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def manage_many(self, *steps: tuple[tuple[str, ...], dict] | tuple[str, ...]) -> list[str]:
        """Several `manage.py` commands (each a tuple of its arguments, or `(arguments, env)`)
        in one process on the server's database, in order: Django starts once, not once per
        command (~2 s each). Returns what each printed; a failing one fails the call."""
        plan = [step if isinstance(step[-1], dict) else (step, {}) for step in steps]
        printed = self.manage("shell", "-c", _MANY.replace("PLAN", repr(json.dumps(plan))))
        return json.loads(printed.rsplit("\n", 2)[-2])

    def admin_password(self) -> str:
        return self.printed(r"Admin user created: admin / (\S+)")

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


@contextmanager
def running_server(**env_extra: str):
    """`bash scripts/run.sh` on free ports with a database of its own, until the block ends
    (`env_extra`: more of its environment)."""
    with tempfile.TemporaryDirectory(prefix="gateway-browser-") as workdir:
        run = RunScript(Path(workdir), **env_extra)
        try:
            run.wait_ready()
            yield run
        finally:
            run.stop()


class SharedServer:
    """The session's one README server, as a module sees it: the same run.sh (started once for
    every browser module that needs no environment of its own), each module acting in an
    institution and with users of its own so that no module sees another's rows."""

    def __init__(self, run: RunScript):
        self._run = run

    def __getattr__(self, name):
        return getattr(self._run, name)


@contextmanager
def browser_page(width: int = 1440, height: int = 900):
    """A page of Debian's chromium (headless, driven by Playwright)."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            browser.close()


def login(page, server, username: str, password: str) -> None:
    page.goto(server.url + "/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def pick(page, field_id: str, text: str):
    """Choose `text` in an admin autocomplete (select2) widget."""
    page.click(f"#{field_id} + .select2 .select2-selection")
    page.fill(".select2-container--open .select2-search__field", text)
    page.click(f".select2-results__option:has-text('{text}')")
