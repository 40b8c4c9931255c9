"""Single sign-on with an institution's OpenID Connect provider: its configuration, and what a
verified sign-in does to users and roles (docs/sso.md). The protocol is licensing.signin.oidc;
the HTTP views are licensing.signin.sso_views.

A person is found by `SsoIdentity(provider, sub)`, never by e-mail: an e-mail address is only
a user name when it is free, and only when the IdP says it is verified. Roles come from the
groups claim at every sign-in, in the provider's own institution only; a role the groups no
longer give is taken away (staff: the profile and is_staff; student: the end user deactivated
and its portal keys revoked).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop

from core.config import get_config
from core.crypto import reveal
from core.outbound import Refused, validate_outbound_url
from core.text import is_storable_text

from ..access.audit import audit_event_record, sign_in_event_record
from ..models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    Course,
    CourseMember,
    CourseTeacher,
    EndUser,
    IdentityProvider,
    Institution,
    License,
    SsoIdentity,
)
from .access_rules import (
    AccessDecision,
    AttributesRefused,
    attributes_read,
    decide,
    normalise_claims,
    validate_rules,
)

logger = logging.getLogger("gateway")

MAX_GROUPS = 200  # groups of one claim looked at (Entra sends up to 200 in an id_token)
MAX_GROUP_LENGTH = 255
STAFF_ROLE_NAMES = frozenset(
    (
        AdminProfile.Role.ADMIN,
        AdminProfile.Role.REVIEWER,
        AdminProfile.Role.TEACHER,
        AdminProfile.Role.SAFEGUARDING,
    )
)
NO_ROLE = AccessDecision(role=None, license_id=None, course_ids=(), rule_index=None)


class SignInRefused(Exception):
    """A verified token whose holder may not sign in: `reason` (audit), `message` (people)."""

    def __init__(self, reason: str, message: str, *, status: int = 403, contacts=()):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status
        self.contacts: tuple[str, ...] = tuple(contacts)


# --- configuration ---------------------------------------------------------------------------


def validate_groups(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ValidationError(f"{name}: a list of group names")
    groups: list[str] = []
    for group in value:
        if not isinstance(group, str) or not group.strip():
            raise ValidationError(f"{name}: group names are non-empty strings")
        if not is_storable_text(group):
            raise ValidationError(f"{name}: a group name holds a NUL or a lone surrogate")
        if len(group) > MAX_GROUP_LENGTH:
            raise ValidationError(f"{name}: a group name is longer than {MAX_GROUP_LENGTH}")
        if group not in groups:
            groups.append(group)
    return groups


def validate_domains(value: Any) -> str:
    if isinstance(value, str):
        value = [part for part in value.split(",")]
    domains = []
    for raw in value or []:
        domain = str(raw).strip().lower().lstrip("@")
        if not domain:
            continue
        if (
            not domain.isascii()
            or "." not in domain
            or any(not (c.isalnum() or c in ".-") for c in domain)
        ):
            raise ValidationError(f"Not an e-mail domain: {domain!r} (xn-- form for IDNs)")
        if domain not in domains:
            domains.append(domain)
    text = ",".join(domains)
    if len(text) > 500:
        raise ValidationError(_("Too many e-mail domains (500 characters in all)"))
    return text


def _text(value: Any, name: str, limit: int, *, required: bool = False) -> str:
    if not isinstance(value, str):
        value = "" if value is None else str(value)
    if not is_storable_text(value):
        raise ValidationError(f"{name} holds a NUL or a lone surrogate")
    value = value.strip()
    if required and not value:
        raise ValidationError(f"{name} is required")
    if len(value) > limit:
        raise ValidationError(f"{name} is longer than {limit} characters")
    return value


def validate_issuer(value: Any) -> str:
    """The issuer URL as stored (no trailing slash), checked by the outbound URL guard."""
    issuer = _text(value, "The issuer", 500, required=True).rstrip("/")
    try:
        validate_outbound_url(issuer)
    except Refused as exc:
        raise ValidationError(f"The issuer URL is refused: {exc.message}") from exc
    return issuer


@transaction.atomic
def identity_provider_configure(
    *,
    institution: Institution,
    issuer: str,
    client_id: str,
    client_secret: str | None = None,
    client_secret_env: str | None = None,
    groups_claim: str = "groups",
    admin_groups: list[str] | None = None,
    reviewer_groups: list[str] | None = None,
    teacher_groups: list[str] | None = None,
    student_groups: list[str] | None = None,
    student_license: License | None = None,
    access_rules: list[dict] | None = None,
    sso_only: bool = False,
    email_domains: list[str] | str | None = None,
    active: bool = True,
    actor=None,
    request=None,
) -> IdentityProvider:
    """Create or update the institution's provider (the command and the admin's form both
    come here). Exactly one of `client_secret` / `client_secret_env` when creating; on update
    a None keeps what is stored. The roles: group mappings (written as rules by the model) or
    `access_rules`, not both; with neither, the stored rules stay."""
    issuer = validate_issuer(issuer)
    client_id = _text(client_id, "The client id", 255, required=True)
    provider, created = _provider_for_update(institution, issuer)
    mapped = provider_mapping_set(
        provider,
        {
            "groups_claim": groups_claim,
            "admin_groups": admin_groups,
            "reviewer_groups": reviewer_groups,
            "teacher_groups": teacher_groups,
            "student_groups": student_groups,
            "student_license": student_license,
            "sso_only": sso_only,
            "email_domains": email_domains,
            "active": active,
            "access_rules": access_rules,
        },
        institution=institution,
    )
    _client_secret_set(provider, client_secret, client_secret_env, created=created)
    provider.protocol = IdentityProvider.Protocol.OIDC
    provider.issuer = issuer
    provider.client_id = client_id
    provider.save()
    _provider_configured_record(
        institution, provider, created, mapped, actor=actor, request=request
    )
    logger.info(
        "SSO %s for %s: issuer %s", "configured" if created else "updated", institution, issuer
    )
    return provider


def provider_mapping_set(
    provider: IdentityProvider, mapping: dict[str, Any], *, institution: Institution
) -> dict[str, list[str]]:
    """The options every protocol shares (the groups claim, the four role mappings, the
    student license, sso_only, the e-mail domains, active) checked and set on the provider,
    unsaved; the role mappings returned for the audit row."""
    groups_claim = _text(
        mapping.get("groups_claim") or "groups", "The groups claim", 100, required=True
    )
    student_license = mapping.get("student_license")
    if student_license is not None and student_license.institution_id != institution.pk:
        raise ValidationError(_("The student license must belong to the same institution"))
    mapped = _mapped_groups(
        student_license,
        mapping.get("admin_groups"),
        mapping.get("reviewer_groups"),
        mapping.get("teacher_groups"),
        mapping.get("student_groups"),
    )
    _access_rules_set(provider, mapping.get("access_rules"), mapped, institution)
    provider.groups_claim = groups_claim
    for name, groups in mapped.items():
        setattr(provider, name, groups)
    provider.student_license = student_license
    provider.sso_only = bool(mapping.get("sso_only"))
    provider.email_domains = validate_domains(mapping.get("email_domains"))
    provider.active = mapping.get("active", True)
    return mapped


def _access_rules_set(
    provider: IdentityProvider, access_rules: Any, mapped: dict[str, list[str]], institution
) -> None:
    """Rules written by hand (None: the stored ones stay); not beside group mappings, which
    the model writes as rules of their own."""
    if access_rules is None:
        return
    rules = validate_rules(access_rules, institution_id=institution.pk)
    if rules and any(mapped.values()):
        raise ValidationError(_("Give either group mappings or access rules, not both"))
    provider.access_rules = rules


def _mapped_groups(
    student_license: License | None,
    admin_groups: Any,
    reviewer_groups: Any,
    teacher_groups: Any,
    student_groups: Any,
) -> dict[str, list[str]]:
    """The four role mappings checked, by field name; student groups need a license."""
    mapped = {
        "admin_groups": validate_groups(admin_groups, "admin groups"),
        "reviewer_groups": validate_groups(reviewer_groups, "reviewer groups"),
        "teacher_groups": validate_groups(teacher_groups, "teacher groups"),
        "student_groups": validate_groups(student_groups, "student groups"),
    }
    if mapped["student_groups"] and student_license is None:
        raise ValidationError(_("Student groups need a student license"))
    return mapped


def _provider_for_update(institution: Institution, issuer: str) -> tuple[IdentityProvider, bool]:
    """The institution's provider, locked, or a new one (unsaved); an issuer is one
    institution's."""
    other = IdentityProvider.objects.filter(issuer=issuer).exclude(institution=institution)
    if other.exists():
        raise ValidationError(_("Another institution already uses this issuer"))
    provider = IdentityProvider.objects.select_for_update().filter(institution=institution).first()
    if provider is None:
        return IdentityProvider(institution=institution), True
    return provider, False


def _client_secret_set(
    provider: IdentityProvider,
    client_secret: str | None,
    client_secret_env: str | None,
    *,
    created: bool,
) -> None:
    """The secret or the name of its variable, never both; None keeps the stored one."""
    if client_secret is not None and client_secret_env is not None:
        raise ValidationError(_("Give the client secret or its environment variable, not both"))
    if client_secret is not None:
        provider.client_secret = _text(client_secret, "The client secret", 1000, required=True)
        provider.client_secret_env = ""
    elif client_secret_env is not None:
        name = _text(client_secret_env, "The variable name", 100, required=True)
        if not name.replace("_", "").isalnum() or not name.isascii() or name[0].isdigit():
            raise ValidationError(f"Not an environment variable name: {name!r}")
        provider.client_secret_env, provider.client_secret = name, ""
    elif created:
        raise ValidationError(_("A new provider needs a client secret or its environment variable"))


def _provider_configured_record(
    institution: Institution,
    provider: IdentityProvider,
    created: bool,
    mapped: dict[str, list[str]],
    *,
    actor,
    request,
    command: str = "manage.py configure_sso",
) -> None:
    audit_event_record(
        action=AuditEvent.Action.SSO_CONFIGURED,
        request=request,
        actor=actor,
        actor_name="" if actor or request else command,
        institution=institution,
        target=f"identity_provider:{provider.pk}",
        detail={
            "created": created,
            "issuer": provider.issuer,
            "client_id": provider.client_id,
            "sso_only": provider.sso_only,
            **mapped,
            "access_rules": provider.access_rules,
        },
    )


def client_secret_of(provider: IdentityProvider) -> str:
    """The secret, from the environment when the row names a variable (read at each use)."""
    if provider.client_secret_env:
        return os.environ.get(provider.client_secret_env, "")
    return reveal(provider.client_secret)


# --- selectors -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderChoice:
    id: int
    institution: str


# More buttons than this, and the login pages also offer the e-mail field that finds the
# institution by its domain.
PROVIDERS_LISTED_ALONE = 5


def sign_in_providers(*, students_only: bool = False) -> list[ProviderChoice]:
    """The buttons of the login pages: every active provider (the portal: those with a
    student license, or a rule that names one), by institution name."""
    rows = IdentityProvider.objects.filter(active=True).select_related("institution")
    rows = rows.order_by("institution__name")
    return [
        ProviderChoice(p.pk, p.institution.name)
        for p in rows
        if not students_only
        or p.student_license_id is not None
        or any(rule.get("license") for rule in p.access_rules or [])
    ]


def provider_for_email(email: str) -> IdentityProvider | None:
    """The active provider whose e-mail domains hold this address's domain."""
    if not isinstance(email, str) or "@" not in email or len(email) > 254:
        return None
    domain = email.rsplit("@", 1)[1].strip().lower()
    if not domain:
        return None
    for provider in IdentityProvider.objects.filter(active=True, email_domains__icontains=domain):
        if domain in provider.email_domains.split(","):
            return provider
    return None


def admin_contacts(institution_id: int) -> list[str]:
    """Whom a refused person may ask: the e-mails of the institution's admins."""
    emails = (
        AdminProfile.objects.filter(
            institution_id=institution_id, role=AdminProfile.Role.ADMIN, user__is_active=True
        )
        .exclude(user__email="")
        .order_by("user__email")
        .values_list("user__email", flat=True)
    )
    return list(emails[:5])


# --- sign-in ---------------------------------------------------------------------------------


@dataclass
class SignedIn:
    user: Any
    staff_role: str | None
    student: bool
    changes: list[str] = field(default_factory=list)


def groups_of(claims: dict[str, Any], claim: str) -> list[str]:
    """The groups claim as a list of strings (one string is one group; anything else: none)."""
    value = claims.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [g for g in value[:MAX_GROUPS] if isinstance(g, str) and 0 < len(g) <= 255]


def access_decision(provider: IdentityProvider, claims: dict[str, Any]) -> AccessDecision:
    """What the provider's rules give these claims (only the attributes they read are
    looked at); raises AttributesRefused."""
    rules = provider.access_rules or []
    return decide(rules, normalise_claims(claims, attributes_read(rules)))


def _verified_email(claims: dict[str, Any]) -> str | None:
    email = claims.get("email")
    if not isinstance(email, str) or not email or len(email) > 254 or "@" not in email:
        return None
    if not is_storable_text(email):
        return None
    return email.strip().lower()


def _username_for(provider: IdentityProvider, sub: str, email: str | None) -> str:
    User = get_user_model()
    if email and not User.objects.filter(username__iexact=email).exists():
        return email
    digest = hashlib.sha256(sub.encode("utf-8")).hexdigest()[:12]
    return f"sso{provider.pk}-{digest}"


def sign_in_complete(
    *, provider: IdentityProvider, claims: dict[str, Any], request=None
) -> SignedIn:
    """What a verified id_token does: the user (found or created by provider and `sub`), their
    roles from the groups claim in the provider's institution. Raises SignInRefused; a refusal
    for lack of a mapped group still takes away the roles the user held (committed)."""
    try:
        with transaction.atomic():
            outcome = _sign_in(provider=provider, claims=claims, request=request)
    except IntegrityError:
        # Two first sign-ins of one person at once (or of one e-mail address as user name):
        # the other one made the user; this one may simply start again.
        outcome = SignInRefused(
            "concurrent_sign_in",
            gettext_noop(
                gettext_noop(
                    "Another sign-in of this account was under way at the same moment. Try again."
                )
            ),
            status=409,
        )
    if isinstance(outcome, SignInRefused):
        raise outcome
    return outcome


def _verified(claims: dict[str, Any]) -> bool:
    # `email_verified` is OpenID Connect's; Entra ID sends none and offers the optional claim
    # `xms_edov` (the e-mail's domain is verified by the tenant) instead (docs/sso.md).
    return claims.get("email_verified") is True or claims.get("xms_edov") is True


def _sign_in(
    *, provider: IdentityProvider, claims: dict[str, Any], request
) -> SignedIn | SignInRefused:
    sub: str = claims["sub"]
    email = _verified_email(claims)
    refused = _email_refusal(provider, claims)
    if refused is not None:
        return refused
    groups = groups_of(claims, provider.groups_claim)
    decision = _decided(provider, claims)
    if isinstance(decision, SignInRefused):
        return decision
    staff_role = decision.role if decision.role in STAFF_ROLE_NAMES else None
    student = decision.license_id is not None
    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(provider=provider, subject=sub)
        .first()
    )
    user = identity.user if identity is not None else None
    refused = _user_refusal(provider, user) if user is not None else None
    if refused is not None:
        return refused
    if staff_role is None and not student:
        if user is not None:
            _apply_roles(provider, user, NO_ROLE, request, sub)  # groups gone: roles gone
        return _refusal(
            provider,
            "no_mapped_group",
            gettext_noop(
                "None of your groups at your identity provider is one this gateway gives a role to."
            ),
        )
    if identity is None:
        identity = _identity_created(provider, sub, email)
    user = identity.user
    if email and user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    changes = _apply_roles(provider, user, decision, request, sub)
    # The e-mail is saved only when it changed: a front-end key finds students by it, and its
    # save clears the API's caches (licensing.signals).
    fields = ["groups", "last_sign_in"] + (["email"] if identity.email != (email or "") else [])
    identity.email = email or ""
    identity.groups = groups
    identity.last_sign_in = timezone.now()
    identity.save(update_fields=fields)
    return SignedIn(user=user, staff_role=staff_role, student=student, changes=changes)


def _decided(provider: IdentityProvider, claims: dict[str, Any]) -> AccessDecision | SignInRefused:
    try:
        decision = access_decision(provider, claims)
    except AttributesRefused as exc:
        return _refusal(provider, "invalid_attributes", exc.message)
    return _decision_refusal(provider, decision) or decision


def _decision_refusal(provider: IdentityProvider, decision: AccessDecision) -> SignInRefused | None:
    """A rule naming a license or course the institution no longer has (deleted since the
    rules were saved) refuses rather than giving something else."""
    institution_id = provider.institution_id
    missing = decision.license_id is not None and not (
        License.objects.filter(pk=decision.license_id, institution_id=institution_id).exists()
    )
    courses = set(decision.course_ids)
    if courses and Course.objects.filter(
        pk__in=courses, institution_id=institution_id
    ).count() != len(courses):
        missing = True
    if not missing:
        return None
    return _refusal(
        provider,
        "rule_target_missing",
        gettext_noop("The rule that matched you names a license or course that no longer exists."),
    )


def _refusal(provider: IdentityProvider, reason: str, message: str) -> SignInRefused:
    return SignInRefused(reason, message, contacts=admin_contacts(provider.institution_id))


def _email_refusal(provider: IdentityProvider, claims: dict[str, Any]) -> SignInRefused | None:
    """An e-mail address the IdP does not say is verified is never a user name nor stored:
    refused rather than guessed."""
    if claims.get("email") in (None, "") or _verified(claims):
        return None
    return _refusal(
        provider,
        "email_not_verified",
        gettext_noop("Your identity provider says your e-mail address is not verified."),
    )


def _user_refusal(provider: IdentityProvider, user) -> SignInRefused | None:
    """Why the known user of this identity may not sign in through it, if they may not."""
    foreign = AdminProfile.objects.filter(user=user).exclude(institution_id=provider.institution_id)
    if foreign.exists() or user.is_superuser:
        # A superuser signs in with their password (break-glass), never through an IdP.
        return _refusal(
            provider,
            "role_in_other_institution",
            gettext_noop("This account holds a role in another institution."),
        )
    if not user.is_active:
        return _refusal(provider, "user_inactive", "This account has been deactivated.")
    return None


def _identity_created(provider: IdentityProvider, sub: str, email: str | None) -> SsoIdentity:
    """A first sign-in: a user without a password, named by the verified e-mail when free."""
    User = get_user_model()
    user = User.objects.create_user(
        _username_for(provider, sub, email), email=email or "", password=None
    )
    return SsoIdentity.objects.create(provider=provider, subject=sub, user=user)


def _apply_roles(
    provider: IdentityProvider, user, decision: AccessDecision, request, sub: str
) -> list[str]:
    """Make the user's roles in the provider's institution what the rules say; every change
    is an audit row `role_changed`."""
    staff_role = decision.role if decision.role in STAFF_ROLE_NAMES else None
    changes: list[str] = []
    institution_id = provider.institution_id
    profile = AdminProfile.objects.select_for_update().filter(user=user).first()
    if profile is not None and profile.institution_id != institution_id:
        return changes  # never touched from another institution's IdP (refused above)
    before = profile.role if profile is not None else None
    if staff_role is None and profile is not None:
        profile.delete()
        changes.append(f"staff role {before} removed")
    elif staff_role is not None and profile is None:
        AdminProfile.objects.create(
            user=user, institution_id=institution_id, role=staff_role, managed_by_idp=True
        )
        changes.append(f"staff role {staff_role} given")
    elif (
        staff_role is not None
        and profile is not None
        and (profile.role != staff_role or not profile.managed_by_idp)
    ):
        profile.role, profile.managed_by_idp = staff_role, True
        profile.save(update_fields=["role", "managed_by_idp"])
        if before != staff_role:
            changes.append(f"staff role {before} -> {staff_role}")
    is_staff = staff_role is not None or user.is_superuser
    if user.is_staff != is_staff:
        user.is_staff = is_staff
        user.save(update_fields=["is_staff"])
    changes += _apply_student(provider, user, decision.license_id, sub)
    changes += _apply_courses(user, decision, institution_id)
    for change in changes:
        audit_event_record(
            action=AuditEvent.Action.ROLE_CHANGED,
            request=request,
            actor=user,
            institution=institution_id,
            target=f"user:{user.pk}",
            detail={"change": change, "by": "identity provider", "provider": provider.pk},
        )
        logger.info("SSO role change for user %s in %s: %s", user.pk, institution_id, change)
    return changes


def _apply_student(provider: IdentityProvider, user, license_id: int | None, sub: str) -> list[str]:
    """The user is an active end user on `license_id` (None: on none) of the institution; an
    end user on another license is deactivated and its portal keys revoked (a pupil moved to
    another tier starts on that license's wallet)."""
    student = license_id is not None
    end_users = EndUser.objects.select_for_update().filter(
        user=user, license__institution_id=provider.institution_id
    )
    changes: list[str] = []
    if student and license_id is not None:
        end_user = next((e for e in end_users if e.license_id == license_id), None)
        if end_user is None:
            EndUser.objects.create(
                license_id=license_id, user=user, subject=sub, issuer=None, active=True
            )
            changes.append("student role given")
        elif not end_user.active:
            end_user.active = True
            end_user.save(update_fields=["active"])
            changes.append("student role given back")
        others = [e for e in end_users if e.license_id != license_id and e.active]
    else:
        others = [e for e in end_users if e.active]
    for end_user in others:
        end_user.active = False
        end_user.save(update_fields=["active"])
        revoked = 0
        for key in ApiKey.objects.select_for_update().filter(end_user=end_user, active=True):
            key.active = False
            key.save(update_fields=["active", "updated_at"])  # post_save clears the API caches
            revoked += 1
        changes.append(f"student role removed ({revoked} portal keys revoked)")
    return changes


def _apply_courses(user, decision: AccessDecision, institution_id: int) -> list[str]:
    """The rule's courses joined (never left: a course's own roster is its teachers'): a
    teacher teaches them, a student is a member with the end user of the course's license."""
    changes: list[str] = []
    courses = Course.objects.filter(pk__in=decision.course_ids, institution_id=institution_id)
    for course in courses:
        if decision.role in STAFF_ROLE_NAMES:
            _, made = CourseTeacher.objects.get_or_create(course=course, user=user)
            what = "teacher"
        else:
            end_user = EndUser.objects.filter(user=user, license_id=course.license_id).first()
            if end_user is None or not end_user.active:
                continue  # a course on another license than the rule's: no seat there
            _, made = CourseMember.objects.get_or_create(course=course, end_user=end_user)
            what = "member"
        if made:
            changes.append(f"{what} of course {course.pk}")
    return changes


# --- the audit rows of sign-ins --------------------------------------------------------------


def sign_in_record(*, provider: IdentityProvider, signed_in: SignedIn, request) -> None:
    sign_in_event_record(
        request=request,
        user=signed_in.user,
        institution=provider.institution_id,
        detail={
            "method": "sso",
            "provider": provider.pk,
            "staff_role": signed_in.staff_role,
            "student": signed_in.student,
        },
    )
    logger.info(
        "SSO sign-in: user %s through provider %s (%s, student=%s)",
        signed_in.user.pk,
        provider.pk,
        signed_in.staff_role,
        signed_in.student,
    )


def sign_in_refusal_record(
    *,
    reason: str,
    message: str,
    request,
    provider: IdentityProvider | None = None,
    who: str = "",
) -> None:
    """A refused sign-in: an audit row `sign_in_refused` with the reason, and a warning line."""
    audit_event_record(
        action=AuditEvent.Action.SIGN_IN_REFUSED,
        request=request,
        actor_name=who,
        institution=provider.institution_id if provider is not None else None,
        target=f"identity_provider:{provider.pk}" if provider is not None else "",
        detail={"reason": reason, "message": message[:300]},
    )
    logger.warning(
        "SSO sign-in refused (%s) at provider %s: %s",
        reason,
        provider.pk if provider is not None else "-",
        message,
    )


def sso_only_provider_of(user) -> IdentityProvider | None:
    """The `sso_only` provider of an institution the user belongs to (a role, an SSO identity
    or a portal end user), if any."""
    institutions = set(
        AdminProfile.objects.filter(user=user).values_list("institution_id", flat=True)
    )
    institutions |= set(
        SsoIdentity.objects.filter(user=user).values_list("provider__institution_id", flat=True)
    )
    institutions |= set(
        EndUser.objects.filter(user=user).values_list("license__institution_id", flat=True)
    )
    if not institutions:
        return None
    return (
        IdentityProvider.objects.select_related("institution")
        .filter(institution_id__in=institutions, sso_only=True, active=True)
        .first()
    )


def redirect_uri_of(provider_id: int, base_url: str | None = None) -> str:
    """The callback URL to register at the IdP: GATEWAY_PUBLIC_URL (or `base_url`) and the
    provider's own callback path (one per provider: an answer is never taken as another's)."""
    base = (base_url or get_config().GATEWAY_PUBLIC_URL).rstrip("/")
    return base + reverse("sso-callback", args=[provider_id])
