"""A small OpenID Connect provider for the SSO tests (docs/sso.md): discovery, a JWKS with an
RSA and an EC P-256 key, an authorize endpoint without any page (the test says who signs in
next; DevIdentityProvider, at the end, is the first run's with a sign-in page), and a token
endpoint that checks what a real one checks (client id and secret, basic or post; the redirect
URI; the PKCE S256 verifier; a code used once and within its lifetime) and
answers an id_token signed RS256 or ES256. `more_clients` registers other applications of the
same IdP (client id -> secret: Open WebUI beside the gateway, tests/clients/test_open_webui.py);
each code is bound to the client that asked for it and its id_token's `aud` is that client.

Switches for the hostile cases (`failure`): "down" (every answer a 503), "garbage" (the
discovery document and the token answer are not JSON), "wrong_key" (the id_token is signed by a
key not in the JWKS, under a kid that is), "wrong_aud", "wrong_nonce", "wrong_issuer",
"expired", "huge" (a discovery document of several MB), "userinfo_wrong_sub" (the userinfo
answer is about another subject), "userinfo_down" (userinfo answers 503), "userinfo_huge" (a
userinfo answer of 1 MB). `clock` is injectable
(seconds).

The userinfo endpoint answers the claims of the access token's user. `claims_at = "userinfo"`
is panva's oidc-provider's default with an access token: the e-mail and the groups at userinfo
only, never in the id_token. `raw` claims of `sign_in_next` go into the id_token's payload as
the JSON text given (`{"exp": "1e400"}`), which no JSON encoder writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import parse_qsl, urlencode

from joserfc import jws, jwt
from joserfc.jwk import ECKey, RSAKey

from . import demo, devpages
from .server import FakeUpstream, RecordedRequest, Response, json_response


def sign_raw(header: dict[str, Any], claims: dict[str, Any], raw: dict[str, str], key) -> str:
    """A JWS whose payload holds `claims` and `raw` claims as the JSON text given: what a JSON
    encoder never writes (`1e400`, `NaN`), as a hostile or broken IdP may send it."""
    text = json.dumps({k: v for k, v in claims.items() if k not in raw})
    spliced = ", ".join(f"{json.dumps(k)}: {v}" for k, v in raw.items())
    payload = text[:-1] + (", " if len(text) > 2 else "") + spliced + "}"
    return jws.serialize_compact(header, payload.encode(), key)


@dataclass
class NextUser:
    sub: str
    email: str | None = None
    email_verified: bool | None = True
    groups: list[str] | str | None = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)


@dataclass
class _Code:
    user: NextUser
    client_id: str
    redirect_uri: str
    nonce: str | None
    challenge: str
    issued_at: float


class OidcFake(FakeUpstream):
    name = "oidc"
    base_path = ""
    ROUTES = [
        ("GET", r"/\.well-known/openid-configuration", "discovery"),
        ("GET", r"/jwks", "jwks"),
        ("GET", r"/authorize", "authorize"),
        ("POST", r"/token", "token"),
        ("GET", r"/userinfo", "userinfo"),
    ]
    PUBLIC = frozenset({"discovery", "jwks", "authorize", "token", "userinfo"})
    KNOBS = {
        "alg": "RS256",  # or "ES256"
        "failure": None,  # see the module's docstring
        "code_lifetime": 60.0,  # seconds a code may wait for its exchange
        "auth_methods": ["client_secret_basic", "client_secret_post"],
        "token_lifetime": 300,
        "claims_at": "id_token",  # or "userinfo": the e-mail and the groups there only
    }

    def __init__(
        self,
        client_id: str = "gateway",
        client_secret: str = "s3cret",
        clock=None,
        more_clients: dict[str, str] | None = None,
    ):
        super().__init__()
        self.client_id = client_id
        self.client_secret = client_secret
        self.clients = {**(more_clients or {}), client_id: client_secret}
        self.clock = clock or time.time
        self.rsa = RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "use": "sig"})
        self.ec = ECKey.generate_key("P-256", parameters={"kid": "ec-1", "use": "sig"})
        # The attacker's keys: the same kids, not published.
        self.rogue_rsa = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})
        self.rogue_ec = ECKey.generate_key("P-256", parameters={"kid": "ec-1"})
        self._state_lock = threading.Lock()
        self._next: list[NextUser] = []
        self._codes: dict[str, _Code] = {}
        self.used_codes: set[str] = set()
        self.issued: list[dict[str, Any]] = []  # the claims of every id_token handed out
        self._access: dict[str, NextUser] = {}  # access token -> its user (for userinfo)

    @property
    def issuer(self) -> str:
        assert self.origin is not None
        return self.origin

    def sign_in_next(
        self,
        sub: str,
        /,
        *,
        email: str | None = None,
        email_verified: bool | None = True,
        groups: list[str] | str | None = None,
        raw: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """Who the next visit of /authorize signs in (a queue: one per visit); `extra` claims
        are added to the id_token, or replace its own (`aud`, `iat`, even `sub`); `raw` ones
        too, as JSON text."""
        with self._state_lock:
            self._next.append(
                NextUser(sub, email, email_verified, groups or [], extra, dict(raw or {}))
            )

    def _reset_state(self) -> None:
        with self._state_lock:
            self._next.clear()
            self._codes.clear()
            self.used_codes.clear()
            self.issued.clear()
            self._access.clear()

    def error(self, status: int, message: str | None = None, **extra: Any) -> Response:
        return json_response({"error": message or "server_error", **extra}, status)

    def _down(self) -> Response | None:
        if self.failure == "down":
            return Response(503, b"Service Unavailable", [("content-type", "text/plain")])
        return None

    # -- endpoints ---------------------------------------------------------------------

    def discovery(self, request: RecordedRequest) -> Response:
        down = self._down()
        if down is not None:
            return down
        if self.failure == "garbage":
            return Response(200, b"<html>not json", [("content-type", "application/json")])
        document = {
            "issuer": "https://elsewhere.example"
            if self.failure == "wrong_issuer"
            else self.issuer,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "jwks_uri": self.issuer + "/jwks",
            "userinfo_endpoint": self.issuer + "/userinfo",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": list(self.auth_methods),
            "scopes_supported": ["openid", "email", "profile"],
        }
        if self.failure == "huge":
            document["padding"] = "x" * (3 * 1024 * 1024)
        return json_response(document)

    def jwks(self, request: RecordedRequest) -> Response:
        down = self._down()
        if down is not None:
            return down
        keys = [self.rsa.as_dict(private=False), self.ec.as_dict(private=False)]
        return json_response({"keys": keys})

    def authorize(self, request: RecordedRequest) -> Response:
        query = request.query
        refused = self.authorize_refusal(query)
        if refused is not None:
            return refused
        with self._state_lock:
            user = self._next.pop(0) if self._next else None
        if user is None:
            return self._redirect(
                query["redirect_uri"], error="access_denied", state=query.get("state")
            )
        return self.code_redirect(user, query)

    def authorize_refusal(self, query: dict[str, str]) -> Response | None:
        """Why an authorization request is refused (an error, or the error sent back to the
        client's redirect URI), or None."""
        redirect_uri = query.get("redirect_uri", "")
        client_id = query.get("client_id", "")
        if client_id not in self.clients or not redirect_uri:
            return self.error(400, "invalid_request", error_description="unknown client")
        if (
            query.get("response_type") != "code"
            or "openid" not in query.get("scope", "").split()
            or query.get("code_challenge_method") != "S256"
            or not query.get("code_challenge")
        ):
            return self._redirect(redirect_uri, error="invalid_request", state=query.get("state"))
        return None

    def code_redirect(self, user: NextUser, query: dict[str, str]) -> Response:
        """`user` signed in: a code for them, sent back to the client's redirect URI."""
        code = secrets.token_urlsafe(24)
        with self._state_lock:
            self._codes[code] = _Code(
                user=user,
                client_id=query["client_id"],
                redirect_uri=query["redirect_uri"],
                nonce=query.get("nonce"),
                challenge=query["code_challenge"],
                issued_at=self.clock(),
            )
        return self._redirect(query["redirect_uri"], code=code, state=query.get("state"))

    def _redirect(self, redirect_uri: str, **params: str | None) -> Response:
        query = urlencode({k: v for k, v in params.items() if v is not None})
        separator = "&" if "?" in redirect_uri else "?"
        return Response(302, b"", [("location", f"{redirect_uri}{separator}{query}")])

    def token(self, request: RecordedRequest) -> Response:
        down = self._down()
        if down is not None:
            return down
        form = dict(parse_qsl(request.text, keep_blank_values=True))
        client_id = self._client_authenticated(request, form)
        if client_id is None:
            return self.error(401, "invalid_client")
        if form.get("grant_type") != "authorization_code":
            return self.error(400, "unsupported_grant_type")
        grant = self._redeem(form)
        if isinstance(grant, Response):
            return grant
        if grant.client_id != client_id:
            return self.error(400, "invalid_grant", error_description="another client's code")
        if self.failure == "garbage":
            return Response(200, b"{not json", [("content-type", "application/json")])
        access_token = secrets.token_urlsafe(24)
        with self._state_lock:
            self._access[access_token] = grant.user
        return json_response(
            {
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": self.id_token(grant),
            }
        )

    def _client_authenticated(self, request: RecordedRequest, form: dict[str, str]) -> str | None:
        """The client whose id and secret the form or (winning) HTTP Basic holds, if ours."""
        client_id, secret = form.get("client_id"), form.get("client_secret")
        basic = request.headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            try:
                pair = base64.b64decode(basic[6:]).decode()
            except ValueError:
                return None
            client_id, _, secret = pair.partition(":")
        known = client_id is not None and self.clients.get(client_id) is not None
        return client_id if known and self.clients[client_id] == secret else None

    def _redeem(self, form: dict[str, str]) -> _Code | Response:
        """The grant of the form's code, used up whatever follows; or why it is refused."""
        code = form.get("code", "")
        with self._state_lock:
            grant = self._codes.pop(code, None)
            reused = code in self.used_codes
            self.used_codes.add(code)
        if grant is None or reused:
            return self.error(400, "invalid_grant", error_description="unknown or used code")
        if self.clock() - grant.issued_at > self.code_lifetime:
            return self.error(400, "invalid_grant", error_description="code expired")
        if form.get("redirect_uri") != grant.redirect_uri:
            return self.error(400, "invalid_grant", error_description="redirect_uri differs")
        verifier = form.get("code_verifier", "")
        digest = hashlib.sha256(verifier.encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant.challenge:
            return self.error(400, "invalid_grant", error_description="PKCE verifier")
        return grant

    def id_token(self, grant: _Code) -> str:
        now = int(self.clock())
        user = grant.user
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": user.sub,
            "aud": "someone-else" if self.failure == "wrong_aud" else grant.client_id,
            "iat": now - 400 if self.failure == "expired" else now,
            "exp": now - 100 if self.failure == "expired" else now + self.token_lifetime,
        }
        if grant.nonce is not None:
            claims["nonce"] = "not-the-nonce" if self.failure == "wrong_nonce" else grant.nonce
        if self.claims_at != "userinfo":
            claims |= self._profile(user)
        claims.update(user.extra)
        with self._state_lock:
            self.issued.append(dict(claims))
        if self.alg == "ES256":
            key = self.rogue_ec if self.failure == "wrong_key" else self.ec
            header = {"alg": "ES256", "kid": "ec-1", "typ": "JWT"}
        else:
            key = self.rogue_rsa if self.failure == "wrong_key" else self.rsa
            header = {"alg": "RS256", "kid": "rsa-1", "typ": "JWT"}
        if not user.raw:
            return jwt.encode(header, claims, key)
        return sign_raw(header, claims, user.raw, key)

    @staticmethod
    def _profile(user: NextUser) -> dict[str, Any]:
        """The claims of the `email` and `groups` scopes."""
        claims: dict[str, Any] = {}
        if user.email is not None:
            claims["email"] = user.email
            if user.email_verified is not None:
                claims["email_verified"] = user.email_verified
        if user.groups:
            claims["groups"] = user.groups
        return claims

    def userinfo(self, request: RecordedRequest) -> Response:
        down = self._down()
        if down is not None or self.failure == "userinfo_down":
            return Response(503, b"Service Unavailable", [("content-type", "text/plain")])
        bearer = request.headers.get("authorization", "")
        with self._state_lock:
            user = self._access.get(bearer[7:]) if bearer.lower().startswith("bearer ") else None
        if user is None:
            return Response(401, b"", [("www-authenticate", 'Bearer error="invalid_token"')])
        sub = "someone-else" if self.failure == "userinfo_wrong_sub" else user.sub
        answer = {"sub": sub, **self._profile(user)}
        if self.failure == "userinfo_huge":
            answer["padding"] = "x" * (1024 * 1024)
        return json_response(answer)


# The fields of an authorization request the sign-in page carries to its POST.
_AUTHORIZE_FIELDS = (
    "client_id",
    "redirect_uri",
    "response_type",
    "scope",
    "state",
    "nonce",
    "code_challenge",
    "code_challenge_method",
)


class DevIdentityProvider(OidcFake):
    """The development identity provider of a first run (`python -m fake_upstreams oidc`,
    started by scripts/run.sh): the same OpenID Connect provider, whose authorize endpoint
    shows a page listing the demo people (fake_upstreams/demo.py) under a banner saying what it
    is, and signs in whoever is chosen (code flow with PKCE, as above). A person queued with
    `sign_in_next` still goes first, so tests can drive it like OidcFake. Not for real use:
    anyone who reaches the page signs in as anyone on it."""

    ROUTES = [
        *OidcFake.ROUTES,
        ("POST", r"/authorize", "choose"),
        ("GET", r"/", "home"),
    ]
    PUBLIC = OidcFake.PUBLIC | {"choose", "home"}

    def __init__(
        self,
        client_id: str = demo.IDP_CLIENT_ID,
        client_secret: str = demo.IDP_CLIENT_SECRET,
        *,
        people: tuple[demo.DemoPerson, ...] = demo.PEOPLE,
        gateway_url: str | None = None,
        clock=None,
    ):
        super().__init__(client_id, client_secret, clock)
        self.people = people
        # With the gateway's address known, a code goes back to it only (no open redirect).
        self.gateway_url = gateway_url.rstrip("/") if gateway_url else None

    def authorize_refusal(self, query: dict[str, str]) -> Response | None:
        refused = super().authorize_refusal(query)
        if refused is None and self.gateway_url is not None:
            redirect_uri = query["redirect_uri"]
            if not redirect_uri.startswith(self.gateway_url + "/"):
                return self.error(400, "invalid_request", error_description="unknown redirect_uri")
        return refused

    def authorize(self, request: RecordedRequest) -> Response:
        with self._state_lock:
            queued = bool(self._next)
        refused = self.authorize_refusal(request.query)
        if queued or refused is not None:
            return super().authorize(request)
        return self._sign_in_page(request.query)

    def choose(self, request: RecordedRequest) -> Response:
        """The sign-in page's POST: the person chosen is signed in."""
        form = dict(parse_qsl(request.text, keep_blank_values=True))
        refused = self.authorize_refusal(form)
        if refused is not None:
            return refused
        chosen = next((p for p in self.people if p.login == form.get("login")), None)
        if chosen is None:
            return devpages.page("Unknown person", demo.BANNER, "<h1>No such person here</h1>", 400)
        user = NextUser(
            chosen.login,
            email=chosen.email,
            groups=chosen.groups,
            extra={"name": chosen.name, "preferred_username": chosen.email},
        )
        return self.code_redirect(user, form)

    def _sign_in_page(self, query: dict[str, str]) -> Response:
        fields = {name: query[name] for name in _AUTHORIZE_FIELDS if name in query}
        rows = "".join(
            f"<tr><td>{escape(p.name)}</td><td>{escape(p.email)}</td><td>{escape(p.role)}</td>"
            "<td>"
            + devpages.button_form(
                "/authorize", {**fields, "login": p.login}, f"Sign in as {p.name}"
            )
            + "</td></tr>"
            for p in self.people
        )
        body = (
            "<h1>Sign in to the gateway</h1>"
            '<p class="note">Choose who you are. This identity provider asks no password: '
            "it exists to try the gateway on this computer, with made-up people.</p>"
            '<table><caption class="note">The demo people</caption><thead><tr>'
            '<th scope="col">Name</th><th scope="col">E-mail</th><th scope="col">Role</th>'
            '<th scope="col"><span class="note">Sign in</span></th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
        return devpages.page("Sign in - development identity provider", demo.BANNER, body)

    def home(self, request: RecordedRequest) -> Response:
        start = (
            f'<a href="{escape(self.gateway_url)}/portal/">{escape(self.gateway_url)}/portal/</a>'
            if self.gateway_url
            else "the gateway's login page"
        )
        rows = "".join(
            f"<tr><td>{escape(p.name)}</td><td>{escape(p.email)}</td><td>{escape(p.role)}</td></tr>"
            for p in self.people
        )
        body = (
            "<h1>Development identity provider</h1>"
            f"<p>Sign-in starts at the gateway: open {start} and choose "
            f"&ldquo;Sign in with {escape(demo.INSTITUTION)}&rdquo;. This page then lets you "
            "pick one of these people.</p>"
            '<table><caption class="note">The demo people</caption><thead><tr>'
            '<th scope="col">Name</th><th scope="col">E-mail</th><th scope="col">Role</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>"
            f'<p class="note">Issuer: {escape(self.issuer)}</p>'
        )
        return devpages.page("Development identity provider", demo.BANNER, body)
