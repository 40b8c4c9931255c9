"""LTI 1.3 resource link launches from an institution's LMS (docs/lti.md): the platform's
registration, the OIDC third-party login initiation, the id_token check, and what a verified
launch does (the course of the LMS context, the teacher or the student member, the user).
The HTTP views are licensing.signin.lti_views.

The id_token is verified with PyJWT and the platform's JWKS, fetched through the SSRF guard by
a JwksCache (licensing/access/jwks.py: at most one fetch a minute per URL whatever launches
ask). The pending launch (state -> nonce) lives in the database, not the session: the LMS's
launch is a cross-site POST that carries no SameSite=Lax cookie, and any worker may get it.

Every failure is an `LtiError` with a machine-readable `reason` (the audit row's), a message
for people and the HTTP status of the refusal page; nothing here raises anything else on a
stranger's input.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import jwt
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from core.config import get_config
from core.text import is_storable_text

from ..access.audit import audit_event_record, sign_in_event_record
from ..access.jwks import JwksCache
from ..models import (
    AdminProfile,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    Institution,
    License,
    LtiIdentity,
    LtiLaunchState,
    LtiPlatform,
)
from .access_rules import (
    AttributesRefused,
    attributes_read,
    decide,
    normalise_claims,
    validate_rules,
)
from .claims import email_claim_problem, time_claims_problem, token_header

logger = logging.getLogger("gateway")

ALGORITHMS = ["RS256", "ES256"]  # what Moodle and Canvas sign with; never "none", never HS*
LEEWAY = 60  # seconds of clock difference tolerated on exp/iat
STATE_LIFETIME = 600  # seconds between the login initiation and the launch
KEEP_STATES = 86400  # seconds a used or stale launch row is kept (its nonce stays known)
MAX_TOKEN_LENGTH = 32 * 1024  # an id_token longer than this is refused before parsing
MAX_PARAM = 2048  # a login parameter (iss, login_hint, ...) longer than this is not one
MAX_LABEL = 255  # a context label longer than this is refused (a course code is 64)
MAX_TITLE = 1000  # a context title longer than this is refused (a course name is 200)
MAX_ALLOWANCE = 2**63 - 1

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
MESSAGE_TYPE = "LtiResourceLinkRequest"
VERSION = "1.3.0"
LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
INSTRUCTOR_ROLES = frozenset(
    {
        LIS + "membership#Instructor",
        LIS + "institution/person#Instructor",
        LIS + "institution/person#Faculty",
        "Instructor",  # LTI 1.3 core 5.3.7.1: a context role may be given by its short name
    }
)
LEARNER_ROLES = frozenset(
    {
        LIS + "membership#Learner",
        LIS + "institution/person#Student",
        LIS + "institution/person#Learner",
        "Learner",
    }
)

# Injectable for tests (no test waits for the wall clock): seconds since the epoch.
clock = time.time
jwks_cache = JwksCache()


class LtiError(Exception):
    """A launch that cannot go on: `reason` for the audit log, `message` for people."""

    def __init__(self, reason: str, message: str, status: int = 403):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status


def _now() -> datetime:
    return datetime.fromtimestamp(clock(), tz=UTC)


def _clean_text(value: Any) -> bool:
    return isinstance(value, str) and is_storable_text(value)


def _param(value: Any, name: str, *, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise LtiError("invalid_login", f"The login request has no {name}.", status=400)
        return ""
    if not _clean_text(value) or len(value) > MAX_PARAM:
        raise LtiError("invalid_login", f"The login request's {name} is not valid.", status=400)
    return value


# --- the registration -------------------------------------------------------------------------


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} is required")
    value = value.strip()
    if len(value) > limit or not _clean_text(value) or not value.isprintable():
        raise ValidationError(f"{name} is not valid (control characters or too long)")
    return value


@dataclass(frozen=True)
class PlatformSettings:
    """What a platform's registration sets, checked (lti_platform_configure's input)."""

    issuer: str
    client_id: str
    deployment_ids: list[str]
    jwks_url: str
    auth_login_url: str
    license: License
    allowance: int | None
    allowance_period: str
    active: bool
    access_rules: list[dict] | None = None  # None: the stored ones stay


def _deployment_ids(deployment_ids: list[str]) -> list[str]:
    if not deployment_ids:
        raise ValidationError(_("Give at least one deployment id"))
    ids = [_text(d, "A deployment id", 255) for d in deployment_ids]
    if len(ids) > 100:
        raise ValidationError(_("At most 100 deployment ids"))
    return ids


def _check_allowance(allowance: int | None, allowance_period: str) -> None:
    if allowance is not None and (
        isinstance(allowance, bool) or not isinstance(allowance, int) or not 0 <= allowance
    ):
        raise ValidationError(_("The allowance is a whole number of micro-credits, 0 or more"))
    if allowance is not None and allowance > MAX_ALLOWANCE:
        raise ValidationError(f"The allowance is at most {MAX_ALLOWANCE}")
    if allowance_period not in Course.Period.values:
        raise ValidationError(f"The allowance period is one of {', '.join(Course.Period.values)}")


def lti_platform_configure(
    *,
    institution: Institution,
    issuer: str,
    client_id: str,
    deployment_ids: list[str],
    jwks_url: str,
    auth_login_url: str,
    license: License,
    allowance: int | None,
    allowance_period: str,
    active: bool = True,
    access_rules: list[dict] | None = None,
    actor=None,
    request=None,
) -> tuple[LtiPlatform, bool]:
    """Create or update the platform (issuer, client id): the command comes here. Raises
    ValidationError on bad input; the URLs go through the SSRF guard's rules."""
    issuer = _text(issuer, "The issuer", 500)
    client_id = _text(client_id, "The client id", 255)
    ids = _deployment_ids(deployment_ids)
    jwks_url = _text(jwks_url, "The JWKS URL", 500)
    auth_login_url = _text(auth_login_url, "The auth login URL", 500)
    if license.institution_id != institution.pk:
        raise ValidationError(_("The license must belong to the same institution"))
    _check_allowance(allowance, allowance_period)
    if access_rules is not None:
        access_rules = validate_lti_rules(access_rules, institution_id=institution.pk)
    settings = PlatformSettings(
        issuer=issuer,
        client_id=client_id,
        deployment_ids=ids,
        jwks_url=jwks_url,
        auth_login_url=auth_login_url,
        license=license,
        allowance=allowance,
        allowance_period=allowance_period,
        active=active,
        access_rules=access_rules,
    )
    with transaction.atomic():
        platform, created = _platform_saved(institution, settings)
        _platform_configured_record(
            institution, platform, created, settings, actor=actor, request=request
        )
    logger.info(
        "LTI platform %s for %s: %s", "created" if created else "updated", institution, issuer
    )
    return platform, created


def _platform_saved(
    institution: Institution, settings: PlatformSettings
) -> tuple[LtiPlatform, bool]:
    """The platform of (issuer, client id), locked, made or updated with `settings`."""
    issuer, client_id = settings.issuer, settings.client_id
    platform = (
        LtiPlatform.objects.select_for_update().filter(issuer=issuer, client_id=client_id).first()
    )
    created = platform is None
    if platform is None:
        platform = LtiPlatform(issuer=issuer, client_id=client_id, institution=institution)
    elif platform.institution_id != institution.pk:
        raise ValidationError(_("Another institution already registered this platform"))
    platform.deployment_ids = list(dict.fromkeys(settings.deployment_ids))
    platform.jwks_url = settings.jwks_url
    platform.auth_login_url = settings.auth_login_url
    platform.license = settings.license
    platform.allowance = settings.allowance
    platform.allowance_period = settings.allowance_period
    platform.active = settings.active
    if settings.access_rules is not None:
        platform.access_rules = settings.access_rules
    platform.full_clean()
    platform.save()
    return platform, created


def _platform_configured_record(
    institution: Institution,
    platform: LtiPlatform,
    created: bool,
    settings: PlatformSettings,
    *,
    actor,
    request,
) -> None:
    audit_event_record(
        action=AuditEvent.Action.SSO_CONFIGURED,
        request=request,
        actor=actor,
        actor_name="" if actor or request else "manage.py configure_lti",
        institution=institution,
        target=f"lti_platform:{platform.pk}",
        detail={
            "method": "lti",
            "created": created,
            "issuer": settings.issuer,
            "client_id": settings.client_id,
            "deployment_ids": platform.deployment_ids,
            "license": settings.license.pk,
            "access_rules": platform.access_rules,
        },
    )


def lti_urls(base_url: str | None = None) -> tuple[str, str]:
    """The two URLs to paste into the LMS: the login initiation and the launch (redirect)."""
    base = (base_url or get_config().GATEWAY_PUBLIC_URL).rstrip("/")
    return base + reverse("lti-login"), base + reverse("lti-launch")


# --- the login initiation ---------------------------------------------------------------------


def login_redirect_url(params: dict[str, Any]) -> tuple[LtiPlatform, str]:
    """The platform's authentication request URL for this third-party login initiation (IMS
    Security Framework 5.1.1), after a launch row (state, nonce) was stored; or LtiError."""
    issuer = _param(params.get("iss"), "iss")
    login_hint = _param(params.get("login_hint"), "login_hint")
    _param(params.get("target_link_uri"), "target_link_uri")
    message_hint = _param(params.get("lti_message_hint"), "lti_message_hint", required=False)
    client_id = _param(params.get("client_id"), "client_id", required=False)
    deployment = _param(params.get("lti_deployment_id"), "lti_deployment_id", required=False)
    platforms = LtiPlatform.objects.select_related("institution").filter(issuer=issuer, active=True)
    if client_id:
        platforms = platforms.filter(client_id=client_id)
    found = list(platforms[:2])
    if len(found) != 1:
        raise LtiError(
            "unknown_platform",
            "This LMS is not registered on the gateway"
            + (" (several registrations: the LMS must send its client_id)." if found else "."),
            status=400 if found else 403,
        )
    platform = found[0]
    if deployment and deployment not in platform.deployment_ids:
        raise LtiError(
            "unknown_deployment",
            gettext_noop("This deployment of the tool is not registered."),
            status=403,
        )
    now = _now()
    # Stale rows go at each login: a nonce must outlive every id_token it was asked for.
    LtiLaunchState.objects.filter(created_at__lt=now - timedelta(seconds=KEEP_STATES)).delete()
    state = LtiLaunchState.objects.create(
        platform=platform,
        state=secrets.token_urlsafe(32),
        nonce=secrets.token_urlsafe(32),
        created_at=now,
    )
    query = {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": platform.client_id,
        "redirect_uri": lti_urls()[1],
        "login_hint": login_hint,
        "state": state.state,
        "nonce": state.nonce,
    }
    if message_hint:
        query["lti_message_hint"] = message_hint
    separator = "&" if "?" in platform.auth_login_url else "?"
    return platform, platform.auth_login_url + separator + urlencode(query)


# --- the launch: the id_token ------------------------------------------------------------------


def launch_state_take(state: Any) -> LtiLaunchState:
    """The pending launch of this `state`, marked used (committed: single use whatever follows),
    or LtiError (unknown, used, older than 10 minutes)."""
    if not state:
        raise LtiError("no_state", gettext_noop("The launch holds no state."), status=400)
    if not _clean_text(state) or len(state) > 64:
        raise LtiError(
            "state_mismatch", gettext_noop("The launch's state is not one of this gateway."), 400
        )
    with transaction.atomic():
        row = (
            LtiLaunchState.objects.select_for_update()
            .select_related("platform__institution")
            .filter(state=state)
            .first()
        )
        if row is None or not hmac.compare_digest(row.state, state):
            raise LtiError(
                "state_mismatch",
                gettext_noop(
                    "This launch was not started here. Open the tool again from your course."
                ),
                status=400,
            )
        if row.used_at is not None:
            raise LtiError(
                "state_reused",
                gettext_noop("This launch was used already. Open the tool again from your course."),
                status=400,
            )
        now = _now()
        row.used_at = now
        row.save(update_fields=["used_at"])
    if not 0 <= (now - row.created_at).total_seconds() <= STATE_LIFETIME:
        raise LtiError(
            "launch_expired",
            gettext_noop(
                "This launch took longer than 10 minutes. Open the tool again from your course."
            ),
            status=400,
        )
    return row


def verify_launch_token(token: Any, *, launch: LtiLaunchState) -> dict[str, Any]:
    """The id_token's claims after every check (signature with the platform's JWKS, RS256 or
    ES256; iss, aud, azp, exp, iat, the nonce of this launch and never seen before, the
    deployment, the message type and version), or LtiError."""
    platform = launch.platform
    header = _launch_token_header(token)
    claims = _launch_token_decoded(token, header, platform)
    now = clock()
    _check_launch_times(claims, now)
    _check_launch_azp(claims, platform)
    _check_launch_nonce(claims, launch)
    _check_launch_message(claims, platform)
    return claims


def _launch_token_header(token: Any) -> dict[str, Any]:
    """The header of what looks like a signed JWT with an algorithm we take, or LtiError."""
    if not token or not isinstance(token, str):
        raise LtiError("no_id_token", gettext_noop("The launch holds no id_token."), status=400)
    if len(token) > MAX_TOKEN_LENGTH or token.count(".") != 2 or not token.isascii():
        raise LtiError(
            "invalid_token", gettext_noop("The id_token is not a signed JWT."), status=400
        )
    try:
        header = token_header(token)
    except Exception:  # noqa: BLE001 (any garbage in the header)
        raise LtiError(
            "invalid_token", gettext_noop("The id_token is not a signed JWT."), status=400
        ) from None
    if header.get("alg") not in ALGORITHMS:
        raise LtiError(
            "invalid_token", gettext_noop("The id_token's algorithm is not RS256 or ES256.")
        )
    return header


def _launch_token_decoded(
    token: str, header: dict[str, Any], platform: LtiPlatform
) -> dict[str, Any]:
    """The claims once a key of the platform's JWKS verifies the signature, with iss and aud
    this platform's and the required claims present; or LtiError (_decode_error)."""
    keys = jwks_cache.keys_for(platform.jwks_url, header.get("kid"))
    if not keys:
        raise LtiError(
            "bad_signature", gettext_noop("No key of the platform's JWKS matches the id_token.")
        )
    error: Exception | None = None
    for key in keys:
        try:
            return _decoded_with(token, key, header["alg"], platform)
        except jwt.InvalidSignatureError as exc:
            error = exc  # another key of the set may be the one
        except jwt.PyJWTError as exc:
            error = exc  # the signature verified: the claims are wrong whatever the key
            break
        except Exception as exc:  # noqa: BLE001 (a key of the wrong type, a hostile token)
            error = exc
    raise _decode_error(error)


def _decoded_with(token: str, key: Any, alg: str, platform: LtiPlatform) -> dict[str, Any]:
    return jwt.decode(
        token,
        key=key,
        algorithms=[alg],
        audience=platform.client_id,
        issuer=platform.issuer,
        options={
            "verify_exp": False,  # checked by _check_launch_times with the injectable clock
            "verify_iat": False,
            "verify_nbf": False,
            "require": ["iss", "aud", "sub", "exp", "iat", "nonce"],
        },
    )


def _check_launch_times(claims: dict[str, Any], now: float) -> None:
    """exp, iat and nbf are sane numbers and hold at `now` (LEEWAY aside); email is one."""
    problem = time_claims_problem(claims, now=now) or email_claim_problem(claims)
    if problem is not None:
        raise LtiError(*problem)
    if claims["exp"] + LEEWAY < now:
        raise LtiError("expired", gettext_noop("The id_token has expired."))
    if claims["iat"] - LEEWAY > now:
        raise LtiError("invalid_iat", gettext_noop("The id_token was issued in the future."))
    if claims.get("nbf", now) - LEEWAY > now:
        raise LtiError("invalid_nbf", gettext_noop("The id_token is not valid yet."))


def _check_launch_azp(claims: dict[str, Any], platform: LtiPlatform) -> None:
    """Several audiences need an azp, and an azp must be this tool (OIDC Core 3.1.3.7)."""
    aud = claims["aud"]
    azp = claims.get("azp")
    if (isinstance(aud, list) and len(aud) > 1 and azp is None) or (
        azp is not None and azp != platform.client_id
    ):
        raise LtiError("wrong_audience", gettext_noop("The id_token's azp is not this tool."))


def _check_launch_nonce(claims: dict[str, Any], launch: LtiLaunchState) -> None:
    """The nonce is this launch's; another used launch's is told apart as a replay."""
    nonce = claims["nonce"]
    if isinstance(nonce, str) and hmac.compare_digest(
        nonce.encode("utf-8", "surrogatepass"), launch.nonce.encode()
    ):
        return
    # Signed, but the platform's free text: one no column holds (NUL, a lone surrogate) is
    # simply not this launch's, and must not reach the query (a 500 on either database).
    seen = _clean_text(nonce) and (
        LtiLaunchState.objects.filter(nonce=nonce[:64], used_at__isnull=False)
        .exclude(pk=launch.pk)
        .exists()
    )
    if seen:
        raise LtiError("nonce_replayed", gettext_noop("This id_token was used already (replayed)."))
    raise LtiError("wrong_nonce", gettext_noop("The id_token's nonce is not this launch's."))


def _check_launch_message(claims: dict[str, Any], platform: LtiPlatform) -> None:
    """A resource link launch of LTI 1.3.0 through a registered deployment."""
    deployment = claims.get(CLAIM + "deployment_id")
    if not isinstance(deployment, str) or deployment not in platform.deployment_ids:
        raise LtiError(
            "unknown_deployment",
            gettext_noop("This deployment of the tool is not registered on the gateway."),
        )
    if claims.get(CLAIM + "message_type") != MESSAGE_TYPE:
        raise LtiError(
            "unsupported_message",
            gettext_noop("Only resource link launches are supported."),
            status=400,
        )
    if claims.get(CLAIM + "version") != VERSION:
        raise LtiError(
            "unsupported_version", gettext_noop("Only LTI 1.3.0 launches are supported."), 400
        )


def _decode_error(error: Exception | None) -> LtiError:
    if isinstance(error, jwt.InvalidAudienceError):
        return LtiError("wrong_audience", gettext_noop("The id_token is meant for another tool."))
    if isinstance(error, jwt.InvalidIssuerError):
        return LtiError("wrong_issuer", gettext_noop("The id_token's issuer is not this platform."))
    if isinstance(error, jwt.MissingRequiredClaimError):
        return LtiError("missing_claim", f"The id_token has no '{error.claim}' claim.")
    if isinstance(error, jwt.InvalidSignatureError) or error is None:
        return LtiError("bad_signature", gettext_noop("The id_token's signature does not verify."))
    if isinstance(error, jwt.PyJWTError):
        return LtiError("invalid_token", gettext_noop("The id_token is not acceptable."))
    return LtiError("bad_signature", gettext_noop("The id_token's signature does not verify."))


# --- the launch: what the claims say ------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """The parts of a verified id_token a launch uses, checked."""

    sub: str
    instructor: bool
    context_id: str
    label: str
    title: str
    name: str
    email: str
    # The license of a course this launch creates, when an access rule names one.
    course_license_id: int | None = None


def _claim_text(value: Any, name: str, limit: int, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not _clean_text(value) or len(value) > limit or (required and not value.strip()):
        raise LtiError("invalid_claims", f"The launch's {name} is not acceptable.", status=400)
    return value.strip()


def _lti_role(roles: list[str]) -> bool:
    """Without rules: instructor (True) or learner (False) by the LTI roles claim."""
    instructor = any(r in INSTRUCTOR_ROLES for r in roles)
    if not instructor and not any(r in LEARNER_ROLES for r in roles):
        raise LtiError(
            "no_lti_role",
            gettext_noop(
                "Your role in this course is neither instructor nor learner: nothing to open."
            ),
        )
    return instructor


def lti_attributes(claims: dict[str, Any], names: set[str]) -> dict[str, list[str]]:
    """The launch's claims as attributes, LTI's claims by their short names ("roles",
    "custom.age_group", "context.label"); only `names` (those the rules read).
    AttributesRefused."""
    short = {(k[len(CLAIM) :] if k.startswith(CLAIM) else k): v for k, v in claims.items()}
    return normalise_claims(short, names)


def _ruled_role(claims: dict[str, Any], rules: list[dict]) -> tuple[bool, int | None]:
    """With the platform's rules: instructor (teacher) or learner (student), and the license
    of a course the launch creates; no rule, or no role: refused."""
    try:
        decision = decide(rules, lti_attributes(claims, attributes_read(rules)))
    except AttributesRefused as exc:
        raise LtiError("invalid_attributes", exc.message, status=400) from None
    if decision.role not in ("teacher", "student"):
        raise LtiError(
            "no_matching_rule",
            gettext_noop("No access rule of this LMS gives your account a role here."),
        )
    return decision.role == "teacher", decision.license_id


def validate_lti_rules(value: Any, *, institution_id: int) -> list[dict]:
    """A platform's rules: the roles an LMS may give are teacher and student (an admin's or
    reviewer's role never comes from a launch); a rule's license is the one of the courses an
    instructor's launch creates; courses are joined through the LMS, not named by rules. A
    safeguarding contact's role never comes from a launch either."""
    rules = validate_rules(value, institution_id=institution_id)
    for number, rule in enumerate(rules, start=1):
        if rule["role"] in ("admin", "reviewer", "safeguarding") or rule["courses"]:
            raise ValidationError(
                _("Rule %(number)s: an LTI rule gives teacher, student or nothing, no courses"),
                params={"number": number},
            )
    return rules


def launch_of(claims: dict[str, Any], rules: list[dict] | None = None) -> Launch:
    """The launch's person, role and course context, or LtiError (`invalid_claims`,
    `no_context`, `no_lti_role`; with `rules`, the platform's: `invalid_attributes`,
    `no_matching_rule`)."""
    sub = _claim_text(claims.get("sub"), "subject", 255, required=True)
    roles = claims.get(CLAIM + "roles")
    if not isinstance(roles, list) or len(roles) > 200 or not all(_clean_text(r) for r in roles):
        raise LtiError(
            "invalid_claims", gettext_noop("The launch's roles are not acceptable."), status=400
        )
    instructor, course_license_id = (
        _ruled_role(claims, rules) if rules else (_lti_role(roles), None)
    )
    context = claims.get(CLAIM + "context")
    if context is None:
        raise LtiError(
            "no_context", gettext_noop("The launch names no course (context claim)."), status=400
        )
    if not isinstance(context, dict):
        raise LtiError(
            "invalid_claims", gettext_noop("The launch's context is not acceptable."), status=400
        )
    context_id = _claim_text(context.get("id"), "context id", 255, required=True)
    label = _claim_text(context.get("label"), "course label", MAX_LABEL)
    title = _claim_text(context.get("title"), "course title", MAX_TITLE)
    name = _claim_text(claims.get("name"), "name", MAX_TITLE)[:200]
    raw_email = claims.get("email")
    email = (
        raw_email.strip()[:254]
        if isinstance(raw_email, str) and _clean_text(raw_email) and "@" in raw_email
        else ""
    )
    return Launch(
        sub=sub,
        instructor=instructor,
        context_id=context_id,
        course_license_id=course_license_id,
        label=label,
        title=title,
        name=name,
        email=email,
    )


@dataclass(frozen=True)
class Launched:
    user: Any
    course: Course
    instructor: bool
    course_created: bool
    changes: list[str]


def launch_complete(*, platform: LtiPlatform, launch: Launch, request=None) -> Launched:
    """The user (found or created by platform and `sub`), the course of the context (created
    by an instructor's first launch), the teacher or member row. Raises LtiError."""
    try:
        with transaction.atomic():
            return _launch(platform=platform, launch=launch, request=request)
    except IntegrityError:
        # Two first launches of one person or one course at once: the other one made the
        # rows; this one may simply start again.
        raise LtiError(
            "concurrent_launch",
            gettext_noop(
                "Another launch of this course or account was under way at the same moment. "
                "Open the tool again."
            ),
            status=409,
        ) from None


def _username_for(platform: LtiPlatform, sub: str) -> str:
    digest = hashlib.sha256(sub.encode("utf-8")).hexdigest()[:12]
    return f"lti{platform.pk}-{digest}"


def _user_of(platform: LtiPlatform, launch: Launch):
    identity = (
        LtiIdentity.objects.select_for_update()
        .select_related("user")
        .filter(platform=platform, subject=launch.sub)
        .first()
    )
    if identity is None:
        user = get_user_model().objects.create_user(
            _username_for(platform, launch.sub), email=launch.email, password=None
        )
        identity = LtiIdentity(platform=platform, subject=launch.sub, user=user)
    user = identity.user
    if user.is_superuser:
        # A superuser signs in with their password (break-glass), never through an LMS.
        raise LtiError(
            "superuser_launch", gettext_noop("A superuser account cannot sign in through the LMS.")
        )
    if not user.is_active:
        raise LtiError("user_inactive", gettext_noop("This account has been deactivated."))
    foreign = AdminProfile.objects.filter(user=user).exclude(institution_id=platform.institution_id)
    if foreign.exists():
        raise LtiError(
            "role_in_other_institution",
            gettext_noop("This account holds a role in another institution."),
        )
    identity.name, identity.email = launch.name, launch.email
    identity.last_launch = timezone.now()
    identity.save()
    # The LMS's name for the person, so teachers' usage tables and the portal name them (the
    # username is a digest of the LMS's subject). The `name` claim is whole: kept as first name.
    shown = launch.name[: user._meta.get_field("first_name").max_length]
    if shown and (user.first_name, user.last_name) != (shown, ""):
        user.first_name, user.last_name = shown, ""
        user.save(update_fields=["first_name", "last_name"])
    return user


def _course_code(institution_id: int, label: str, context_id: str) -> str:
    base = (label or context_id)[:64].strip() or "course"
    taken = set(
        Course.objects.filter(institution_id=institution_id, code__startswith=base[:56])
        .values_list("code", flat=True)
        .order_by()[:1000]
    )
    if base not in taken:
        return base
    for n in range(2, 10_000):
        code = f"{base[: 64 - len(str(n)) - 1]}-{n}"
        if code not in taken:
            return code
    return f"{base[:48]}-{secrets.token_hex(6)}"


def _launch(*, platform: LtiPlatform, launch: Launch, request) -> Launched:
    user = _user_of(platform, launch)
    institution_id = platform.institution_id
    course = (
        Course.objects.select_for_update()
        .select_related("license")
        .filter(institution_id=institution_id, lti_context_id=launch.context_id)
        .first()
    )
    created = False
    changes: list[str] = []
    if course is None:
        _check_course_license(launch, institution_id)
        if not launch.instructor:
            raise LtiError(
                "course_not_open",
                gettext_noop(
                    "Your teacher has not opened this course on the gateway yet. Ask them to open "
                    "the tool once from the course, then try again."
                ),
            )
        course = Course.objects.create(
            institution_id=institution_id,
            license_id=launch.course_license_id or platform.license_id,
            code=_course_code(institution_id, launch.label, launch.context_id),
            name=(launch.title or launch.label or launch.context_id)[:200],
            allowance=platform.allowance,
            allowance_period=platform.allowance_period,
            lti_context_id=launch.context_id,
        )
        created = True
        changes.append(f"course {course.pk} created")
    elif not course.active:
        raise LtiError(
            "course_inactive", gettext_noop("This course is switched off on the gateway.")
        )
    if launch.instructor:
        changes += _make_teacher(user, course, institution_id)
    else:
        changes += _make_member(user, course, launch.sub)
    for change in changes:
        audit_event_record(
            action=AuditEvent.Action.ROLE_CHANGED,
            request=request,
            actor=user,
            institution=institution_id,
            target=f"user:{user.pk}",
            detail={"change": change, "by": "lti launch", "platform": platform.pk},
        )
        logger.info("LTI launch change for user %s in %s: %s", user.pk, institution_id, change)
    return Launched(user, course, launch.instructor, created, changes)


def _check_course_license(launch: Launch, institution_id: int) -> None:
    """A rule's license deleted (or moved) since the rules were saved refuses the launch."""
    license_id = launch.course_license_id
    if license_id is None or not launch.instructor:
        return
    if not License.objects.filter(pk=license_id, institution_id=institution_id).exists():
        raise LtiError(
            "rule_target_missing",
            gettext_noop("The rule that matched you names a license that no longer exists."),
        )


def _make_teacher(user, course: Course, institution_id: int) -> list[str]:
    changes = []
    profile = AdminProfile.objects.select_for_update().filter(user=user).first()
    if profile is None:
        # An admin's or reviewer's role is never lowered: only a user without one gets it.
        AdminProfile.objects.create(
            user=user, institution_id=institution_id, role=AdminProfile.Role.TEACHER
        )
        changes.append("staff role teacher given")
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    _, made = CourseTeacher.objects.get_or_create(course=course, user=user)
    if made:
        changes.append(f"teacher of course {course.pk}")
    return changes


def _make_member(user, course: Course, sub: str) -> list[str]:
    changes = []
    end_user = EndUser.objects.select_for_update().filter(license=course.license, user=user).first()
    if end_user is None:
        # A student a roster sync added by the LMS's user id (the same `sub`) before their first
        # launch: the launch takes that end user (its membership, keys and wallets).
        end_user = (
            EndUser.objects.select_for_update()
            .filter(license=course.license, subject=sub, issuer=None, user=None)
            .order_by("pk")
            .first()
        )
        if end_user is not None:
            end_user.user = user
            end_user.active = True
            end_user.save(update_fields=["user", "active"])
            changes.append("student role given (synced by the roster)")
    if end_user is None:
        end_user = EndUser.objects.create(
            license=course.license, user=user, subject=sub, issuer=None, active=True
        )
        changes.append("student role given")
    elif not end_user.active:
        end_user.active = True
        end_user.save(update_fields=["active"])
        changes.append("student role given back")
    _, made = CourseMember.objects.get_or_create(course=course, end_user=end_user)
    if made:
        changes.append(f"member of course {course.pk}")
    return changes


# --- the audit rows ---------------------------------------------------------------------------


def launch_record(*, platform: LtiPlatform, launched: Launched, request) -> None:
    sign_in_event_record(
        request=request,
        user=launched.user,
        institution=platform.institution_id,
        detail={
            "method": "lti",
            "platform": platform.pk,
            "course": launched.course.pk,
            "role": "instructor" if launched.instructor else "learner",
            "course_created": launched.course_created,
        },
    )
    logger.info(
        "LTI launch: user %s through platform %s into course %s (%s)",
        launched.user.pk,
        platform.pk,
        launched.course.pk,
        "instructor" if launched.instructor else "learner",
    )


def launch_refusal_record(
    *, error: LtiError, request, platform: LtiPlatform | None = None, who: str = ""
) -> None:
    """A refused launch: an audit row `sign_in_refused` with the reason, and a warning line."""
    audit_event_record(
        action=AuditEvent.Action.SIGN_IN_REFUSED,
        request=request,
        actor_name=who[:254],
        institution=platform.institution_id if platform is not None else None,
        target=f"lti_platform:{platform.pk}" if platform is not None else "",
        detail={"method": "lti", "reason": error.reason, "message": error.message[:300]},
    )
    logger.warning(
        "LTI launch refused (%s) at platform %s: %s",
        error.reason,
        platform.pk if platform is not None else "-",
        error.message,
    )
