"""The audit log's one door: `audit_event_record(...)` writes who did what, when and from
where (licensing.models.AuditEvent). Sign-ins and their refusals, role changes, users made or
deactivated, API keys created or revoked, policy and budget changes and management tokens all
come through here, from the admin, the portal, the SSO views, the management API and the
operator commands alike. Reading it: licensing.console (scoped like the ledger)."""

from __future__ import annotations

import ipaddress
from typing import Any

from core.text import UNSTORABLE

from ..models import AuditEvent, Institution

_MAX_AGENT = AuditEvent._meta.get_field("user_agent").max_length or 300
_MAX_TARGET = AuditEvent._meta.get_field("target").max_length or 200
_MAX_NAME = AuditEvent._meta.get_field("actor_name").max_length or 254


def _client_ip(request) -> str | None:
    """The address the request came from, as the proxy middleware left it in REMOTE_ADDR
    (gateway_site trusts X-Forwarded-For only from FORWARDED_ALLOW_IPS)."""
    if request is None:
        return None
    raw = request.META.get("REMOTE_ADDR") or ""
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return None


def _printable(text: str, limit: int) -> str:
    # No NUL and no lone surrogates reach the database (PostgreSQL refuses both).
    return UNSTORABLE.sub("", text)[:limit]


def audit_event_record(
    *,
    action: str,
    request=None,
    actor=None,
    actor_name: str = "",
    institution: Institution | int | None = None,
    target: str = "",
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Write one audit event. `request` gives the address and the user agent (and the actor,
    when none is given); `actor_name` names who acted when there is no user (a refused
    sign-in: the e-mail or subject the identity provider sent; an operator command)."""
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        if user is not None and getattr(user, "is_authenticated", False):
            actor = user
    if actor is not None and not actor_name:
        actor_name = actor.get_username()
    institution_id = institution.pk if isinstance(institution, Institution) else institution
    agent = request.META.get("HTTP_USER_AGENT", "") if request is not None else ""
    return AuditEvent.objects.create(
        action=action,
        actor=actor,
        actor_name=_printable(actor_name, _MAX_NAME),
        institution_id=institution_id,
        target=_printable(target, _MAX_TARGET),
        detail=detail or {},
        ip=_client_ip(request),
        user_agent=_printable(agent, _MAX_AGENT),
    )


def sign_in_event_record(*, request, user, institution: int, detail: dict[str, Any]) -> AuditEvent:
    """A person signed in (by SSO or an LTI launch): one `sign_in` row about them, whose
    `detail` says how (its `method`) and what the sign-in gave."""
    return audit_event_record(
        action=AuditEvent.Action.SIGN_IN,
        request=request,
        actor=user,
        institution=institution,
        target=f"user:{user.pk}",
        detail=detail,
    )
