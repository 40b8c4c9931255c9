"""Who is calling: API keys and JWTs resolved to a `Principal` (license, key or end user).

API keys are `sk-svc-` + 43 URL-safe characters, stored as a lookup prefix and a SHA-256
digest. JWTs are verified against the institution's registered issuers; the first valid token
of a `sub` creates its end user under the issuer's license.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeGuard

import jwt
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.crypto import UndecryptableSecret, reveal
from core.db import UNREACHABLE, run_db
from core.errors import AUTH_BAD_SCHEME, AUTH_INVALID, AuthenticationFailed, ServiceUnavailable
from core.localcache import TTLCache
from core.text import is_storable_text

from ..ledger.budget import BudgetConfig
from ..models import (
    ALLOWED_JWT_ALGORITHMS,
    ApiKey,
    Course,
    CourseMember,
    EndUser,
    JwtIssuer,
    License,
)
from ..rules.guardrails import GuardrailConfigError, Guardrails, compile_guardrails
from ..rules.policy import Policy, PolicyDocumentError, compile_policy
from .jwks import jwks_cache

logger = logging.getLogger("gateway")

KEY_PREFIX = "sk-svc-"
KEY_RANDOM_CHARS = 43
LOOKUP_CHARS = 8  # random characters kept in clear, for lookup and display
MAX_CREDENTIAL_LENGTH = 8192

_key_cache = TTLCache("api-keys")
_license_cache = TTLCache("licenses")
_issuer_cache = TTLCache("jwt-issuers", max_entries=1000)
_end_user_cache = TTLCache("end-users")
_course_code_cache = TTLCache("course-codes")  # (license id, code) -> course id
_member_cache = TTLCache("course-members")  # (course id, end user id) -> True


# --- API keys -----------------------------------------------------------------------------


def generate_api_key() -> str:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    assert len(key) == len(KEY_PREFIX) + KEY_RANDOM_CHARS
    return key


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_lookup_prefix(key: str) -> str:
    return key[: len(KEY_PREFIX) + LOOKUP_CHARS]


def api_key_create(
    *,
    license: License,
    name: str = "",
    expires_at: datetime | None = None,
    end_user: EndUser | None = None,
    course: Course | None = None,
    kind: str = ApiKey.Kind.STANDARD,
):
    """Create a key; returns (row, full key). The full key is never stored. A key with an
    `end_user` (a student's, made in the portal) bills that end user's wallet; one with a
    `course` (of the same license) also pays at the course's levels (licensing.ledger.budget):
    the student's allowance, the course pool. Membership is the caller's to check or make.
    A front-end key (`kind`) acts for the students its requests name (licensing.access.frontend):
    never one end user's, and with a `course` only within that course."""
    if kind not in ApiKey.Kind.values:
        raise ValueError(f"Not a kind of key: {kind!r}")
    if end_user is not None and end_user.license_id != license.pk:
        raise ValueError("The end user is not on this license")
    if course is not None and course.license_id != license.pk:
        raise ValueError("The course is not on this license")
    if kind == ApiKey.Kind.FRONT_END and end_user is not None:
        raise ValueError("A front-end key acts for many students: it has no end user")
    key = generate_api_key()
    row = ApiKey.objects.create(
        license=license,
        kind=kind,
        end_user=end_user,
        course=course,
        name=name,
        prefix=key_lookup_prefix(key),
        digest=key_digest(key),
        expires_at=expires_at,
    )
    return row, key


def api_key_create_for_days(
    *,
    license: License,
    name: str = "",
    days: int | None = None,
    kind: str = ApiKey.Kind.STANDARD,
    course: Course | None = None,
):
    expires_at = timezone.now() + timedelta(days=days) if days else None
    return api_key_create(
        license=license, name=name, expires_at=expires_at, kind=kind, course=course
    )


# --- snapshots held in the caches --------------------------------------------------------


@dataclass(frozen=True)
class LicenseInfo:
    id: int
    name: str
    institution: str
    institution_id: int
    active: bool
    type_id: int
    type_name: str
    type_active: bool
    policy: Policy | None  # None: the document cannot be evaluated (503 at the policy step)
    guardrails: Guardrails | None  # None: the settings cannot be evaluated (503)
    budget: BudgetConfig

    @property
    def usable(self) -> bool:
        return self.active and self.type_active


@dataclass(frozen=True)
class Principal:
    license: LicenseInfo
    api_key_id: int | None = None
    end_user_id: int | None = None
    course_id: int | None = None  # the course that pays beside the license (issue 26)
    # A front-end key (issue 37, licensing.access.frontend): it acts for the person its request
    # names (`end_user_id`, once named), within `course_id` when the key has one, else in the
    # course the request's model chooses among `courses`: that person's courses on the license,
    # as (id, code, active).
    front_end: bool = False
    courses: tuple[tuple[int, str, bool], ...] = ()

    @property
    def license_name(self) -> str:
        return self.license.name

    @property
    def holder(self) -> str:
        """The budget holder name of this caller under a per-user strategy."""
        if self.end_user_id is not None:
            return f"user:{self.end_user_id}"
        return f"key:{self.api_key_id}"


@dataclass(frozen=True)
class _KeyInfo:
    id: int
    digest: str
    license_id: int
    active: bool
    expires_at: datetime | None
    end_user_id: int | None  # a student's portal key: the end user's wallet
    course_id: int | None  # a course member's key: the course's levels pay too
    front_end: bool = False  # ApiKey.Kind.FRONT_END: acts for the person a request names


def _license_info(license_id: int) -> LicenseInfo | None:
    cached = _license_cache.get(license_id)
    if cached is not None:
        return cached
    generation = _license_cache.generation
    try:
        row = (
            License.objects.select_related("license_type", "institution")
            .filter(pk=license_id)
            .first()
        )
    except UNREACHABLE:
        return _stale(_license_cache, license_id)
    if row is None:
        return None
    try:
        policy = compile_policy(row.license_type.policy)
    except PolicyDocumentError:
        policy = None
    try:
        guardrails = compile_guardrails(row.license_type.guardrails)
    except GuardrailConfigError:
        guardrails = None
    info = LicenseInfo(
        id=row.pk,
        name=row.name,
        institution=row.institution.name,
        institution_id=row.institution_id,
        active=row.active,
        type_id=row.license_type_id,
        type_name=row.license_type.name,
        type_active=row.license_type.active,
        policy=policy,
        guardrails=guardrails if guardrails is not None else None,
        budget=BudgetConfig(
            unit=row.budget_unit,
            strategy=row.budget_strategy,
            period=row.budget_period,
            limit=row.budget_limit,
            alert_at=row.alert_at,
            timezone=row.institution.timezone or "UTC",
        ),
    )
    _license_cache.set(license_id, info, generation)
    return info


def _resolve_api_key(credential: str) -> Principal | None:
    digest = key_digest(credential)
    info = _key_cache.get(digest)
    if info is None:
        generation = _key_cache.generation
        try:
            rows = list(
                ApiKey.objects.filter(prefix=key_lookup_prefix(credential)).values_list(
                    "id",
                    "digest",
                    "license_id",
                    "active",
                    "expires_at",
                    "end_user_id",
                    "course_id",
                    "kind",
                )
            )
        except UNREACHABLE:
            info = _stale(_key_cache, digest)
            return _key_principal(info, _license_info(info.license_id))
        for row in rows:
            if hmac.compare_digest(row[1], digest):
                info = _KeyInfo(*row[:7], front_end=row[7] == ApiKey.Kind.FRONT_END)
                break
        if info is None:
            return None
        _key_cache.set(digest, info, generation)
    return _key_principal(info, _license_info(info.license_id))


def _stale(cache: TTLCache, key):
    """During an outage, what the cache last knew (an expired entry), else the outage itself
    (the caller's 503): a key used before the outage keeps working (docs/reliability.md)."""
    found = cache.stale(key)
    if found is None:
        raise
    return found


def _key_principal(info: _KeyInfo, license_info: LicenseInfo | None) -> Principal | None:
    if not info.active or (info.expires_at is not None and info.expires_at <= timezone.now()):
        return None
    if license_info is None or not license_info.usable:
        return None
    return Principal(
        license=license_info,
        api_key_id=info.id,
        end_user_id=info.end_user_id,
        course_id=info.course_id,
        front_end=info.front_end,
    )


# --- JWT -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _IssuerInfo:
    id: int
    license_id: int
    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    jwks_url: str
    public_keys: tuple[str, ...]
    hs256_secret: str
    active: bool
    secret_undecryptable: bool = False
    course_claim: str = ""  # the claim naming the caller's course code ("" = none)


def _issuer_info(iss: str) -> _IssuerInfo | None:
    cached = _issuer_cache.get(iss)
    if cached is not None:
        return cached
    generation = _issuer_cache.generation
    row = JwtIssuer.objects.filter(issuer=iss).first()
    if row is None:
        return None
    pems = tuple(
        "-----BEGIN" + block for block in row.public_keys.split("-----BEGIN") if block.strip()
    )
    algorithms = row.algorithms if isinstance(row.algorithms, list) else []
    try:
        hs256_secret, undecryptable = reveal(row.hs256_secret), False  # once per cache fill
    except UndecryptableSecret as exc:
        logger.error("JWT issuer %s: %s", row.pk, exc)
        hs256_secret, undecryptable = "", True
    info = _IssuerInfo(
        id=row.pk,
        license_id=row.license_id,
        issuer=row.issuer,
        audience=row.audience,
        algorithms=tuple(a for a in algorithms if a in ALLOWED_JWT_ALGORITHMS),
        jwks_url=row.jwks_url,
        public_keys=pems,
        hs256_secret=hs256_secret,
        active=row.active,
        secret_undecryptable=undecryptable,
        course_claim=row.course_claim,
    )
    _issuer_cache.set(iss, info, generation)
    return info


def _verification_keys(issuer: _IssuerInfo, header: dict, alg: str) -> list:
    if alg.startswith("HS"):
        # Never verify an HMAC token with a public key (the classic algorithm confusion).
        if issuer.secret_undecryptable:
            raise ServiceUnavailable()  # our own key is wrong, not the caller's token
        return [issuer.hs256_secret] if issuer.hs256_secret else []
    keys: list = list(issuer.public_keys)
    if issuer.jwks_url:
        # Through the SSRF guard, at most one fetch per URL a minute whatever the `kid`; a
        # JWKS that cannot be had is no key (401), never an error of ours.
        keys += jwks_cache.keys_for(issuer.jwks_url, header.get("kid"))
    return keys


def _resolve_jwt(token: str) -> Principal | None:
    found = _token_issuer(token)
    if found is None:
        return None
    issuer, header, alg = found
    payload = _verified_claims(token, issuer, header, alg)
    if payload is None:
        return None
    subject = payload.get("sub")
    if not subject or not _storable(subject, EndUser.subject.field.max_length):
        return None
    known, course_id = _claimed_course(issuer, payload)
    if not known:
        return None
    license_info = _license_info(issuer.license_id)
    if license_info is None or not license_info.usable:
        return None
    end_user_id = _end_user_id(issuer, subject)
    if course_id is not None:
        _ensure_member(course_id, end_user_id)
    return Principal(license=license_info, end_user_id=end_user_id, course_id=course_id)


def _token_issuer(token: str) -> tuple[_IssuerInfo, dict, str] | None:
    """The active issuer the token names, its header and its algorithm (one the issuer
    accepts), read before any signature is checked; None for a token no issuer of ours takes."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    iss, alg = claims.get("iss"), header.get("alg")
    if not isinstance(alg, str) or not _storable(iss, JwtIssuer.issuer.field.max_length):
        return None  # never looked up: unsigned claims may hold what no database takes
    issuer = _issuer_info(iss)
    if issuer is None or not issuer.active or alg not in issuer.algorithms:
        return None
    return issuer, header, alg


def _verified_claims(token: str, issuer: _IssuerInfo, header: dict, alg: str) -> dict | None:
    """The token's claims once one of the issuer's keys verifies it (with its expiry, issuer,
    audience and subject), else None."""
    for key in _verification_keys(issuer, header, alg):
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=issuer.audience,
                issuer=issuer.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, ValueError, TypeError):
            continue
    return None


def _claimed_course(issuer: _IssuerInfo, payload: dict) -> tuple[bool, int | None]:
    """(whether the credential is known, the course it is for): a token without the issuer's
    course claim is for no course; with it, for a course of the issuer's license or unknown."""
    if not issuer.course_claim or issuer.course_claim not in payload:
        return True, None
    # The claim is signed but still the IdP's free text: anything but a known course code of
    # the issuer's license is an unknown credential (401), never a query it breaks.
    code = payload[issuer.course_claim]
    if not code or not _storable(code, Course.code.field.max_length):
        return False, None
    course_id = _course_id(issuer, code)
    return course_id is not None, course_id


def _storable(value: object, max_length: int | None) -> TypeGuard[str]:
    """A claim that can be compared with, or stored in, a text column: no NUL, no lone
    surrogates (not UTF-8), within the column's length."""
    return (
        isinstance(value, str)
        and max_length is not None  # a CharField's: always set
        and len(value) <= max_length
        and is_storable_text(value)
    )


def _end_user_id(issuer: _IssuerInfo, subject: str) -> int:
    cache_key = (issuer.id, subject)
    cached = _end_user_cache.get(cache_key)
    if cached is not None:
        return cached
    generation = _end_user_cache.generation
    user = EndUser.objects.filter(issuer_id=issuer.id, subject=subject).first()
    if user is None:
        try:
            with transaction.atomic():
                user = EndUser.objects.create(
                    issuer_id=issuer.id, subject=subject, license_id=issuer.license_id
                )
        except IntegrityError:  # a concurrent first request created it
            user = EndUser.objects.get(issuer_id=issuer.id, subject=subject)
    _end_user_cache.set(cache_key, user.pk, generation)
    return user.pk


def _course_id(issuer: _IssuerInfo, code: str) -> int | None:
    """The course of this code on the issuer's license (its users' license: a course of
    another license would charge levels the license does not pay for); None when unknown.
    Unknown codes are not cached: only tokens the issuer signed get here."""
    cache_key = (issuer.license_id, code)
    cached = _course_code_cache.get(cache_key)
    if cached is not None:
        return cached
    generation = _course_code_cache.generation
    course_id = (
        Course.objects.filter(license_id=issuer.license_id, code=code)
        .values_list("pk", flat=True)
        .first()
    )
    if course_id is not None:
        _course_code_cache.set(cache_key, course_id, generation)
    return course_id


def _ensure_member(course_id: int, end_user_id: int) -> None:
    """The token's course makes its user a member (created on first use, not paused)."""
    cache_key = (course_id, end_user_id)
    if _member_cache.get(cache_key):
        return
    generation = _member_cache.generation
    if not CourseMember.objects.filter(course_id=course_id, end_user_id=end_user_id).exists():
        try:
            with transaction.atomic():
                CourseMember.objects.create(course_id=course_id, end_user_id=end_user_id)
        except IntegrityError:  # a concurrent first request created it
            pass
    _member_cache.set(cache_key, True, generation)


# --- the Authorization header --------------------------------------------------------------


def resolve_credential(credential: str) -> Principal | None:
    if not credential or len(credential) > MAX_CREDENTIAL_LENGTH:
        return None
    if credential.startswith(KEY_PREFIX):
        return _resolve_api_key(credential)
    if credential.count(".") == 2:
        return _resolve_jwt(credential)
    return None


def parse_authorization(header: str) -> str:
    """The credential of a `Bearer <credential>` header; 401 for any other scheme."""
    if not header.startswith("Bearer "):
        raise AuthenticationFailed(AUTH_BAD_SCHEME)
    return header[len("Bearer ") :]


def _cached_principal(credential: str) -> Principal | None | Literal[False]:
    """The principal of an API key from the caches alone; False when the database is needed."""
    if not credential.startswith(KEY_PREFIX) or len(credential) > MAX_CREDENTIAL_LENGTH:
        return False
    info = _key_cache.get(key_digest(credential))
    if info is None:
        return False
    license_info = _license_cache.get(info.license_id)
    if license_info is None:
        return False
    # From the entries just read: reading the caches again could find one expired in between
    # and query the database on the event loop.
    return _key_principal(info, license_info)


async def authenticate(header: str) -> Principal:
    credential = parse_authorization(header)
    principal = _cached_principal(credential)
    if principal is False:
        principal = await run_db(resolve_credential, credential)
    if principal is None:
        raise AuthenticationFailed(AUTH_INVALID)
    return principal
