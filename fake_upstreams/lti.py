"""A small LTI 1.3 platform (an LMS) for the LTI tests (docs/lti.md): a JWKS with an RSA and
an EC P-256 key, and an OIDC authentication endpoint that answers the tool's login redirect
like Moodle or Canvas do, with the auto-posting HTML form that carries the signed id_token and
the state to the tool's launch URL (the test says who launches next, with which roles and in
which course). The last form is also kept (`last_form`) for tests that POST it themselves.
DevLms, at the end, is the first run's LMS simulator: the same platform with a course page.

Switches for the hostile cases (`failure`): "wrong_key" (signed by a key not in the JWKS,
under a kid that is), "expired", "wrong_aud", "unknown_deployment", "replayed_nonce" (the
nonce of the platform's first launch instead of this one's), "down" (503s). `clock` is
injectable (seconds).
"""

from __future__ import annotations

import html
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from . import demo, devpages
from .oidc import sign_raw
from .server import FakeUpstream, RecordedRequest, Response, json_response

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
INSTRUCTOR = [LIS + "membership#Instructor", LIS + "institution/person#Faculty"]
LEARNER = [LIS + "membership#Learner", LIS + "institution/person#Student"]


class _AsciiEncoder(json.JSONEncoder):
    """JSON with \\u escapes: a hostile claim (a lone surrogate) is still sent, as a real
    platform's JSON encoder would."""

    def __init__(self, **kwargs: Any):
        kwargs["ensure_ascii"] = True
        super().__init__(**kwargs)


@dataclass
class NextLaunch:
    sub: str
    roles: list[str] | Any
    context: dict[str, Any] | Any
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)


class LtiFake(FakeUpstream):
    name = "lti"
    base_path = ""
    ROUTES = [
        ("GET", r"/jwks", "jwks"),
        ("GET", r"/auth", "auth"),
        ("POST", r"/auth", "auth"),
    ]
    PUBLIC = frozenset({"jwks", "auth"})
    KNOBS = {
        "alg": "RS256",  # or "ES256"
        "failure": None,  # see the module's docstring
        "token_lifetime": 300,
    }

    def __init__(self, client_id: str = "gw-tool", deployment_id: str = "dep-1", clock=None):
        super().__init__()
        self.client_id = client_id
        self.deployment_id = deployment_id
        self.clock = clock or time.time
        self.rsa = RSAKey.generate_key(2048, parameters={"kid": "lti-rsa", "use": "sig"})
        self.ec = ECKey.generate_key("P-256", parameters={"kid": "lti-ec", "use": "sig"})
        self.rogue_rsa = RSAKey.generate_key(2048, parameters={"kid": "lti-rsa"})
        self.rogue_ec = ECKey.generate_key("P-256", parameters={"kid": "lti-ec"})
        self._state_lock = threading.Lock()
        self._next: list[NextLaunch] = []
        self.issued: list[dict[str, Any]] = []
        self.last_form: dict[str, str] | None = None

    @property
    def issuer(self) -> str:
        assert self.origin is not None
        return self.origin

    @property
    def jwks_url(self) -> str:
        return self.issuer + "/jwks"

    @property
    def auth_url(self) -> str:
        return self.issuer + "/auth"

    def launch_next(
        self,
        sub: str,
        /,
        *,
        roles: list[str] | Any = None,
        context: dict[str, Any] | Any = None,
        raw: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """Who the next visit of /auth launches (a queue); `extra` claims are added to the
        id_token or replace its own (`aud`, `nonce`, even `sub`); `raw` ones too, as JSON
        text (`{"exp": "1e400"}`: fake_upstreams.oidc.sign_raw)."""
        if roles is None:
            roles = list(LEARNER)
        if context is None:
            context = {"id": "ctx-1", "label": "CS101", "title": "Programming 1"}
        with self._state_lock:
            self._next.append(NextLaunch(sub, roles, context, extra, dict(raw or {})))

    def _reset_state(self) -> None:
        with self._state_lock:
            self._next.clear()
            self.issued.clear()
            self.last_form = None

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return json_response({"error": message or "server_error", **extra}, status)

    # -- endpoints ---------------------------------------------------------------------

    def jwks(self, request: RecordedRequest) -> Response:
        if self.failure == "down":
            return Response(503, b"Service Unavailable", [("content-type", "text/plain")])
        return json_response(
            {"keys": [self.rsa.as_dict(private=False), self.ec.as_dict(private=False)]}
        )

    def auth(self, request: RecordedRequest) -> Response:
        query = request.query
        if request.method == "POST":
            from urllib.parse import parse_qsl

            query = dict(parse_qsl(request.text, keep_blank_values=True))
        redirect_uri = query.get("redirect_uri", "")
        if (
            query.get("client_id") != self.client_id
            or not redirect_uri
            or query.get("scope") != "openid"
            or query.get("response_type") != "id_token"
            or query.get("response_mode") != "form_post"
            or query.get("prompt") != "none"
            or not query.get("login_hint")
            or not query.get("state")
            or not query.get("nonce")
        ):
            return self.error(400, "invalid_request")
        launch = self.next_launch(query)
        if launch is None:
            return self.error(403, "login_required")
        token = self.id_token(launch, nonce=query["nonce"])
        form = {"action": redirect_uri, "id_token": token, "state": query["state"]}
        self.last_form = form
        page = (
            "<!doctype html><html><head><title>Launching…</title></head>"
            '<body onload="document.forms[0].submit()">'
            f'<form method="post" action="{html.escape(redirect_uri)}">'
            f'<input type="hidden" name="id_token" value="{html.escape(token)}">'
            f'<input type="hidden" name="state" value="{html.escape(query["state"])}">'
            "<noscript><button>Continue</button></noscript></form></body></html>"
        )
        return Response(200, page.encode(), [("content-type", "text/html; charset=utf-8")])

    def next_launch(self, query: dict[str, str]) -> NextLaunch | None:
        """Who this authentication request launches: the next of the queue."""
        with self._state_lock:
            return self._next.pop(0) if self._next else None

    def id_token(self, launch: NextLaunch, *, nonce: str) -> str:
        now = int(self.clock())
        with self._state_lock:
            first_nonce = self.issued[0]["nonce"] if self.issued else nonce
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": launch.sub,
            "aud": "someone-else" if self.failure == "wrong_aud" else self.client_id,
            "azp": "someone-else" if self.failure == "wrong_aud" else self.client_id,
            "iat": now - 400 if self.failure == "expired" else now,
            "exp": now - 100 if self.failure == "expired" else now + self.token_lifetime,
            "nonce": first_nonce if self.failure == "replayed_nonce" else nonce,
            "name": f"Person {launch.sub}",
            CLAIM + "message_type": "LtiResourceLinkRequest",
            CLAIM + "version": "1.3.0",
            CLAIM + "deployment_id": "not-registered"
            if self.failure == "unknown_deployment"
            else self.deployment_id,
            CLAIM + "target_link_uri": "",
            CLAIM + "resource_link": {"id": "rl-1", "title": "AI gateway"},
            CLAIM + "roles": launch.roles,
            CLAIM + "context": launch.context,
        }
        claims.update(launch.extra)
        with self._state_lock:
            self.issued.append(dict(claims))
        return self.sign(claims, launch.raw)

    def sign(self, claims: dict[str, Any], raw: dict[str, str] | None = None) -> str:
        """`claims` signed as this platform does (or with the rogue key: "wrong_key")."""
        if self.alg == "ES256":
            key = self.rogue_ec if self.failure == "wrong_key" else self.ec
            header = {"alg": "ES256", "kid": "lti-ec", "typ": "JWT"}
        else:
            key = self.rogue_rsa if self.failure == "wrong_key" else self.rsa
            header = {"alg": "RS256", "kid": "lti-rsa", "typ": "JWT"}
        if raw:
            return sign_raw(header, claims, raw, key)
        return jwt.encode(header, claims, key, encoder_cls=_AsciiEncoder)


ROLES = {"student": LEARNER, "teacher": INSTRUCTOR}


class DevLms(LtiFake):
    """The LMS simulator of a first run (`python -m fake_upstreams lti`, started by
    scripts/run.sh): the same LTI 1.3 platform, with a page showing the demo course and a
    button per person (fake_upstreams/demo.py) that opens the gateway as an LMS does (the login
    initiation, then this platform's signed launch of that person, found by the `login_hint`
    as Moodle and Canvas find theirs). A launch queued with `launch_next` still goes first.
    Not for real use: anyone who reaches the page launches as anyone on it."""

    ROUTES = [*LtiFake.ROUTES, ("GET", r"/", "home")]
    PUBLIC = LtiFake.PUBLIC | {"home"}

    def __init__(
        self,
        client_id: str = demo.LMS_CLIENT_ID,
        deployment_id: str = demo.LMS_DEPLOYMENT_ID,
        *,
        tool_url: str | None = None,
        people: tuple[demo.DemoPerson, ...] = demo.PEOPLE,
        course: demo.DemoCourse = demo.COURSE,
        clock=None,
    ):
        super().__init__(client_id, deployment_id, clock)
        self.tool_url = tool_url.rstrip("/") if tool_url else None
        self.people = tuple(p for p in people if p.role in ROLES)
        self.course = course

    def next_launch(self, query: dict[str, str]) -> NextLaunch | None:
        queued = super().next_launch(query)
        if queued is not None:
            return queued
        chosen = next((p for p in self.people if p.login == query.get("login_hint")), None)
        if chosen is None:
            return None
        context = {"id": self.course.context_id, "label": self.course.code}
        context["title"] = self.course.title
        return NextLaunch(
            chosen.login,
            list(ROLES[chosen.role]),
            context,
            {"name": chosen.name, "email": chosen.email},
        )

    def home(self, request: RecordedRequest) -> Response:
        course = self.course
        title = html.escape(f"{course.title} ({course.code})")
        heading = f"<h1>Demo LMS</h1><h2>{title}</h2>"
        if self.tool_url is None:
            body = (
                heading + "<p>No tool: start it with <code>--gateway-url</code> (the gateway).</p>"
            )
            return devpages.page("Demo LMS", demo.LMS_BANNER, body)
        rows = "".join(
            f"<tr><td>{html.escape(p.name)}</td><td>{html.escape(p.role)}</td><td>"
            + devpages.button_form(
                self.tool_url + "/lti/login/",
                self._login_initiation(p),
                f"Launch as {p.name} ({p.role})",
            )
            + "</td></tr>"
            for p in self.people
        )
        body = (
            heading + '<p class="note">The course has the gateway as an external tool (LTI 1.3). A '
            "button opens it the way a real LMS does: the gateway signs the person in and shows "
            "the course.</p>"
            '<table><caption class="note">Open the tool as</caption><thead><tr>'
            '<th scope="col">Name</th><th scope="col">Role in the course</th>'
            '<th scope="col"><span class="note">Launch</span></th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
            f'<p class="note">Issuer: {html.escape(self.issuer)}</p>'
        )
        return devpages.page("Demo LMS - " + course.title, demo.LMS_BANNER, body)

    def _login_initiation(self, person: demo.DemoPerson) -> dict[str, str]:
        """What Moodle posts to the tool's login URL when a course's link is clicked."""
        assert self.tool_url is not None
        return {
            "iss": self.issuer,
            "login_hint": person.login,
            "target_link_uri": self.tool_url + "/lti/launch/",
            "client_id": self.client_id,
            "lti_deployment_id": self.deployment_id,
        }
