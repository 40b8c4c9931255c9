"""Writes of provisioning, each under one transaction: tokens, users, groups, and what a change
of them does to the person (roles by the sign-in mapping, deactivation: sessions end, keys
revoked). Every write is an audit row."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..access.audit import audit_event_record
from ..access.erasure import sessions_end
from ..models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    IdentityProvider,
    Institution,
    ScimGroup,
    ScimToken,
    ScimUser,
    SsoIdentity,
)
from ..signin.access_rules import AttributesRefused, attributes_read, decide, normalise_claims
from ..signin.sso import NO_ROLE, _apply_roles
from . import selectors, wire

MAX_TEXT = wire.MAX_TEXT


# --- tokens ----------------------------------------------------------------------------------


COMMAND = "manage.py scim_token"
USE_NOTED_EVERY = timedelta(minutes=1)  # a token's last use: one write a minute at most


@transaction.atomic
def do_create_scim_token(
    *, institution: Institution, rotate: bool = False, actor: str = COMMAND, request=None
) -> str:
    """A new token (shown once), the institution's one active token; `rotate` revokes the
    one before it, without it an institution that has one is refused."""
    current = ScimToken.objects.select_for_update().filter(institution=institution, active=True)
    if current.exists() and not rotate:
        raise ValueError("The institution has a SCIM token: --rotate to replace it")
    revoked = current.update(active=False, revoked_at=timezone.now())
    token = selectors.TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ScimToken.objects.create(
        institution=institution, prefix=token[:12], digest=selectors.token_digest(token)
    )
    _token_record(row, "rotated" if revoked else "created", actor, request)
    return token


@transaction.atomic
def do_revoke_scim_token(*, institution: Institution, actor: str = COMMAND, request=None) -> int:
    return _revoke(ScimToken.objects.filter(institution=institution), actor, request)


@transaction.atomic
def do_revoke_scim_tokens(*, tokens, actor: str, request=None) -> int:
    """The admin's action: these tokens (a queryset the caller scoped) stop working now."""
    return _revoke(tokens, actor, request)


def _revoke(tokens, actor: str, request) -> int:
    rows = list(tokens.select_for_update().filter(active=True))
    for row in rows:
        row.active, row.revoked_at = False, timezone.now()
        row.save(update_fields=["active", "revoked_at"])
        _token_record(row, "revoked", actor, request)
    return len(rows)


@transaction.atomic
def do_note_scim_token_use(*, token: ScimToken) -> None:
    """The token's last use, for the admin's list; written once a minute at most, so that an
    identity system's burst of pushes costs one write."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= USE_NOTED_EVERY:
        ScimToken.objects.filter(pk=token.pk).update(last_used_at=now)


def _token_record(row: ScimToken, change: str, actor: str, request) -> None:
    audit_event_record(
        action=AuditEvent.Action.SCIM_TOKEN_CHANGED,
        request=request,
        actor_name=actor,
        institution=row.institution_id,
        target=f"scim_token:{row.pk}",
        detail={"change": change, "prefix": row.prefix},
    )


# --- roles and deactivation -------------------------------------------------------------------


def group_roles_apply(row: ScimUser, request=None) -> list[str]:
    """The person's roles from their groups' names by the access rules (licensing.signin),
    the one place SCIM decides roles: a deactivated person holds none. The institution's
    identity provider holds the mapping; without one, SCIM gives no role."""
    provider = IdentityProvider.objects.filter(institution_id=row.institution_id).first()
    if provider is None:
        return []
    groups = list(row.groups.values_list("display_name", flat=True))
    decision = NO_ROLE
    if row.active:
        rules = provider.access_rules
        claims = {provider.groups_claim: groups}
        try:  # the access rules, as at a sign-in: the groups are the groups claim
            decision = decide(rules, normalise_claims(claims, attributes_read(rules)))
        except AttributesRefused:
            decision = NO_ROLE  # group names no rule may read: no role (SCIM checked them)
    return _apply_roles(provider, row.user, decision, request, _subject(row))


def _subject(row: ScimUser) -> str:
    return row.external_id or row.user_name


def _keys_revoke(row: ScimUser) -> int:
    """Every key of the person's end users in the institution: portal keys and course keys."""
    keys = ApiKey.objects.select_for_update().filter(
        end_user__user=row.user, license__institution_id=row.institution_id, active=True
    )
    revoked = 0
    for key in keys:
        key.active = False
        key.save(update_fields=["active", "updated_at"])  # post_save clears the API caches
        revoked += 1
    return revoked


def _deactivate(row: ScimUser, request, who: str) -> None:
    user = row.user
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    keys = _keys_revoke(row)
    sessions = sessions_end(user.pk)
    changes = group_roles_apply(row, request)
    audit_event_record(
        action=AuditEvent.Action.USER_DEACTIVATED,
        request=request,
        actor_name=who,
        institution=row.institution_id,
        target=f"user:{user.pk}",
        detail={"by": "scim", "sessions_ended": sessions, "keys_revoked": keys, "roles": changes},
    )


# --- users -------------------------------------------------------------------------------------


def _text(value: Any, name: str) -> str:
    text = "" if value is None else str(value)
    if len(text) > MAX_TEXT:
        raise wire.ScimRefusal(400, f"{name} is longer than {MAX_TEXT} characters.", "invalidValue")
    return text


def _email_of(resource: Any) -> str:
    emails = resource.emails or []
    chosen = next((e for e in emails if e.primary), None) or next(
        (e for e in emails if e.type == "work"), None
    )
    chosen = chosen or (emails[0] if emails else None)
    value = str(chosen.value) if chosen is not None and chosen.value else ""
    return value.lower() if len(value) <= 254 and "@" in value else ""


def _user_fields(row: ScimUser, resource: Any) -> None:
    row.user_name = _text(resource.user_name, "userName").strip()
    if not row.user_name:
        raise wire.ScimRefusal(400, "userName is required.", "invalidValue")
    row.external_id = _text(resource.external_id, "externalId")
    row.active = resource.active is not False
    resource.password = None
    row.resource = wire.stored(resource)
    taken = ScimUser.objects.filter(
        institution_id=row.institution_id, user_name__iexact=row.user_name
    ).exclude(pk=row.pk)
    if taken.exists():
        raise wire.ScimRefusal(409, "A user of this userName exists.", "uniqueness")


def _django_user_fields(row: ScimUser, resource: Any) -> None:
    user = row.user
    name = resource.name
    user.email = _email_of(resource)
    user.first_name = ((name.given_name if name else None) or "")[:150]
    user.last_name = ((name.family_name if name else None) or "")[:150]
    if row.active:
        user.is_active = True
    user.save(update_fields=["email", "first_name", "last_name", "is_active"])


def _person_for(institution_id: int, subject: str, email: str):
    """The Django user of this subject: the one who already signed in through the
    institution's identity provider, or a new one (without a password) linked to it, so that a
    later sign-in finds the same person."""
    provider = IdentityProvider.objects.filter(institution_id=institution_id).first()
    identity = None
    if provider is not None:
        identity = SsoIdentity.objects.filter(provider=provider, subject=subject).first()
    if identity is not None:
        user = identity.user
        foreign = AdminProfile.objects.filter(user=user).exclude(institution_id=institution_id)
        if user.is_superuser or foreign.exists() or hasattr(user, "scim_user"):
            raise wire.ScimRefusal(409, "This person cannot be provisioned here.", "uniqueness")
        return user
    User = get_user_model()
    name = email if email and not User.objects.filter(username__iexact=email).exists() else ""
    digest = hashlib.sha256(f"{institution_id}:{subject}".encode()).hexdigest()[:12]
    user = User.objects.create_user(name or f"scim{institution_id}-{digest}", password=None)
    if provider is not None:
        SsoIdentity.objects.create(provider=provider, subject=subject, user=user, email=email)
    return user


@transaction.atomic
def do_create_user(*, institution_id: int, data: dict[str, Any], request, who: str) -> ScimUser:
    resource = wire.user_in(data)
    row = ScimUser(institution_id=institution_id)
    _user_fields(row, resource)
    row.user = _person_for(institution_id, _subject(row), _email_of(resource))
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError as exc:
        raise wire.ScimRefusal(409, "This user is provisioned already.", "uniqueness") from exc
    _django_user_fields(row, resource)
    _changed(row, "user_created", request, who)
    if not row.active:
        _deactivate(row, request, who)
    else:
        group_roles_apply(row, request)
    return row


def _user_saved(row: ScimUser, resource: Any, request, who: str, change: str) -> ScimUser:
    was_active = row.user.is_active
    _user_fields(row, resource)
    row.save()
    _django_user_fields(row, resource)
    _changed(row, change, request, who)
    if not row.active:
        _deactivate(row, request, who)
    else:
        if not was_active:
            _changed(row, "user_reactivated", request, who)
        group_roles_apply(row, request)
    return row


@transaction.atomic
def do_replace_user(
    *, institution_id: int, scim_id: str, data: dict[str, Any], request, who: str
) -> ScimUser:
    row = _locked_user(institution_id, scim_id)
    resource = wire.user_in(data, replacing=True)
    return _user_saved(row, resource, request, who, "user_replaced")


@transaction.atomic
def do_patch_user(
    *, institution_id: int, scim_id: str, data: dict[str, Any], request, who: str
) -> ScimUser:
    row = _locked_user(institution_id, scim_id)
    resource = selectors.user_resource(row, "")
    resource.meta = None
    resource = wire.patched(wire.UserModel, resource, data)
    return _user_saved(row, resource, request, who, "user_patched")


@transaction.atomic
def do_delete_user(*, institution_id: int, scim_id: str, request, who: str) -> None:
    """The person deactivated (sessions, keys, roles) and their SCIM record gone; the Django
    user stays, inactive, for the ledger's and the audit log's history."""
    row = _locked_user(institution_id, scim_id)
    row.active = False
    row.save(update_fields=["active"])
    _deactivate(row, request, who)
    _changed(row, "user_deleted", request, who)
    row.groups.clear()
    row.delete()


def _locked_user(institution_id: int, scim_id: str) -> ScimUser:
    row = selectors.user_row(institution_id, scim_id, lock=True)
    if row is None:
        raise wire.ScimRefusal(404, f"No user {scim_id[:100]}.")
    return row


def _changed(row: ScimUser | ScimGroup, change: str, request, who: str) -> None:
    name = row.user_name if isinstance(row, ScimUser) else row.display_name
    audit_event_record(
        action=AuditEvent.Action.SCIM_CHANGED,
        request=request,
        actor_name=who,
        institution=row.institution_id,
        target=f"user:{row.user_id}" if isinstance(row, ScimUser) else f"scim_group:{row.pk}",
        detail={"change": change, "scim_id": str(row.scim_id), "name": name},
    )


# --- groups ------------------------------------------------------------------------------------


def _group_saved(row: ScimGroup, resource: Any, request, who: str, change: str) -> ScimGroup:
    """Name, external id and members written; every member before or after has their roles
    made again (a name may be what gives the role)."""
    row.display_name = _text(resource.display_name, "displayName").strip()
    if not row.display_name:
        raise wire.ScimRefusal(400, "displayName is required.", "invalidValue")
    row.external_id = _text(resource.external_id, "externalId")
    if len(resource.members or []) > wire.MAX_MEMBERS:
        raise wire.ScimRefusal(400, f"More than {wire.MAX_MEMBERS} members.", "tooMany")
    ids = [str(member.value) for member in resource.members or []]
    members = selectors.members_of(row.institution_id, ids)
    taken = ScimGroup.objects.filter(
        institution_id=row.institution_id, display_name__iexact=row.display_name
    ).exclude(pk=row.pk)
    if taken.exists():
        raise wire.ScimRefusal(409, "A group of this displayName exists.", "uniqueness")
    row.member_displays = _displays_sent(resource.members or [], members)
    before = set(row.members.all()) if row.pk else set()
    row.save()
    row.members.set(members)
    _changed(row, change, request, who)
    for person in sorted(before | set(members), key=lambda m: m.pk):
        group_roles_apply(person, request)
    return row


def _displays_sent(sent: list, members: list[ScimUser]) -> dict[str, str]:
    """The members' `display` texts the client sent that differ from the person's own name
    (an echo of what we answered is not kept: a later rename of the person shows)."""
    person = {str(member.scim_id): member for member in members}
    displays = {}
    for member in sent:
        key, text = str(member.value), member.display
        if text and key in person and text != selectors.member_display(person[key]):
            displays[key] = _text(text, "members.display")
    return displays


@transaction.atomic
def do_create_group(*, institution_id: int, data: dict[str, Any], request, who: str) -> ScimGroup:
    resource = wire.group_in(data)
    return _group_saved(
        ScimGroup(institution_id=institution_id), resource, request, who, "group_created"
    )


@transaction.atomic
def do_replace_group(
    *, institution_id: int, scim_id: str, data: dict[str, Any], request, who: str
) -> ScimGroup:
    row = _locked_group(institution_id, scim_id)
    resource = wire.group_in(data, replacing=True)
    return _group_saved(row, resource, request, who, "group_replaced")


@transaction.atomic
def do_patch_group(
    *, institution_id: int, scim_id: str, data: dict[str, Any], request, who: str
) -> ScimGroup:
    """Under the group's row lock: two PATCHes of one group (Entra sends members in batches)
    apply one after the other, and no member is lost."""
    row = _locked_group(institution_id, scim_id)
    resource = selectors.group_resource(row, "")
    resource.meta = None
    resource = wire.patched(wire.GroupModel, resource, data)
    return _group_saved(row, resource, request, who, "group_patched")


@transaction.atomic
def do_delete_group(*, institution_id: int, scim_id: str, request, who: str) -> None:
    row = _locked_group(institution_id, scim_id)
    members = list(row.members.all())
    _changed(row, "group_deleted", request, who)
    row.members.clear()
    row.delete()
    for person in members:
        group_roles_apply(person, request)


def _locked_group(institution_id: int, scim_id: str) -> ScimGroup:
    row = selectors.group_row(institution_id, scim_id, lock=True)
    if row is None:
        raise wire.ScimRefusal(404, f"No group {scim_id[:100]}.")
    return row
