"""The development tools of sign-in (fake_upstreams): `python -m fake_upstreams oidc` and `lti`
as a person starts them, the identity provider's sign-in page and the code flow with PKCE it
ends in, the LMS simulator's course page and the launch it signs; hostile input on their pages
is a 400 or a page that shows it as text, never a 500. OidcFake and LtiFake themselves are
unchanged for the tests that drive them (tests/sso, tests/lti)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from fake_upstreams import demo
from fake_upstreams.__main__ import BUILDERS, parser
from fake_upstreams.lti import INSTRUCTOR, LEARNER, DevLms, LtiFake
from fake_upstreams.oidc import DevIdentityProvider, OidcFake
from fake_upstreams.server import serve

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = "http://127.0.0.1:8000"
CALLBACK = GATEWAY + "/sso/1/callback/"
VERIFIER = "v" * 50


def _challenge(verifier: str = VERIFIER) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _authorize_query(**override: str) -> dict[str, str]:
    query = {
        "client_id": demo.IDP_CLIENT_ID,
        "redirect_uri": CALLBACK,
        "response_type": "code",
        "scope": "openid email profile",
        "state": "st-1",
        "nonce": "n-1",
        "code_challenge": _challenge(),
        "code_challenge_method": "S256",
    }
    query.update(override)
    return query


@pytest.fixture(scope="module")
def idp():
    with serve(DevIdentityProvider(gateway_url=GATEWAY)) as app:
        yield app


@pytest.fixture(scope="module")
def lms():
    with serve(DevLms(tool_url=GATEWAY)) as app:
        yield app


class _Forms(HTMLParser):
    """Every form of a page: (action, its fields)."""

    def __init__(self):
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "form":
            self.forms.append((found.get("action") or "", {}))
        elif tag == "input" and found.get("name") and self.forms:
            self.forms[-1][1][found["name"]] = found.get("value") or ""


def _page_form(html: str) -> tuple[str, dict[str, str]]:
    """The page's first form."""
    parser = _Forms()
    parser.feed(html)
    return parser.forms[0]


def test_the_cli_offers_both_tools_with_their_options():
    assert {"oidc", "lti"} <= set(BUILDERS)
    args = parser().parse_args(["oidc", "--port", "9103", "--gateway-url", GATEWAY])
    idp = BUILDERS["oidc"](args)
    assert isinstance(idp, DevIdentityProvider) and idp.client_id == demo.IDP_CLIENT_ID
    assert (idp.client_secret, idp.gateway_url) == (demo.IDP_CLIENT_SECRET, GATEWAY)
    custom = parser().parse_args(["oidc", "--client-id", "c", "--client-secret", "s"])
    assert (BUILDERS["oidc"](custom).client_id, BUILDERS["oidc"](custom).client_secret) == (
        "c",
        "s",
    )
    args = parser().parse_args(["lti", "--gateway-url", GATEWAY + "/", "--deployment-id", "9"])
    lms = BUILDERS["lti"](args)
    assert isinstance(lms, DevLms) and (lms.tool_url, lms.deployment_id) == (GATEWAY, "9")
    assert lms.client_id == demo.LMS_CLIENT_ID
    with pytest.raises(SystemExit):
        parser().parse_args(["saml"])


def test_python_m_fake_upstreams_oidc_says_what_it_is_and_serves_its_page():
    process = subprocess.Popen(
        [sys.executable, "-m", "fake_upstreams", "oidc", "--port", "0", "--gateway-url", GATEWAY],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith(f"fake_upstreams: {demo.BANNER}; anyone who opens it signs in")
        origin = line.split(": ")[-1].split("/ - ")[0]
        home = httpx.get(origin + "/")
        assert home.status_code == 200 and demo.BANNER in home.text
        assert all(p.email in home.text for p in demo.PEOPLE)
        discovery = httpx.get(origin + "/.well-known/openid-configuration").json()
        assert discovery["issuer"] == origin
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()


def test_the_sign_in_page_lists_the_people_and_signs_in_the_one_chosen(idp):
    idp.reset()
    page = httpx.get(idp.issuer + "/authorize", params=_authorize_query())
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert demo.BANNER in page.text and "Sign in as Clara Novak" in page.text
    assert page.text.count("<form") == len(demo.PEOPLE)
    action, fields = _page_form(page.text)
    assert action == "/authorize" and fields["login"] == demo.PEOPLE[0].login
    fields["login"] = "demo-clara"
    answer = httpx.post(idp.issuer + "/authorize", data=fields)
    assert answer.status_code == 302
    location = urlsplit(answer.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == CALLBACK
    query = parse_qs(location.query)
    assert query["state"] == ["st-1"]
    token = httpx.post(
        idp.issuer + "/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"][0],
            "redirect_uri": CALLBACK,
            "code_verifier": VERIFIER,
        },
        auth=(demo.IDP_CLIENT_ID, demo.IDP_CLIENT_SECRET),
    )
    assert token.status_code == 200
    claims = jwt.decode(token.json()["id_token"], options={"verify_signature": False})
    assert claims["sub"] == "demo-clara" and claims["email"] == "clara@demo-school.example"
    assert claims["groups"] == ["demo-teachers"] and claims["name"] == "Clara Novak"
    assert claims["nonce"] == "n-1" and claims["email_verified"] is True


def test_a_person_queued_by_a_test_still_goes_first(idp):
    idp.reset()
    idp.sign_in_next("queued-sub", email="q@example.org")
    answer = httpx.get(idp.issuer + "/authorize", params=_authorize_query())
    assert answer.status_code == 302 and "code=" in answer.headers["location"]
    assert httpx.get(idp.issuer + "/authorize", params=_authorize_query()).status_code == 200


@pytest.mark.parametrize(
    "change, status",
    [
        ({"login": "nobody"}, 400),
        ({"login": "demo-amira\x00"}, 400),
        ({"client_id": "another-client"}, 400),
        ({"redirect_uri": "https://evil.example/callback"}, 400),  # no open redirect
        ({"redirect_uri": GATEWAY + ".evil.example/cb"}, 400),
        ({"code_challenge_method": "plain"}, 302),  # the error goes back to the client
    ],
)
def test_hostile_choices_are_refused_and_sign_in_no_one(idp, change, status):
    idp.reset()
    fields = {**_authorize_query(), "login": "demo-amira", **change}
    body = urlencode(fields, encoding="utf-8", errors="surrogatepass")
    answer = httpx.post(
        idp.issuer + "/authorize",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == status
    if status == 302:  # the client's own error, back at its redirect URI
        assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_request"]
    assert not idp._codes


def test_an_odd_state_goes_back_to_the_client_as_it_came(idp):
    idp.reset()
    state = "\ud800<script>alert(1)</script>" + "x" * 5000
    fields = {**_authorize_query(state=state), "login": "demo-amira"}
    body = urlencode(fields, encoding="utf-8", errors="surrogatepass")
    answer = httpx.post(
        idp.issuer + "/authorize",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 302
    back = parse_qs(urlsplit(answer.headers["location"]).query)
    assert back["state"][0].endswith("<script>alert(1)</script>" + "x" * 5000)  # as text


def test_hostile_values_in_the_authorization_request_are_shown_as_text(idp):
    idp.reset()
    page = httpx.get(
        idp.issuer + "/authorize",
        params=_authorize_query(state='"><script>alert(1)</script>', nonce="\x00"),
    )
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&quot;&gt;&lt;script&gt;" in page.text


def test_the_lms_page_opens_the_tool_as_each_person_and_signs_their_launch(lms):
    lms.reset()
    page = httpx.get(lms.issuer + "/")
    assert page.status_code == 200 and demo.LMS_BANNER in page.text
    assert f"{demo.COURSE.title} ({demo.COURSE.code})" in page.text
    assert "David Okafor" not in page.text  # no role in the course: no button
    action, fields = _page_form(page.text)
    assert action == GATEWAY + "/lti/login/"
    assert fields == {
        "iss": lms.issuer,
        "login_hint": demo.PEOPLE[0].login,
        "target_link_uri": GATEWAY + "/lti/launch/",
        "client_id": demo.LMS_CLIENT_ID,
        "lti_deployment_id": demo.LMS_DEPLOYMENT_ID,
    }
    for person, roles in (("demo-ben", LEARNER), ("demo-clara", INSTRUCTOR)):
        answer = httpx.get(lms.auth_url, params=_auth_query(person))
        assert answer.status_code == 200
        action, posted = _page_form(answer.text)
        assert action == GATEWAY + "/lti/launch/" and posted["state"] == "s-1"
        claims = jwt.decode(posted["id_token"], options={"verify_signature": False})
        assert claims["sub"] == person and claims[demo_claim("roles")] == roles
        assert claims[demo_claim("context")] == {
            "id": demo.COURSE.context_id,
            "label": demo.COURSE.code,
            "title": demo.COURSE.title,
        }
        assert claims["name"] == demo.person(person).name


@pytest.mark.parametrize("hint", ["demo-david", "nobody", "demo-ben\x00", "x" * 5000])
def test_the_lms_launches_no_one_it_does_not_list(lms, hint):
    lms.reset()
    answer = httpx.get(lms.auth_url, params=_auth_query(hint))
    assert answer.status_code == 403 and answer.json() == {"error": "login_required"}
    assert not lms.issued


def test_the_lms_without_a_tool_says_how_to_start_it():
    with serve(DevLms()) as app:
        page = httpx.get(app.issuer + "/")
    assert page.status_code == 200 and "--gateway-url" in page.text and "<form" not in page.text


def test_the_test_fakes_have_no_page():
    with serve(OidcFake()) as idp, serve(LtiFake()) as lms:
        assert httpx.get(idp.issuer + "/").status_code == 404
        assert httpx.post(idp.issuer + "/authorize", data={}).status_code == 404
        assert httpx.get(lms.issuer + "/").status_code == 404


def _auth_query(login_hint: str) -> dict[str, str]:
    return {
        "client_id": demo.LMS_CLIENT_ID,
        "redirect_uri": GATEWAY + "/lti/launch/",
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "login_hint": login_hint,
        "state": "s-1",
        "nonce": "n-1",
    }


def demo_claim(name: str) -> str:
    return "https://purl.imsglobal.org/spec/lti/claim/" + name
