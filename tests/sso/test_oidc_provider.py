"""Issue 35 item 3 against the real thing: sign-in through panva's oidc-provider, a certified
OpenID Provider, with its default claims behaviour (the e-mail and the groups at the userinfo
endpoint only, not in the id_token) and its own login and consent pages.

The provider is installed from npm at the exact version of `oidc_provider/package-lock.json`
(tests/npm.py: `npm ci`, integrity hashes checked, into `var/cache/oidc-provider-<digest>/`
once per lock); `oidc_provider/server.mjs` configures it (a client whose redirect URI is the
gateway's callback, accounts with their claims). Skipped, saying why, only without node and
npm or with the npm registry unreachable."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from django.contrib.auth import SESSION_KEY, get_user_model

from licensing.access.services import license_create
from licensing.models import AdminProfile, EndUser, SsoIdentity
from licensing.signin import oidc
from licensing.signin.sso import identity_provider_configure, redirect_uri_of
from tests.npm import npm_installed

from .conftest import start
from .test_sign_in import assert_refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

User = get_user_model()
SOURCE = Path(__file__).resolve().parent / "oidc_provider"


@pytest.fixture(scope="session")
def oidc_provider_dir() -> Path:
    """node_modules/oidc-provider at the locked version (tests/npm.py), and the script beside
    it: ES modules resolve packages from the script's own folder."""
    folder = npm_installed(SOURCE, "oidc-provider")
    shutil.copy(SOURCE / "server.mjs", folder / "server.mjs")
    return folder


class OpenIdProvider:
    """One oidc-provider process on 127.0.0.1 (a free port), for one gateway provider row."""

    def __init__(self, folder: Path, *, client: dict, accounts: dict, log: Path):
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [shutil.which("node") or "node", str(folder / "server.mjs")],
            cwd=folder,
            env={
                **os.environ,
                "OP_CLIENT": json.dumps(client),
                "OP_ACCOUNTS": json.dumps(accounts),
            },
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        self.issuer = self._first_line()["issuer"]

    def _first_line(self) -> dict:
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        # Waits for the process to start (seconds at most), not for a time to pass.
        if not selector.select(timeout=60):
            self.stop()
            pytest.fail("oidc-provider did not start within 60 s")
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            pytest.fail("oidc-provider stopped at start")
        return json.loads(line)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class _Forms(HTMLParser):
    """The first form of a page: its action and its inputs' names and values."""

    def __init__(self):
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self._inside = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and self.action is None:
            self.action, self._inside = a.get("action") or "", True
        elif tag == "input" and self._inside and a.get("name"):
            self.fields[a["name"]] = a.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form":
            self._inside = False


def through_the_provider(authorize_url: str, *, login: str, redirect_uri: str) -> str:
    """A person at oidc-provider's own pages (devInteractions): the login form (any password),
    then the consent form, following its redirects, until it sends the browser back to the
    gateway; that callback's path and query."""
    with httpx.Client(follow_redirects=False, timeout=10) as person:
        answer = person.get(authorize_url)
        for _ in range(12):
            if answer.is_redirect:
                location = urljoin(str(answer.url), answer.headers["location"])
                if location.startswith(redirect_uri):
                    parts = urlsplit(location)
                    return f"{parts.path}?{parts.query}"
                answer = person.get(location)
                continue
            assert answer.status_code == 200, answer.text[:500]
            form = _Forms()
            form.feed(answer.text)
            assert form.action is not None, answer.text[:500]
            fields = form.fields | {"login": login, "password": "any password"}
            answer = person.post(urljoin(str(answer.url), form.action), data=fields)
        pytest.fail("oidc-provider never sent the browser back")


@pytest.fixture
def certified_op(db, oidc_provider_dir, settings, tmp_path):
    """Alpha School's provider row and its oidc-provider process, loopback allowed."""
    license = license_create(
        name="Alpha students", institution="Alpha School", limit=10**9, strategy="per_user"
    )
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOW": "127.0.0.1/32"}
    provider = identity_provider_configure(
        institution=license.institution,
        issuer="http://127.0.0.1:443",  # replaced below, once the process has its port
        client_id="gw-certified",
        client_secret="certified-secret",
        admin_groups=["alpha-admins"],
        student_groups=["alpha-students"],
        student_license=license,
    )
    redirect_uri = redirect_uri_of(provider.pk)
    op = OpenIdProvider(
        oidc_provider_dir,
        client={
            "client_id": "gw-certified",
            "client_secret": "certified-secret",
            "redirect_uri": redirect_uri,
        },
        accounts={
            "ada": {
                "email": "Ada@Alpha.example.edu",
                "email_verified": True,
                "groups": ["alpha-admins"],
                "name": "Ada",
            },
            "stu": {
                "email": "stu@alpha.example.edu",
                "email_verified": True,
                "groups": ["alpha-students"],
            },
            "nog": {"email": "nog@alpha.example.edu", "email_verified": True, "groups": []},
        },
        log=tmp_path / "oidc-provider.log",
    )
    port = urlsplit(op.issuer).port
    settings.GATEWAY = {**settings.GATEWAY, "OUTBOUND_ALLOWED_PORTS": frozenset({443, port})}
    provider.issuer = op.issuer
    provider.save(update_fields=["issuer"])
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()
    yield provider, redirect_uri
    op.stop()
    oidc.discovery_cache.clear()
    oidc.jwks_cache.clear()


@pytest.fixture
def id_tokens(monkeypatch):
    """The claims of every id_token the gateway verified (to show where the claims were)."""
    seen: list[dict] = []
    verify = oidc.verify_id_token

    def recording(*args, **kwargs):
        claims = verify(*args, **kwargs)
        seen.append(dict(claims))
        return claims

    monkeypatch.setattr(oidc, "verify_id_token", recording)
    return seen


def test_sign_in_with_the_claims_at_userinfo(browser, certified_op, id_tokens):
    provider, redirect_uri = certified_op
    started = time.monotonic()
    callback = through_the_provider(
        start(browser, provider), login="ada", redirect_uri=redirect_uri
    )
    response = browser.get(callback)
    assert response.status_code == 302, response.content[:800]
    assert response["Location"] == "/admin/"
    # Its default: the id_token holds neither the e-mail nor the groups.
    assert id_tokens and "email" not in id_tokens[0] and "groups" not in id_tokens[0]
    assert id_tokens[0]["sub"] == "ada"
    user = User.objects.get(pk=browser.session[SESSION_KEY])
    assert (user.username, user.email, user.is_staff) == (
        "ada@alpha.example.edu",
        "ada@alpha.example.edu",
        True,
    )
    assert AdminProfile.objects.get(user=user).role == "admin"
    assert SsoIdentity.objects.get(user=user).groups == ["alpha-admins"]
    assert time.monotonic() - started < 30


def test_a_student_and_a_person_without_a_mapped_group(browser, certified_op):
    provider, redirect_uri = certified_op
    callback = through_the_provider(
        start(browser, provider), login="stu", redirect_uri=redirect_uri
    )
    response = browser.get(callback)
    assert response.status_code == 302 and response["Location"] == "/portal/"
    assert EndUser.objects.get(user__username="stu@alpha.example.edu").active
    browser.logout()
    callback = through_the_provider(
        start(browser, provider), login="nog", redirect_uri=redirect_uri
    )
    assert_refused(browser, browser.get(callback), 403, "no_mapped_group")
