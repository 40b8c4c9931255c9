"""The signing keys of JWT issuers that publish a JWKS URL, fetched through the SSRF guard.

Any client can send a token with a registered `iss` and a made-up `kid`, with no valid
signature, so what a token says must never decide how often the gateway goes out: each JWKS
URL is fetched at most once per `MIN_INTERVAL` (a minute), whatever is asked for in between
(a `kid` not in the set waits for the next minute; a failed fetch is remembered as long as a
good one). Keys from a good fetch are used for `LIFESPAN`, then fetched again by the next
token that needs them (tokens arriving meanwhile wait for that one fetch). A JWKS that cannot be
fetched (refused address, closed connection, not JSON, too big, too slow) leaves the token
without a key: the client's 401, and a warning line in the `gateway` log for the operator.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import jwt

from core.outbound import Refused, fetch_outbound_json

logger = logging.getLogger("gateway")

MIN_INTERVAL = 60.0  # seconds between two fetches of one JWKS URL, whatever clients send
LIFESPAN = 300.0  # seconds the keys of a good fetch are used before the URL is asked again
MAX_BYTES = 256 * 1024  # a JWKS of ~20 RSA keys with certificate chains is ~60 KB
TIMEOUT = 5.0  # seconds for the whole fetch (connect, TLS, answer)
MAX_KEYS = 100  # keys of one set that are kept; the rest are ignored
_ASYMMETRIC = ("RSA", "EC", "OKP")  # never a symmetric ("oct") key from a public document


@dataclass
class _Entry:
    keys: dict[str | None, list] = field(default_factory=dict)  # kid -> verification keys
    fetched_at: float | None = None  # the last good fetch
    tried_at: float | None = None  # the last attempt, good or not
    lock: threading.Lock = field(default_factory=threading.Lock)


class JwksCache:
    """Keys per JWKS URL; `clock` (seconds, monotonic) and `fetch` are injectable for tests;
    `parse` turns a fetched document into {kid: [keys]} (default: PyJWT's keys; the OpenID
    Connect sign-in passes its own, licensing.signin.oidc)."""

    def __init__(self, clock=time.monotonic, fetch=None, parse=None):
        self.clock = clock
        self.parse = parse or _parse_jwks
        self.fetch = fetch or (
            lambda url: fetch_outbound_json(url, max_bytes=MAX_BYTES, timeout=TIMEOUT)
        )
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def keys_for(self, url: str, kid) -> list:
        """The keys of `url`'s set that carry this `kid` (no `kid`: the keys without one)."""
        if kid is not None and not isinstance(kid, str):
            return []
        with self._lock:
            entry = self._entries.setdefault(url, _Entry())
        keys = self._usable(entry, kid)
        if keys or not self._due(entry):
            return keys
        # One thread fetches; the others wait for its answer (bounded by TIMEOUT) and use it.
        with entry.lock:
            if self._due(entry):
                self._refresh(url, entry)
            return self._usable(entry, kid)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _usable(self, entry: _Entry, kid) -> list:
        fresh = entry.fetched_at is not None and self.clock() - entry.fetched_at < LIFESPAN
        return list(entry.keys.get(kid, ())) if fresh else []

    def _due(self, entry: _Entry) -> bool:
        return entry.tried_at is None or self.clock() - entry.tried_at >= MIN_INTERVAL

    def _refresh(self, url: str, entry: _Entry) -> None:
        entry.tried_at = self.clock()
        try:
            keys = self.parse(self.fetch(url))
        except Refused as exc:
            logger.warning("JWKS %s not usable (%s): %s", url, exc.code, exc.message)
            return
        except Exception:  # a bug of ours on a stranger's document: no key (401), not a 500
            logger.exception("JWKS %s not usable (internal_error)", url)
            return
        entry.keys, entry.fetched_at = keys, self.clock()


def _parse_jwks(document) -> dict[str | None, list]:
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise Refused("invalid_jwks", "The answer is not a JWK set (no `keys` list)")
    keys: dict[str | None, list] = {}
    for jwk in document["keys"][:MAX_KEYS]:
        if not isinstance(jwk, dict) or jwk.get("kty") not in _ASYMMETRIC:
            continue
        if jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        try:
            key = jwt.PyJWK(jwk).key
        except Exception:  # noqa: BLE001 (whatever a hostile key makes the parser raise)
            continue  # one unusable key does not spoil the others
        keys.setdefault(kid, []).append(key)
    if not keys:
        raise Refused("invalid_jwks", "The JWK set holds no usable signing key")
    return keys


jwks_cache = JwksCache()
