"""Management API tokens (rest_framework.authtoken, `Authorization: Token ...` on /manage/v1/):
a staff user with a role (admin, reviewer, teacher), or a superuser, creates or rotates their own
from the admin ("My API token") or an operator prints one with `manage.py
create_management_token`. A token is scoped exactly as its user's session (scope_of): a
teacher's reaches the courses they teach and nothing else. Each new token is audited (never the
token itself)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import transaction
from rest_framework.authtoken.models import Token

from ..models import AuditEvent
from .audit import audit_event_record
from .scoping import ADMIN, REVIEWER, TEACHER, scope_of

TOKEN_ROLES = (ADMIN, REVIEWER, TEACHER)
NO_TOKEN = "Only admins, reviewers and teachers hold a management token"


def may_hold_token(user) -> bool:
    scope = scope_of(user)
    return scope.superuser or scope.role in TOKEN_ROLES


def management_token_exists(user) -> bool:
    return Token.objects.filter(user_id=user.pk).exists()


@transaction.atomic
def management_token_rotate(*, user, request=None, actor_name: str = "") -> str:
    """A new token for `user` (the old one, if any, stops working now); returns its key."""
    if not may_hold_token(user):
        raise PermissionDenied(NO_TOKEN)
    replaced = Token.objects.filter(user_id=user.pk).delete()[0] > 0
    token = Token.objects.create(user=user)
    _audit(user, request=request, actor_name=actor_name, rotated=replaced)
    return token.key


@transaction.atomic
def management_token_get_or_create(*, user, actor_name: str = "") -> str:
    """The user's token, made on first use (the operator command); only a new one is audited."""
    if not may_hold_token(user):
        raise PermissionDenied(NO_TOKEN)
    token, created = Token.objects.get_or_create(user=user)
    if created:
        _audit(user, request=None, actor_name=actor_name, rotated=False)
    return token.key


def _audit(user, *, request, actor_name: str, rotated: bool) -> None:
    scope = scope_of(user)
    audit_event_record(
        action=AuditEvent.Action.TOKEN_CREATED,
        request=request,
        actor=user if request is None and not actor_name else None,
        actor_name=actor_name,
        institution=scope.institution_id,
        target=f"user:{user.pk}",
        detail={"for": user.get_username(), "rotated": rotated},
    )
