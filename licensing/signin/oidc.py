"""The OpenID Connect protocol, as a relying party (docs/sso.md): discovery, the signing keys,
the authorization URL (PKCE S256, `state`, `nonce`), the token request and the id_token check.

Authlib and joserfc (its JOSE library) do the cryptography and the claim rules; every HTTP
request is ours, through the SSRF guard of core/outbound.py (an issuer URL is set by a
superuser, and what its discovery document names is set by whoever runs the IdP). Like the
JWKS of JWT issuers (licensing/access/jwks.py), a discovery document is fetched at most once a
minute whatever browsers ask, and a good one is used for an hour.

Every failure is an `OidcError` with a machine-readable `reason` (the audit row's) and a
message for people; nothing here raises anything else on a stranger's answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlencode, urlsplit

from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from django.utils.translation import gettext_noop
from joserfc import jwt
from joserfc.errors import (
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import ECKey, RSAKey

from core.outbound import Refused, fetch_outbound_json, post_outbound_form
from core.text import is_storable_text

from ..access.jwks import MAX_KEYS, JwksCache
from .claims import email_claim_problem, time_claims_problem, token_header

logger = logging.getLogger("gateway")

ALGORITHMS = ["RS256", "ES256"]  # never "none", never HS* (a client secret is no signing key)
SCOPES = "openid email profile"
LEEWAY = 60  # seconds of clock difference tolerated on exp/iat/nbf
MIN_INTERVAL = 60.0  # seconds between two discovery fetches of one issuer after a failure
LIFESPAN = 3600.0  # seconds a good discovery document is used
MAX_BYTES = 64 * 1024  # discovery and token answers (a JWKS: jwks.MAX_BYTES)
TIMEOUT = 5.0  # seconds for one whole request to the IdP
MAX_TOKEN_LENGTH = 16 * 1024  # an id_token longer than this is refused before parsing


class OidcError(Exception):
    """A sign-in that cannot go on: `reason` for the audit log, `message` for people."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Metadata:
    """What the gateway uses of an issuer's discovery document."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    token_auth_methods: tuple[str, ...]
    userinfo_endpoint: str | None = None


@dataclass
class _Entry:
    metadata: Metadata | None = None
    fetched_at: float | None = None
    tried_at: float | None = None
    error: OidcError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _browser_url(value: Any, name: str) -> str:
    # The authorization endpoint is visited by the browser, not by the gateway: no address
    # check, but an absolute http(s) URL without controls (no javascript:, no header split).
    if (
        not isinstance(value, str)
        or len(value) > 2000
        or not value.isascii()
        or any(c <= " " or c == "\x7f" for c in value)
    ):
        raise OidcError("discovery_invalid", f"The discovery document's {name} is not a URL")
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise OidcError("discovery_invalid", f"The discovery document's {name} is not a URL")
    return value


def parse_discovery(issuer: str, document: Any) -> Metadata:
    """The usable part of a discovery document, or OidcError (`discovery_invalid`)."""
    if not isinstance(document, dict):
        raise OidcError("discovery_invalid", "The discovery document is not a JSON object")
    if document.get("issuer") != issuer:
        # OpenID Connect Discovery 4.3: the document must name the issuer it was fetched for.
        raise OidcError("discovery_invalid", "The discovery document names another issuer")
    methods = document.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
    if not isinstance(methods, list):
        methods = ["client_secret_basic"]
    return Metadata(
        issuer=issuer,
        authorization_endpoint=_browser_url(
            document.get("authorization_endpoint"), "authorization_endpoint"
        ),
        token_endpoint=_browser_url(document.get("token_endpoint"), "token_endpoint"),
        jwks_uri=_browser_url(document.get("jwks_uri"), "jwks_uri"),
        token_auth_methods=tuple(m for m in methods if isinstance(m, str))[:20],
        userinfo_endpoint=(
            _browser_url(document["userinfo_endpoint"], "userinfo_endpoint")
            if document.get("userinfo_endpoint") is not None
            else None
        ),
    )


class DiscoveryCache:
    """Discovery documents per issuer; `clock` (monotonic seconds) and `fetch` injectable."""

    def __init__(self, clock=time.monotonic, fetch=None):
        self.clock = clock
        self.fetch = fetch or (
            lambda url: fetch_outbound_json(url, max_bytes=MAX_BYTES, timeout=TIMEOUT)
        )
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def metadata_for(self, issuer: str) -> Metadata:
        with self._lock:
            entry = self._entries.setdefault(issuer, _Entry())
        with entry.lock:
            now = self.clock()
            if entry.metadata is not None and now - (entry.fetched_at or 0) < LIFESPAN:
                return entry.metadata
            if entry.tried_at is not None and now - entry.tried_at < MIN_INTERVAL:
                if entry.metadata is not None:
                    return entry.metadata  # an old good document beats none
                raise entry.error or OidcError("idp_unavailable", "The IdP is not reachable")
            entry.tried_at = now
            try:
                url = issuer.rstrip("/") + "/.well-known/openid-configuration"
                entry.metadata = parse_discovery(issuer, self.fetch(url))
            except Refused as exc:
                logger.warning(
                    "OIDC discovery of %s failed (%s): %s", issuer, exc.code, exc.message
                )
                entry.error = OidcError("idp_unavailable", f"Discovery failed: {exc.message}")
                if entry.metadata is None:
                    raise entry.error from None
                return entry.metadata
            except OidcError as exc:
                logger.warning("OIDC discovery of %s unusable: %s", issuer, exc.message)
                entry.error = exc
                raise
            entry.fetched_at, entry.error = now, None
            return entry.metadata

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _parse_jwks(document: Any) -> dict[str | None, list]:
    """{kid: [joserfc keys]}: RSA and EC signing keys only (never a symmetric one)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise Refused("invalid_jwks", gettext_noop("The answer is not a JWK set (no `keys` list)"))
    keys: dict[str | None, list] = {}
    for jwk in document["keys"][:MAX_KEYS]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        kty = jwk.get("kty")
        if kty not in ("RSA", "EC"):
            continue
        try:
            key = RSAKey.import_key(jwk) if kty == "RSA" else ECKey.import_key(jwk)
        except Exception:  # noqa: BLE001 (whatever a hostile key makes the parser raise)
            continue
        keys.setdefault(kid, []).append(key)
    if not keys:
        raise Refused("invalid_jwks", gettext_noop("The JWK set holds no usable signing key"))
    return keys


discovery_cache = DiscoveryCache()
jwks_cache = JwksCache(parse=_parse_jwks)


# --- the flow ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """What the browser's round trip to the IdP must bring back (kept in the session)."""

    state: str
    nonce: str
    verifier: str


def new_pending() -> Pending:
    return Pending(
        state=secrets.token_urlsafe(32),
        nonce=secrets.token_urlsafe(32),
        verifier=secrets.token_urlsafe(64),  # 86 characters: RFC 7636 asks 43 to 128
    )


def authorization_url(
    metadata: Metadata, *, client_id: str, redirect_uri: str, pending: Pending
) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": SCOPES,
        "state": pending.state,
        "nonce": pending.nonce,
        "code_challenge": create_s256_code_challenge(pending.verifier),
        "code_challenge_method": "S256",
    }
    separator = "&" if "?" in metadata.authorization_endpoint else "?"
    return metadata.authorization_endpoint + separator + urlencode(params)


def token_request(
    metadata: Metadata,
    *,
    code: str,
    redirect_uri: str,
    verifier: str,
    client_id: str,
    client_secret: str,
) -> dict[str, Any]:
    """Exchange the code at the token endpoint (client_secret_basic unless the IdP supports
    only client_secret_post); the answer's JSON object, or OidcError."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    headers: dict[str, str] = {}
    basic = "client_secret_basic" in metadata.token_auth_methods or (
        "client_secret_post" not in metadata.token_auth_methods
    )
    if basic:
        # RFC 6749 2.3.1: both parts form-urlencoded before the Basic encoding.
        pair = f"{_form(client_id)}:{_form(client_secret)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    else:
        data |= {"client_id": client_id, "client_secret": client_secret}
    try:
        answer = post_outbound_form(
            metadata.token_endpoint,
            data=data,
            max_bytes=MAX_BYTES,
            timeout=TIMEOUT,
            headers=headers,
        )
    except Refused as exc:
        logger.warning(
            "OIDC token request to %s refused (%s): %s",
            metadata.token_endpoint,
            exc.code,
            exc.message,
        )
        reason = "token_request_refused" if exc.code == "http_error" else "idp_unavailable"
        raise OidcError(reason, f"The IdP's token endpoint: {exc.message}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("id_token"), str):
        raise OidcError("token_response_invalid", "The IdP's token answer holds no id_token")
    return answer


def _form(value: str) -> str:
    return quote_plus(value)


def verify_id_token(
    id_token: str,
    *,
    metadata: Metadata,
    client_id: str,
    nonce: str,
    access_token: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The id_token's claims after every check (signature with the issuer's JWKS, RS256 or
    ES256; iss, aud, azp, exp, iat, nonce), or OidcError with the reason."""
    header = _id_token_header(id_token)
    token = _id_token_signed(id_token, header, metadata)
    checked_at = now if now is not None else time.time()
    problem = time_claims_problem(token.claims, now=checked_at) or email_claim_problem(token.claims)
    if problem is not None:
        raise OidcError(*problem)
    claims = _validated_claims(
        token,
        metadata=metadata,
        client_id=client_id,
        nonce=nonce,
        access_token=access_token,
        now=checked_at,
    )
    _check_iat_and_sub(claims)
    return dict(claims)


def _id_token_header(id_token: str) -> dict[str, Any]:
    """The header of what looks like a signed JWT with an algorithm we take, or OidcError."""
    if len(id_token) > MAX_TOKEN_LENGTH or id_token.count(".") != 2:
        raise OidcError("invalid_token", "The id_token is not a signed JWT")
    try:
        header = token_header(id_token)
    except Exception:  # noqa: BLE001 (any garbage in the header)
        raise OidcError("invalid_token", "The id_token is not a signed JWT") from None
    if header.get("alg") not in ALGORITHMS:
        raise OidcError("invalid_token", "The id_token's algorithm is not RS256 or ES256")
    return header


def _id_token_signed(id_token: str, header: dict[str, Any], metadata: Metadata) -> jwt.Token:
    """The token once a key of the issuer's JWKS verifies its signature, or OidcError."""
    keys = jwks_cache.keys_for(metadata.jwks_uri, header.get("kid"))
    if not keys:
        raise OidcError("bad_signature", "No key of the IdP's JWKS matches the id_token")
    for key in keys:
        try:
            return jwt.decode(id_token, key, algorithms=ALGORITHMS)
        except JoseError:
            continue
        except Exception:  # noqa: BLE001 (a bug of ours or theirs on a stranger's token)
            logger.exception("OIDC id_token of %s: unexpected error", metadata.issuer)
            continue
    raise OidcError("bad_signature", "The id_token's signature does not verify")


def _validated_claims(
    token: jwt.Token,
    *,
    metadata: Metadata,
    client_id: str,
    nonce: str,
    access_token: str | None,
    now: float,
) -> CodeIDToken:
    """The claims after authlib's rules of OpenID Connect Core 3.1.3.7 (iss, aud, azp, exp,
    iat, nonce, at_hash), each refusal an OidcError whose reason names the claim."""
    claims = CodeIDToken(
        token.claims,
        token.header,
        {
            "iss": {"essential": True, "value": metadata.issuer},
            "aud": {"essential": True, "value": client_id},
            "sub": {"essential": True},
            "nonce": {"essential": True, "value": nonce},
        },
        {"nonce": nonce, "client_id": client_id, "access_token": access_token},
    )
    try:
        claims.validate(now=int(now), leeway=LEEWAY)
    except ExpiredTokenError:
        raise OidcError("expired", "The id_token has expired") from None
    except (InvalidClaimError, MissingClaimError) as exc:
        claim = getattr(exc, "claim", "") or ""
        reason = {"aud": "wrong_audience", "azp": "wrong_audience", "nonce": "wrong_nonce"}.get(
            claim, f"invalid_{claim}" if claim else "invalid_token"
        )
        raise OidcError(reason, f"The id_token's '{claim}' claim is not acceptable") from None
    except JoseError as exc:
        raise OidcError("invalid_token", f"The id_token is not acceptable ({exc.error})") from None
    except Exception:  # noqa: BLE001 (claims of a wrong type)
        raise OidcError("invalid_token", "The id_token's claims are not acceptable") from None
    return claims


def _check_iat_and_sub(claims: CodeIDToken) -> None:
    """What authlib lets through: an iat that is no number, a sub that is no short text."""
    iat = claims.get("iat")
    if not isinstance(iat, int | float) or isinstance(iat, bool):
        raise OidcError("invalid_iat", "The id_token's 'iat' claim is not acceptable")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not 0 < len(sub) <= 255 or not is_storable_text(sub):
        raise OidcError("invalid_sub", "The id_token's 'sub' claim is not acceptable")


def userinfo_request(metadata: Metadata, *, access_token: str) -> dict[str, Any]:
    """The claims at the IdP's userinfo endpoint (OpenID Connect Core 5.3), asked with the
    access token through the outbound guard, bounded like the token request; OidcError."""
    assert metadata.userinfo_endpoint is not None
    try:
        answer = fetch_outbound_json(
            metadata.userinfo_endpoint,
            max_bytes=MAX_BYTES,
            timeout=TIMEOUT,
            headers={"Authorization": f"Bearer {access_token}"},
        )
    except Refused as exc:
        logger.warning(
            "OIDC userinfo request to %s refused (%s): %s",
            metadata.userinfo_endpoint,
            exc.code,
            exc.message,
        )
        reason = {"http_error": "userinfo_refused", "invalid_json": "userinfo_invalid"}.get(
            exc.code, "idp_unavailable"
        )
        raise OidcError(reason, f"The IdP's userinfo endpoint: {exc.message}") from None
    if not isinstance(answer, dict):
        raise OidcError("userinfo_invalid", "The IdP's userinfo answer is not a JSON object")
    return answer


# A claim taken from userinfo brings its companions: an address is verified by its own answer.
_TAKEN_TOGETHER = {"email": ("email", "email_verified", "xms_edov")}


def claims_with_userinfo(
    claims: dict[str, Any],
    *,
    metadata: Metadata,
    access_token: str | None,
    wanted: tuple[str, ...],
) -> dict[str, Any]:
    """The id_token's claims, completed from the userinfo endpoint when they lack one of
    `wanted` (the e-mail, the provider's groups claim): what the id_token says is kept, a
    missing claim is taken from userinfo, whose `sub` must be the id_token's. Without a
    userinfo endpoint or an access token, the claims as they are. OidcError."""
    missing = [name for name in wanted if name not in claims]
    if not missing or metadata.userinfo_endpoint is None or not access_token:
        return claims
    info = userinfo_request(metadata, access_token=access_token)
    sub = info.get("sub")
    if not isinstance(sub, str) or not hmac.compare_digest(
        sub.encode("utf-8", "surrogatepass"), str(claims["sub"]).encode("utf-8", "surrogatepass")
    ):
        # OpenID Connect Core 5.3.2: otherwise the answer is about someone else.
        raise OidcError("userinfo_wrong_sub", "The IdP's userinfo answer is for another subject")
    merged = dict(claims)
    for name in missing:
        for taken in _TAKEN_TOGETHER.get(name, (name,)):
            if taken in info:
                merged[taken] = info[taken]
    problem = email_claim_problem(merged)
    if problem is not None:
        raise OidcError(*problem)
    return merged


def code_hash(code: str) -> str:
    """A short fingerprint of an authorization code for log lines (never the code itself)."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()[:12]
