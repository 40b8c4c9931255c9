"""Institution admins run their institution: they create colleagues (admins, reviewers,
teachers of their own institution), change their roles, deactivate and re-activate them. Every
write checks the actor's scope here (the admin's forms only ask the same questions first, for a
friendly error), and lands in the audit log.

What an institution admin may never do, whatever the form sent: make or edit a superuser, set
permissions or groups (no field for them), touch a user of another institution or one without a
role, give a role above their own (admin is the highest), change a role the identity provider
manages (`AdminProfile.managed_by_idp`: the next sign-in would undo it), deactivate themselves
or change their own role (no admin locks their institution out by a slip)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import translation
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

from ..models import AdminProfile, AuditEvent, Institution
from .audit import audit_event_record
from .languages import language_of
from .scoping import ADMIN, Scope, scope_of

# The roles an institution admin gives, highest first; no role ranks above admin.
ASSIGNABLE_ROLES = (
    AdminProfile.Role.ADMIN,
    AdminProfile.Role.REVIEWER,
    AdminProfile.Role.TEACHER,
    AdminProfile.Role.SAFEGUARDING,
)
MANAGED_BY_IDP = gettext_noop("managed by the identity provider")


def may_manage_colleagues(scope: Scope) -> bool:
    return scope.superuser or (scope.role == ADMIN and scope.institution_id is not None)


def colleagues_of(scope: Scope):
    """The users the scope manages: an institution admin its institution's non-superusers with
    a role; a superuser every user with a role (the plain user admin has the rest)."""
    users = User.objects.filter(gateway_profile__isnull=False)
    if scope.superuser:
        return users
    if not may_manage_colleagues(scope) or scope.institution_id is None:
        return users.none()
    return users.filter(gateway_profile__institution_id=scope.institution_id, is_superuser=False)


def _check_role(scope: Scope, role: str) -> None:
    if role not in AdminProfile.Role.values:
        raise ValidationError(f"Unknown role {role!r}")
    if not scope.superuser and role not in ASSIGNABLE_ROLES:
        raise PermissionDenied(_("This role is above your own"))


def _check_target(scope: Scope, actor: User, user: User) -> AdminProfile:
    profile = AdminProfile.objects.filter(user_id=user.pk).first()
    if profile is None:
        raise PermissionDenied(_("This user has no institution role"))
    if not scope.superuser and (
        user.is_superuser or profile.institution_id != scope.institution_id
    ):
        raise PermissionDenied(_("This user is not a colleague of your institution"))
    return profile


def invitation_path(user: User) -> str:
    """The path where `user` sets a password (Django's password-reset token: valid for
    PASSWORD_RESET_TIMEOUT, spent once the password changes)."""
    return reverse(
        "password_reset_confirm",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )


def invitation_send(*, user: User, link: str, inviter: User) -> bool:
    """E-mail the invitation link when the colleague has an address; whether one went out."""
    if not user.email:
        return False
    # In the colleague's language: their institution's (they have chosen none yet).
    with translation.override(language_of(user)):
        subject = gettext("Your access to the inference gateway")
        message = gettext(
            "%(inviter)s invited you to the inference gateway's admin as %(user)s.\n\n"
            "Set your password here (the link works once):\n%(link)s\n"
        ) % {"inviter": inviter.get_username(), "user": user.get_username(), "link": link}
    send_mail(
        subject=subject,
        message=message,
        from_email=None,
        recipient_list=[user.email],
        fail_silently=True,  # the admin sees the link on screen as well
    )
    return True


@transaction.atomic
def colleague_create(
    *,
    actor: User,
    username: str,
    email: str = "",
    role: str,
    institution: Institution | None = None,
    request=None,
) -> User:
    """A staff user of the actor's institution (a superuser names the institution) with no
    usable password: the colleague sets one through the invitation link."""
    scope = scope_of(actor)
    if not may_manage_colleagues(scope):
        raise PermissionDenied(_("You cannot manage users"))
    _check_role(scope, role)
    if not scope.superuser and scope.institution_id is not None:
        institution = Institution.objects.get(pk=scope.institution_id)
    if institution is None:
        raise ValidationError(_("Choose the institution"))
    if User.objects.filter(username=username).exists():
        raise ValidationError(_("A user named %(name)r already exists") % {"name": username})
    user = User.objects.create_user(username, email=email, password=None, is_staff=True)
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    audit_event_record(
        action=AuditEvent.Action.USER_CREATED,
        request=request,
        actor=actor,
        institution=institution,
        target=f"user:{user.pk}",
        detail={"after": {"username": username, "email": email, "role": role, "active": True}},
    )
    return user


@transaction.atomic
def colleague_update(
    *,
    actor: User,
    user: User,
    role: str | None = None,
    active: bool | None = None,
    email: str | None = None,
    request=None,
) -> User:
    """Change a colleague's role, active flag or e-mail; each change is audited with what it
    was before and after. None leaves a value as it is."""
    scope = scope_of(actor)
    if not may_manage_colleagues(scope):
        raise PermissionDenied(_("You cannot manage users"))
    user = User.objects.select_for_update().get(pk=user.pk)
    profile = _check_target(scope, actor, user)
    own = user.pk == actor.pk
    role_changes = role is not None and role != profile.role
    if role is not None and role_changes:
        _check_role(scope, role)
        if profile.managed_by_idp:
            raise PermissionDenied(_("This role is %(how)s") % {"how": _(MANAGED_BY_IDP)})
        if own and not scope.superuser:
            raise PermissionDenied(_("You cannot change your own role"))
    if active is not None and not active and own:
        raise PermissionDenied(_("You cannot deactivate yourself"))

    target = f"user:{user.pk}"
    if role is not None and role_changes:
        before = profile.role
        profile.role = role
        profile.save(update_fields=["role"])
        audit_event_record(
            action=AuditEvent.Action.ROLE_CHANGED,
            request=request,
            actor=actor,
            institution=profile.institution_id,
            target=target,
            detail={"before": {"role": before}, "after": {"role": role}},
        )
    if active is not None and active != user.is_active:
        user.is_active = active
        user.save(update_fields=["is_active"])
        # A re-activation is the way back from a deactivation: the same action, the other way.
        audit_event_record(
            action=AuditEvent.Action.USER_DEACTIVATED
            if not active
            else AuditEvent.Action.ROLE_CHANGED,
            request=request,
            actor=actor,
            institution=profile.institution_id,
            target=target,
            detail={"before": {"active": not active}, "after": {"active": active}},
        )
    if email is not None and email != user.email:
        user.email = email  # not a right: the audit log keeps roles and access, not addresses
        user.save(update_fields=["email"])
    return user
