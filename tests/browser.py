"""Real-browser test helpers: `scripts/run.sh` started as the README starts it (own ports, own
SQLite database and static root), and Debian's chromium driven by Playwright. The browser test
modules share one such server for the session (`server`, tests/conftest.py), each acting in an
institution and with users of its own; a module that needs run.sh started with an environment of
its own (an identity provider's or an LMS's address) makes its own `server` from these (see
tests/sso/test_browser_sso.py)."""

from __future__ import annotations

import functools
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
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.npm import npm_installed
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
            time.sleep(0.1)
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


# --- accessibility: axe-core's WCAG 2.1 A and AA rules in the page ----------------------------

# axe-core from npm, pinned with its integrity hash in tests/accessibility/axe/package-lock.json
# and `npm ci`'d into var/cache/ by tests/npm.py once per lock.
AXE_PACKAGE = ROOT / "tests" / "accessibility" / "axe"
# The rule tags of WCAG 2.0 and 2.1, levels A and AA: what the conformance report claims
# (docs/accessibility.md). axe's best practices and AAA rules are not run.
WCAG_21_AA = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
# With AXE_WCAG22=1 the rules WCAG 2.2 added at A and AA (target size) run too: the notes on
# 2.2 in docs/accessibility.md come from such a run. The suite's gate is 2.1 AA.
WCAG_TAGS = WCAG_21_AA + (("wcag22a", "wcag22aa") if os.environ.get("AXE_WCAG22") else ())


@dataclass(frozen=True)
class KnownViolation:
    """A violation in markup we do not own (Django admin's), recorded rather than fixed: the
    rule, the elements it is allowed on (a substring of axe's CSS selector for the node), and
    why it stays. Listed in docs/accessibility.md's "What is known not to pass"."""

    rule: str
    target: str
    reason: str


# Empty is the goal; each entry is a rule on named elements, never a rule switched off.
KNOWN_VIOLATIONS: tuple[KnownViolation, ...] = (
    KnownViolation(
        "nested-interactive",
        ".opblock-summary-control",
        "Swagger UI's operation header on /manage/v1/docs: a button (fold and unfold) that holds "
        "the operation's own controls; the markup is Swagger UI's (docs/accessibility.md).",
    ),
)


@functools.cache
def axe_source() -> str:
    """axe.min.js of the pinned axe-core (installed on first use; skips without node and npm)."""
    folder = npm_installed(AXE_PACKAGE, "axe-core")
    return (folder / "node_modules" / "axe-core" / "axe.min.js").read_text()


# Transitions and animations are finished first: axe reads the colours on screen, and a page
# whose theme or rows just changed is still fading (the admin's links fade over 0.15 s). One
# that never ends (a loading spinner) cannot be finished and is left to turn.
_RUN_AXE = """async ([tags, rules]) => {
  document.getAnimations().forEach(animation => {
    if (animation.effect && animation.effect.getComputedTiming().endTime !== Infinity)
      animation.finish();
  });
  const only = rules.length ? {type: "rule", values: rules} : {type: "tag", values: tags};
  // axe preloads the page's style sheets (fetched and parsed again) for the one rule that reads
  // the CSSOM, css-orientation-lock, which is experimental and so not among the rules run: only
  // media is preloaded (no-autoplay-audio), unless that rule is ever run (~20% of a run).
  const cssom = axe.getRules(tags).some(rule => rule.ruleId === "css-orientation-lock"
    && !rule.tags.includes("experimental"));
  const preload = {assets: cssom ? ["cssom", "media"] : ["media"]};
  const result = await axe.run(document, {runOnly: only, resultTypes: ["violations"], preload});
  return {version: axe.version, violations: result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    nodes: v.nodes.map(n => ({target: n.target.join(" "), html: n.html,
                              summary: n.failureSummary}))}))};
}"""


# WCAG 2.1's 1.4.11 (Non-text Contrast) for form fields, which axe does not check: the border
# that shows where a field is (or the field's own background) stands out 3:1 from what is
# behind the field. Reported as the rule `field-border-contrast`, like axe's.
_FIELD_BORDERS = """() => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => (v /= 255) <= 0.03928 ? v / 12.92
    : ((v + 0.055) / 1.055) ** 2.4).reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (a, b) => (Math.max(lum(a), lum(b)) + 0.05) / (Math.min(lum(a), lum(b)) + 0.05);
  const behind = el => {
    for (let e = el.parentElement; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c;
    }
    return [255, 255, 255];
  };
  const fields = document.querySelectorAll("input:not([type=hidden], [type=checkbox], "
    + "[type=radio], [type=submit], [type=button], [type=image], [type=file], [type=range], "
    + "[type=color]), select:not(.select2-hidden-accessible), textarea, .select2-selection");
  const bad = [];
  for (const field of fields) {
    const style = getComputedStyle(field);
    const box = field.getBoundingClientRect();
    if (!box.width || !box.height || style.visibility === "hidden") continue;
    const around = behind(field), fill = rgb(style.backgroundColor);
    const line = rgb(style.borderBottomColor);
    const edge = style.borderBottomStyle === "none" ? 1 : ratio(line, around);
    const found = Math.max(edge, fill.length === 3 || fill[3] === 1 ? ratio(fill, around) : 1);
    if (found < 3) bad.push({target: field.id ? "#" + field.id : field.className || field.tagName,
                             html: field.outerHTML.slice(0, 160),
                             summary: "The field's border has a contrast of " + found.toFixed(2)
                               + ":1 with what is behind it (" + style.borderBottomColor + ")."});
  }
  return bad;
}"""


def _known(rule: str, target: str) -> bool:
    return any(k.rule == rule and k.target in target for k in KNOWN_VIOLATIONS)


# The browser contexts whose every new document gets axe-core (an init script, _with_axe).
_AXE_CONTEXTS: weakref.WeakSet = weakref.WeakSet()


def _with_axe(page) -> None:
    """axe-core in the page: added to the page's browser context once, as an init script, so that
    every document it loads afterwards has it from the start. Injected into each page checked
    (a script tag of 650 KB sent and compiled each time), it cost ~0.5 s a page on the 2-core
    machine, the init script ~0.1 s (docs/testing.md, CI's time). A document that has none (the
    first, or one written with set_content) gets a script tag."""
    if page.evaluate("() => typeof window.axe === 'object'"):
        return
    if page.context not in _AXE_CONTEXTS:
        page.context.add_init_script(script=axe_source())
        _AXE_CONTEXTS.add(page.context)
    page.add_script_tag(content=axe_source())


def accessibility_violations(page, rules: tuple[str, ...] = ()) -> tuple[str, list[dict]]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now (only the `rules` named, if
    any), the known ones left out: (axe's version, the violations with their nodes)."""
    _with_axe(page)
    found = page.evaluate(_RUN_AXE, [list(WCAG_TAGS), list(rules)])
    fields = page.evaluate(_FIELD_BORDERS)
    if fields:
        found["violations"].append(
            {
                "id": "field-border-contrast",
                "impact": "serious",
                "help": "Form fields' borders must have a 3:1 contrast (WCAG 1.4.11; this suite's)",
                "helpUrl": "https://www.w3.org/WAI/WCAG21/Understanding/non-text-contrast",
                "nodes": fields,
            }
        )
    violations = []
    for violation in found["violations"]:
        nodes = [n for n in violation["nodes"] if not _known(violation["id"], n["target"])]
        if nodes:
            violations.append({**violation, "nodes": nodes})
    return found["version"], violations


# The admin's two themes (its own stylesheets follow the browser's preference unless a person
# picks one): every check runs in both, every rule in the light one and in the dark one the
# WCAG 2.1 A/AA rules that read colours (the page's elements and names are the same in both).
THEMES = {"light": (), "dark": ("color-contrast", "link-in-text-block")}


def accessibility_report(page, what: str = "") -> str:
    """The page's WCAG 2.1 A/AA violations in both themes as a readable list (rule, impact,
    element, what to fix, the rule's help page); empty when it passes."""
    lines = []
    for theme, rules in THEMES.items():
        page.emulate_media(color_scheme=theme)
        version, violations = accessibility_violations(page, rules)
        if violations:
            lines.append(
                f"{len(violations)} WCAG 2.1 A/AA rule(s) fail on {what or page.url} in the "
                f"{theme} theme (axe-core {version}):"
            )
        for v in violations:
            lines.append(f"- {v['id']} ({v['impact']}): {v['help']}  <{v['helpUrl']}>")
            for node in v["nodes"][:8]:
                summary = " ".join(node["summary"].split())
                lines.append(f"    at {node['target']}: {node['html'][:160]}")
                lines.append(f"       {summary[:300]}")
            if len(v["nodes"]) > 8:
                lines.append(f"    ... and {len(v['nodes']) - 8} more elements")
    page.emulate_media(color_scheme="light")
    return "\n".join(lines)


def assert_accessible(page, what: str = "") -> None:
    """The page as it is now passes axe-core's WCAG 2.1 A and AA rules in the light and the dark
    theme; fails with the list of what does not (accessibility_report)."""
    report = accessibility_report(page, what)
    assert not report, report


# --- keyboard-only use: Tab, Shift+Tab, Enter and Space, the focus always visible ------------

# Where the focus is: the element (described for a failure message), whether the selector
# matches it, whether its focus is shown (an outline, Chromium's own focus ring included, or a
# shadow) and whether it is on screen and not under another element (WCAG 2.4.7, and 2.2's
# 2.4.11). None while the focus is on the page itself (before the first stop, after the last).
_FOCUS = """(selector) => {
  const el = document.activeElement;
  if (!el || el === document.body || el === document.documentElement) return null;
  const style = getComputedStyle(el);
  const ring = (style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0)
    || style.boxShadow !== "none";
  const box = el.getBoundingClientRect();
  const x = Math.min(Math.max(box.left + box.width / 2, 0), innerWidth - 1);
  const y = Math.min(Math.max(box.top + box.height / 2, 0), innerHeight - 1);
  const top = document.elementFromPoint(x, y);
  const seen = box.width > 0 && box.height > 0 && box.bottom > 0 && box.top < innerHeight
    && top !== null && (top === el || el.contains(top) || top.contains(el)
                        || (el.labels && [...el.labels].some(label => label.contains(top))));
  const name = (el.getAttribute("aria-label") || el.innerText || el.value || "").trim();
  const tag = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "");
  return {
    what: tag + (name ? " '" + name.slice(0, 40) + "'" : ""),
    matches: selector ? el.matches(selector) : false,
    ring: ring,
    seen: seen,
  };
}"""


def focused(page, selector: str = "") -> dict | None:
    """The focused element (see _FOCUS), or None when nothing on the page has the focus."""
    return page.evaluate(_FOCUS, selector)


def tab_to(page, selector: str, *, backwards: bool = False, limit: int = 200) -> list[str]:
    """Presses Tab (Shift+Tab when `backwards`) until the element `selector` (a CSS selector)
    has the focus, and returns the stops on the way. Every stop must show its focus and be on
    screen; `limit` presses without reaching it fails (a trap, or a control the keyboard cannot
    reach)."""
    key = "Shift+Tab" if backwards else "Tab"
    stops: list[str] = []
    for _ in range(limit):
        page.keyboard.press(key)
        state = focused(page, selector)
        if state is None:
            stops.append("(the page)")
            continue
        stops.append(state["what"])
        assert state["ring"], f"the focus is not visible on {state['what']}; stops: {stops}"
        assert state["seen"], f"{state['what']} has the focus off screen or covered: {stops}"
        if state["matches"]:
            return stops
    raise AssertionError(f"{selector} not reached with {key} in {limit} presses: {stops}")


def tab_round(page, *, backwards: bool = False, limit: int = 300) -> list[str]:
    """Tab (or Shift+Tab) from where the focus is all the way round the page and back to the
    same element: no keyboard trap, the focus visible at every stop (tab_to). Returns the
    stops."""
    start = focused(page)
    assert start is not None, "nothing has the focus to start from"
    assert page.evaluate("() => document.activeElement.tabIndex >= 0"), (
        f"{start['what']} is not in the tab order: Tab would never come back to it"
    )
    page.evaluate("() => document.activeElement.setAttribute('data-round-start', '')")
    try:
        return tab_to(page, "[data-round-start]", backwards=backwards, limit=limit)
    finally:
        page.evaluate(
            "() => document.querySelectorAll('[data-round-start]')"
            ".forEach(e => e.removeAttribute('data-round-start'))"
        )
