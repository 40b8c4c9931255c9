"""Open WebUI itself (the release pinned in tests/clients/open_webui/requirements.txt) in front
of the live gateway (PostgreSQL on CI) with the fake OpenAI upstream behind it, driven in
Debian's Chromium: the set-up of docs/open-webui.md, tested as a school runs it.

One fake OpenID Connect provider (fake_upstreams/oidc.py) serves two applications, as a school's
IdP does: the gateway's sign-in (client `gateway`) and Open WebUI's (client `open-webui`, with
PKCE). Open WebUI reaches the gateway with a front-end key and forwards who is chatting
(ENABLE_FORWARD_USER_INFO_HEADERS). Two students of one course sign in to the gateway's portal
once (that is how the gateway knows them), then to Open WebUI through the same IdP, and each
chats: each student's wallets move by exactly their own ledger rows. The teacher signs in to the
course page and switches exam mode on; the student's next message is refused, and the chat
shows the gateway's message. A third student, who never signed in to the gateway, reads in the
chat where to. Screenshots: var/screenshots/open-webui-*.png.

Open WebUI is installed once per lock into a virtualenv of its own (scripts/install_open_webui.sh:
`var/open-webui-<version>-<digest>/`, or under OPEN_WEBUI_HOME, where CI keeps it between runs)
and started for the test with its own data folder under the test's tmp, on a free port, with no
telemetry, no update check and nothing fetched from outside (docs/testing.md, "Open WebUI: a
large install, once").
It starts processes of its own and takes minutes on a cold machine: `slow`."""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.db import connections
from django.db.models import Q, Sum

from core.config import get_config
from fake_upstreams.oidc import OidcFake
from fake_upstreams.server import FakeServer
from licensing.access.credentials import api_key_create
from licensing.access.services import license_create
from licensing.courses.services import course_create, course_member_add, course_teacher_add
from licensing.models import ApiKey, EndUser, Transaction, Wallet
from licensing.signin import oidc
from licensing.signin.sso import identity_provider_configure
from tests.browser import CHROMIUM, SHOTS, requires_chromium
from tests.kit import drain_background_writes, wait_for_ledger, wait_until
from tests.ports import free_block

pytestmark = [requires_chromium, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install_open_webui.sh"
TORCH = "2.13.0+cpu"  # the CPU build this machine kind keeps on disk (requirements.in)
SCHOOL = "Webui School"
COURSE = "BIO-7A"
MINI = "gpt-4o-mini"
MODEL = f"{COURSE} · {MINI}"  # the front-end key's alias: this course, this model
OW_CLIENT, OW_SECRET = "open-webui", "open-webui-secret"
GW_CLIENT, GW_SECRET = "gateway", "gateway-secret"
STUDENTS = {  # e-mail -> (the IdP's subject, the name Open WebUI shows)
    "ana@webui.example": ("stu-ana", "Ana Example"),
    "ben@webui.example": ("stu-ben", "Ben Example"),
}
NEWCOMER = "cem@webui.example"  # signs in to Open WebUI, never to the gateway
TEACHER = ("tea-tom", "tom@webui.example")


# --- Open WebUI, installed once per lock ---------------------------------------------------------


@pytest.fixture(scope="session")
def open_webui_venv() -> Path:
    """The pinned Open WebUI's virtualenv (installed on first use; CI starts the install in the
    background before its lanes, and this waits for it)."""
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip("the Open WebUI lock is for Linux x86_64 (its torch is the CPU build)")
    wheels = Path(os.environ.get("PIP_FIND_LINKS", "/opt/wheels"))
    if not any(wheels.glob(f"torch-{TORCH}-cp311-*.whl")):
        pytest.skip(f"torch {TORCH}'s wheel is not in {wheels} (tests/clients/open_webui/)")
    done = subprocess.run(
        ["bash", str(INSTALL)], capture_output=True, text=True, timeout=40 * 60, check=False
    )
    if done.returncode != 0:
        if re.search(r"(?i)dns error|failed to fetch|connection refused|timed out", done.stderr):
            pytest.skip(f"PyPI is unreachable: {done.stderr.strip()[-300:]}")
        pytest.fail(f"{INSTALL.name} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


class OpenWebUI:
    """`open-webui serve` on a free port, its data under `folder`, configured by environment
    variables only (what docs/open-webui.md tells a school to set, and what keeps a test run
    offline)."""

    def __init__(self, venv: Path, folder: Path, gateway_url: str, key: str, idp: OidcFake):
        self.port = free_block(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "open-webui.log"
        env = {
            "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
            "HOME": str(folder),
            "DATA_DIR": str(folder / "data"),
            "STATIC_DIR": str(folder / "static"),  # not the shared virtualenv's package folder
            "WEBUI_SECRET_KEY": "open-webui-test-secret-key-0123456789",
            "WEBUI_URL": self.url,
            # The admin exists before anyone signs in, so no student becomes Open WebUI's admin.
            "WEBUI_ADMIN_EMAIL": "it@webui.example",
            "WEBUI_ADMIN_PASSWORD": "open-webui-admin-password",
            # The gateway: one OpenAI connection, the front-end key, who is chatting forwarded.
            "ENABLE_OPENAI_API": "true",
            "OPENAI_API_BASE_URL": f"{gateway_url}/v1",
            "OPENAI_API_KEY": key,
            "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
            "ENABLE_OLLAMA_API": "false",
            "ENABLE_DIRECT_CONNECTIONS": "false",
            # Students see the models the gateway lists (the gateway's rules decide what each
            # may use); without it Open WebUI shows a model to users only once an admin shares it.
            "BYPASS_MODEL_ACCESS_CONTROL": "true",
            "DEFAULT_MODELS": MODEL,
            "DEFAULT_USER_ROLE": "user",
            # Sign-in: the school's IdP only.
            "ENABLE_OAUTH_SIGNUP": "true",
            "ENABLE_LOGIN_FORM": "false",
            "ENABLE_SIGNUP": "false",
            "OAUTH_UPDATE_EMAIL_ON_LOGIN": "true",
            "OAUTH_MERGE_ACCOUNTS_BY_EMAIL": "false",
            "OAUTH_CLIENT_ID": OW_CLIENT,
            "OAUTH_CLIENT_SECRET": OW_SECRET,
            "OPENID_PROVIDER_URL": f"{idp.issuer}/.well-known/openid-configuration",
            "OPENID_REDIRECT_URI": f"{self.url}/oauth/oidc/callback",
            "OAUTH_PROVIDER_NAME": SCHOOL,
            "OAUTH_SCOPES": "openid email profile",
            "OAUTH_CODE_CHALLENGE_METHOD": "S256",
            # One request per message: no background title, tag, follow-up or query requests
            # (each would be a charged request of the student's too).
            "ENABLE_TITLE_GENERATION": "false",
            "ENABLE_TAGS_GENERATION": "false",
            "ENABLE_FOLLOW_UP_GENERATION": "false",
            "ENABLE_AUTOCOMPLETE_GENERATION": "false",
            "ENABLE_RETRIEVAL_QUERY_GENERATION": "false",
            "ENABLE_SEARCH_QUERY_GENERATION": "false",
            "ENABLE_EVALUATION_ARENA_MODELS": "false",
            "ENABLE_WEB_SEARCH": "false",
            "ENABLE_IMAGE_GENERATION": "false",
            "ENABLE_CODE_INTERPRETER": "false",
            "ENABLE_COMMUNITY_SHARING": "false",
            # Nothing from outside: no model downloads (RAG embeddings would go to the gateway,
            # so no local embedding model is loaded at start), no update check, no telemetry.
            "OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "RAG_EMBEDDING_ENGINE": "openai",
            "ENABLE_VERSION_UPDATE_CHECK": "false",
            "SCARF_NO_ANALYTICS": "true",
            "DO_NOT_TRACK": "true",
            "ANONYMIZED_TELEMETRY": "false",
            "ENABLE_OTEL": "false",
            "GLOBAL_LOG_LEVEL": "WARNING",
        }
        self.log = self.log_path.open("wb")
        self.began = time.monotonic()
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "open-webui"), "serve", "--host", "127.0.0.1",
             "--port", str(self.port)],
            cwd=folder,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 600) -> float:
        """Seconds until /health answers (Open WebUI's start: its imports, its migrations)."""

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"Open WebUI exited:\n{self.output()[-4000:]}")
            try:
                return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=timeout, every=0.5, what=lambda: self.output()[-4000:])
        return time.monotonic() - self.began

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


# --- the school: one IdP for the gateway and Open WebUI, a course, a front-end key --------------


@pytest.fixture(scope="module")
def idp():
    server = FakeServer(OidcFake(GW_CLIENT, GW_SECRET, more_clients={OW_CLIENT: OW_SECRET}))
    server.start()
    yield server.app
    server.stop()


@pytest.fixture
def school(idp, gateway, catalog, settings, monkeypatch):
    """The institution's sign-in on the gateway (students and teachers from the IdP's groups),
    its course and its front-end key; the gateway's public URL is the live gateway's (the
    callback the IdP redirects to, the portal address its messages name)."""
    idp.reset()
    # Open WebUI 0.12 offers its built-in tools (get_current_timestamp, ...) with every message;
    # the fake would call one and each message would be two requests. A plain answer: one.
    catalog["direct"].call_tools = False
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()
    settings.GATEWAY = {
        **settings.GATEWAY,
        "OUTBOUND_ALLOW": "127.0.0.1/32",
        "OUTBOUND_ALLOWED_PORTS": frozenset({443, urlsplit(idp.origin).port}),
    }
    monkeypatch.setenv("GATEWAY_PUBLIC_URL", gateway.url)
    get_config.cache_clear()
    license = license_create(
        name=f"{SCHOOL} students",
        institution=SCHOOL,
        limit=50_000_000,
        period="monthly",
        strategy="per_user",
    )
    identity_provider_configure(
        institution=license.institution,
        issuer=idp.issuer,
        client_id=GW_CLIENT,
        client_secret=GW_SECRET,
        teacher_groups=["teachers"],
        student_groups=["students"],
        student_license=license,
    )
    course = course_create(
        license=license, name="Biology 7A", code=COURSE, allowance=5_000_000, pool_limit=9_000_000
    )
    _, key = api_key_create(license=license, name="Open WebUI", kind=ApiKey.Kind.FRONT_END)
    yield license, course, key
    get_config.cache_clear()  # the environment is restored by monkeypatch after this


@pytest.fixture
def open_webui(open_webui_venv, school, gateway, idp, tmp_path):
    _, _, key = school
    server = OpenWebUI(open_webui_venv, tmp_path, gateway.url, key, idp)
    try:
        took = server.wait_ready()
        print(f"Open WebUI ready after {took:.1f} s")  # in the step log's captured output
        yield server
    finally:
        server.stop()


# --- what a person does -----------------------------------------------------------------------


def gateway_sign_in(page, gateway, idp, sub: str, email: str, group: str, path="/portal/"):
    """Through the portal's button, with the IdP's answer for this person."""
    idp.sign_in_next(sub, email=email, groups=[group])
    page.goto(gateway.url + path)
    page.get_by_role("link", name=f"Sign in with {SCHOOL}").click()
    page.wait_for_url(gateway.url + path)


def open_webui_sign_in(page, server: OpenWebUI, idp, email: str) -> None:
    sub, name = STUDENTS.get(email, (f"stu-{email}", email))
    idp.sign_in_next(sub, email=email, name=name, groups=["students"])
    page.goto(server.url + "/auth")
    page.get_by_role("button", name=f"Continue with {SCHOOL}").click()
    page.wait_for_selector("#chat-input", timeout=120_000)


def send(page, text: str) -> None:
    page.locator("#chat-input").click()
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def orm(function, *args):
    """`function(*args)` in a thread of its own: Playwright's sync API runs an event loop in the
    test's thread, where Django refuses every query (SynchronousOnlyOperation)."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(_closing, function, *args).result()


def _closing(function, *args):
    try:
        return function(*args)
    finally:
        connections.close_all()  # the thread's own connections, not the test's


def wallets(license) -> dict[str, int]:
    return dict(Wallet.objects.filter(license=license).values_list("holder", "spent"))


def credits_of(end_user: EndUser) -> int:
    return Transaction.objects.filter(end_user=end_user).aggregate(s=Sum("credits"))["s"] or 0


# --- the test ---------------------------------------------------------------------------------

QUESTIONS = {
    "ana@webui.example": ["What do chloroplasts do?", "And mitochondria?"],
    "ben@webui.example": ["Why are leaves green?"],
}


def test_two_students_chat_in_open_webui_and_exam_mode_refuses_the_next_message(
    gateway, school, idp, open_webui
):
    from playwright.sync_api import sync_playwright

    license, course, _ = school
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            students = {
                email: signed_in_student(browser, gateway, idp, open_webui, course, email)
                for email in STUDENTS
            }
            students_chat(students, license, course)
            teacher_switches_exam_mode_on(browser, gateway, idp, course)
            next_message_is_refused(students["ana@webui.example"], license, course)
            newcomer_is_told_to_sign_in_once(browser, gateway, idp, open_webui)
        except Exception:
            for n, context in enumerate(browser.contexts):
                for m, page in enumerate(context.pages):
                    page.screenshot(path=str(SHOTS / f"open-webui-failed-{n}-{m}.png"))
            print(open_webui.output()[-6000:])
            raise
        finally:
            browser.close()


def new_page(browser, height=800):
    page = browser.new_context(viewport={"width": 1280, "height": height}).new_page()
    page.set_default_timeout(30_000)
    return page


def signed_in_student(browser, gateway, idp, open_webui, course, email: str):
    """A student in a browser of their own: the gateway's portal once (the gateway knows them
    from then on; the course's teacher adds them), then Open WebUI, through the same IdP."""
    page = new_page(browser)
    sub, _ = STUDENTS[email]
    gateway_sign_in(page, gateway, idp, sub, email, "students")
    end_user = orm(_course_member, course, sub)
    open_webui_sign_in(page, open_webui, idp, email)
    return page, end_user


def _course_member(course, sub: str) -> EndUser:
    end_user = EndUser.objects.get(license=course.license, user__sso_identity__subject=sub)
    course_member_add(course=course, end_user=end_user)
    return end_user


def students_chat(students, license, course) -> None:
    """Each question answered in the chat (the fake upstream echoes it), one ledger row each;
    each student's wallets moved by exactly the credits of their own rows."""
    rows = 0
    for email, questions in QUESTIONS.items():
        page, _ = students[email]
        for question in questions:
            send(page, question)
            page.get_by_text(f"Echo: {question}").wait_for(timeout=60_000)
            rows += 1
            orm(wait_for_ledger, rows)
        page.screenshot(path=str(SHOTS / f"open-webui-chat-{email.split('@')[0]}.png"))
    orm(_each_paid_their_own, students, license, course)


def _each_paid_their_own(students, license, course) -> None:
    spent = wallets(license)
    charged = Transaction.objects.filter(license=license)
    assert charged.count() == 3 and set(charged.values_list("status_code", flat=True)) == {200}
    assert set(charged.values_list("course_id", flat=True)) == {course.pk}
    assert set(charged.values_list("api_key__kind", flat=True)) == {ApiKey.Kind.FRONT_END}
    for email, questions in QUESTIONS.items():
        _, end_user = students[email]
        mine = credits_of(end_user)
        assert charged.filter(end_user=end_user).count() == len(questions)
        assert mine > 0
        assert spent[f"user:{end_user.pk}"] == mine  # the student's own wallet
        assert spent[f"course:{course.pk}:user:{end_user.pk}"] == mine  # their allowance
    assert spent[f"course:{course.pk}"] == sum(credits_of(u) for _, u in students.values())


def newcomer_is_told_to_sign_in_once(browser, gateway, idp, open_webui) -> None:
    """A student who never signed in to the gateway: the chat shows where to sign in, and
    nothing is charged (the refusal comes before the gateway knows anyone to charge). Open
    WebUI asks the model list with this student's headers too: the gateway answers it whoever
    they name (else Open WebUI would show its own "Model '' was not found" and never send the
    message)."""
    page = new_page(browser)
    open_webui_sign_in(page, open_webui, idp, NEWCOMER)
    rows = orm(Transaction.objects.count)
    send(page, "Hello?")
    told = page.locator("#messages-container").get_by_text(
        f"{SCHOOL} has no student account with your e-mail address on this AI gateway yet"
    )
    told.wait_for(timeout=60_000)
    assert f"sign in once at {gateway.url}/portal/" in told.inner_text()
    page.screenshot(path=str(SHOTS / "open-webui-newcomer.png"))
    drain_background_writes()
    assert orm(Transaction.objects.count) == rows


def teacher_switches_exam_mode_on(browser, gateway, idp, course) -> None:
    from django.contrib.auth import get_user_model

    page = new_page(browser, height=900)
    sub, email = TEACHER
    gateway_sign_in(page, gateway, idp, sub, email, "teachers", path="/admin/")
    teacher = orm(get_user_model().objects.get, Q(sso_identity__subject=sub))
    orm(lambda: course_teacher_add(course=course, user=teacher))
    page.goto(f"{gateway.url}/portal/courses/{course.pk}/")
    page.get_by_role("button", name="Switch exam mode on").click()
    page.get_by_role("button", name="Switch exam mode off").wait_for()
    for email in STUDENTS:  # the per-student usage: each student's chats, by name
        page.get_by_role("cell", name=email, exact=True).wait_for()
    page.screenshot(path=str(SHOTS / "open-webui-teacher-exam-on.png"), full_page=True)


def next_message_is_refused(student, license, course) -> None:
    """The chat shows the gateway's message; a refusal row of 0 credits, no wallet moved."""
    page, end_user = student
    before = orm(wallets, license)
    rows = orm(Transaction.objects.count)
    send(page, "Is this on the exam?")
    # In the chat, under the student's message (and in a notification beside it).
    refused = page.locator("#messages-container").get_by_text(f"course '{COURSE}' is in exam mode")
    refused.wait_for(timeout=60_000)
    page.screenshot(path=str(SHOTS / "open-webui-exam-refused.png"))
    orm(wait_for_ledger, rows + 1)
    refusal = orm(Transaction.objects.get, Q(status_code=403))
    assert (refusal.end_user_id, refusal.course_id, refusal.credits) == (
        end_user.pk,
        course.pk,
        0,
    )
    assert orm(wallets, license) == before
