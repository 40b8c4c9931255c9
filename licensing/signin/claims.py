"""Type checks of the claims of a stranger's signed token that the JWT libraries leave open
(docs/decisions/sso.md, "Claims of odd types"): shared by the OpenID Connect sign-in
(licensing.signin.oidc) and the LTI launch (licensing.signin.lti).

A signature proves who sent a token, not that its claims are sane. JSON numbers such as
`1e400` parse to infinity (and `NaN` to not-a-number, which no comparison refuses), so an
`exp` of that kind would pass every "expired?" test and never expire; `email` may be a list or
an object. Each check returns the problem as (reason, message) for the caller's error type,
or None.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from core.text import is_storable_text

# The latest `exp` accepted: real IdPs' id_tokens live minutes to hours (Entra, Google, Okta,
# ADFS: one hour; Keycloak: its access token lifespan; Moodle's and Canvas' LTI launches:
# seconds to an hour). A month is far past any of them and still refuses "never expires".
MAX_LIFETIME = 31 * 86400
MAX_EMAIL_LENGTH = 254
_TIMES = ("exp", "iat", "nbf")

Problem = tuple[str, str]


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) < 2**53  # a bigger int is no second of any calendar
    return math.isfinite(value)


def time_claims_problem(claims: dict[str, Any], *, now: float) -> Problem | None:
    """`exp` and `iat` finite numbers (`nbf` too when present), `exp` at most MAX_LIFETIME
    after now. Whether they are expired, in the future or not yet valid is the caller's check
    (with its leeway and its reasons)."""
    for name in _TIMES:
        if name not in claims and name == "nbf":
            continue
        if not _finite_number(claims.get(name)):
            return f"invalid_{name}", f"The token's '{name}' claim is not a time (a number)"
    if claims["exp"] > now + MAX_LIFETIME:
        return "invalid_exp", "The token's 'exp' claim is too far in the future"
    return None


def email_claim_problem(claims: dict[str, Any]) -> Problem | None:
    """`email`, when present and not empty: one string that looks like an address (no NUL,
    no lone surrogate, at most 254 characters, an `@`). An empty or null `email` is no
    address (some IdPs send one for accounts without a mailbox)."""
    email = claims.get("email")
    if email is None or email == "":
        return None
    if (
        not isinstance(email, str)
        or len(email) > MAX_EMAIL_LENGTH
        or "@" not in email
        or not is_storable_text(email)
    ):
        return "invalid_email", "The token's 'email' claim is not an e-mail address"
    return None


def token_header(token: str) -> dict[str, Any]:
    """A signed token's JOSE header, read before its signature is checked (to pick the key);
    ValueError when it is no JSON object."""
    raw = token.split(".", 1)[0]
    decoded = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    if not isinstance(decoded, dict):
        raise ValueError("not an object")
    return decoded
