"""Erasing a person (issue 39, GDPR Art. 17): an institution's admin erases a student, and what
the gateway holds about them is pseudonymised everywhere while every sum stays as it was.

What happens, in one transaction (docs/decisions/erasure.md):
- their keys are revoked (the API's caches cleared at commit), their sessions end;
- their end user keeps its row (the ledger's rows and the wallets point at it, so every total,
  wallet and past CSV stays exact) with a pseudonym for a subject, no account, no language and
  no consent; their ledger rows keep their credits, tokens and times, and lose their metadata
  (what a client sent along, which may name them);
- their account, if it is only a student's, gets the pseudonym for a name and loses its e-mail,
  names and password, and the sign-in and LMS identities that found it are deleted (signing
  in again makes a new, unrelated person); a SCIM resource keeps its id (the IdP addresses it)
  and loses everything else;
- their safeguarding alerts, all closed (an open one refuses the erasure: the duty of care
  comes first), are deleted with the flagged messages in them;
- the audit rows about them name the pseudonym instead of their subject, account name and
  e-mail; the erasure itself is an audit row that names only the pseudonym.

A person who is also staff (an admin profile, or staff or superuser status) is refused: their
account is the institution's, not only a student's.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from importlib import import_module

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.localcache import clear_all

from ..models import (
    AdminProfile,
    ApiKey,
    AuditEvent,
    EndUser,
    LtiIdentity,
    SafeguardingAlert,
    ScimUser,
    SsoIdentity,
    Transaction,
)
from .audit import audit_event_record

PSEUDONYM_PREFIX = "erased-"


@dataclass(frozen=True)
class Erased:
    pseudonym: str
    keys_revoked: int
    sessions_ended: int
    ledger_rows: int
    audit_rows: int


def sessions_end(user_id: int) -> int:
    """Delete a person's sessions now (the database's session store: each one decoded)."""
    engine = import_module(settings.SESSION_ENGINE)
    if not hasattr(engine.SessionStore, "get_model_class"):
        return 0  # a store without rows; is_active=False still refuses its session's next use
    model = engine.SessionStore.get_model_class()
    ended = 0
    for session in model.objects.filter(expire_date__gt=timezone.now()).iterator():
        if session.get_decoded().get("_auth_user_id") == str(user_id):
            session.delete()
            ended += 1
    return ended


def erasure_problem(end_user: EndUser) -> str | None:
    """Why `end_user` cannot be erased (None: it can); for the confirmation page to ask first."""
    if end_user.subject.startswith(PSEUDONYM_PREFIX) and end_user.user_id is None:
        return _("This person has been erased already.")
    open_alerts = SafeguardingAlert.objects.filter(end_user=end_user).exclude(
        status=SafeguardingAlert.Status.CLOSED
    )
    if open_alerts.exists():
        return _(
            "This person has safeguarding alerts that are not closed: the safeguarding contacts "
            "close them first, then erase the person."
        )
    user = end_user.user
    if user is not None and (
        user.is_staff or user.is_superuser or AdminProfile.objects.filter(user=user).exists()
    ):
        return _(
            "This person is also staff of the gateway: take away their staff role first, then "
            "erase them."
        )
    return None


@transaction.atomic
def end_user_erase(*, end_user: EndUser, request=None) -> Erased:
    """Erase `end_user` as the module says; ValidationError when `erasure_problem` says why not."""
    # FOR NO KEY UPDATE: two erasures of one person queue, while the ledger's inserts (whose
    # foreign-key checks take KEY SHARE on this row) go on during it.
    locked = (
        EndUser.objects.select_for_update(no_key=True, of=("self",))
        .select_related("user", "license")
        .get(pk=end_user.pk)
    )
    problem = erasure_problem(locked)
    if problem is not None:
        raise ValidationError(problem)
    pseudonym = PSEUDONYM_PREFIX + secrets.token_hex(8)
    names = _identifiers(locked)
    user = locked.user
    keys = _keys_revoke(locked)
    sessions = 0
    if user is not None:
        sessions = sessions_end(user.pk)
        _account_erase(user, pseudonym)
    ledger = Transaction.objects.filter(end_user=locked).exclude(metadata={}).update(metadata={})
    alerts, _by_model = SafeguardingAlert.objects.filter(end_user=locked).delete()  # all closed
    audit = _audit_pseudonymise(locked, user, names, pseudonym)
    locked.subject, locked.user, locked.active = pseudonym, None, False
    locked.language, locked.terms_accepted_at = "", None
    locked.save(update_fields=["subject", "user", "active", "language", "terms_accepted_at"])
    erased = Erased(pseudonym, keys, sessions, ledger, audit)
    audit_event_record(
        action=AuditEvent.Action.PERSON_ERASED,
        request=request,
        institution=locked.license.institution_id,
        target=f"end_user:{locked.pk}",
        detail={
            "pseudonym": pseudonym,
            "keys_revoked": keys,
            "sessions_ended": sessions,
            "ledger_rows_cleaned": ledger,
            "audit_rows_pseudonymised": audit,
            "safeguarding_alerts_deleted": alerts,
        },
    )
    transaction.on_commit(clear_all)
    return erased


def _identifiers(end_user: EndUser) -> list[str]:
    """The strings that name the person in what is kept: their subject, their keys' names
    ("Ada's laptop"), their account's name and e-mail, their sign-in identities' subjects and
    e-mails (longest first, so a subject inside an e-mail is replaced whole)."""
    found = {end_user.subject}
    found |= set(ApiKey.objects.filter(end_user=end_user).values_list("name", flat=True))
    user = end_user.user
    if user is not None:
        found |= {user.get_username(), user.email}
        for model in (SsoIdentity, LtiIdentity):
            for subject, email in model.objects.filter(user=user).values_list("subject", "email"):
                found |= {subject, email}
        found |= set(ScimUser.objects.filter(user=user).values_list("user_name", "external_id")
                     .first() or ())  # fmt: skip
    return sorted((name for name in found if name and len(name) >= 3), key=len, reverse=True)


def _keys_revoke(end_user: EndUser) -> int:
    keys = ApiKey.objects.filter(end_user=end_user)
    revoked = keys.filter(active=True).count()
    keys.update(active=False, name="", updated_at=timezone.now())
    return revoked


def _account_erase(user, pseudonym: str) -> None:
    SsoIdentity.objects.filter(user=user).delete()
    LtiIdentity.objects.filter(user=user).delete()
    ScimUser.objects.filter(user=user).update(
        user_name=pseudonym, external_id="", active=False, resource={}
    )
    user.username = pseudonym
    user.email, user.first_name, user.last_name = "", "", ""
    user.is_active = False
    user.set_unusable_password()
    user.save()


def _audit_pseudonymise(end_user: EndUser, user, names: list[str], pseudonym: str) -> int:
    """The audit rows about the person (theirs as actor, or about their end user, keys or
    account) name the pseudonym: in `actor_name` and anywhere in `detail`."""
    keys = ApiKey.objects.filter(end_user=end_user).values_list("pk", flat=True)
    targets = [f"end_user:{end_user.pk}", *(f"api_key:{pk}" for pk in keys)]
    about = AuditEvent.objects.filter(target__in=targets)
    if user is not None:
        about = about | AuditEvent.objects.filter(actor=user)
        about = about | AuditEvent.objects.filter(target=f"user:{user.pk}")
    changed = 0
    for event in about.distinct().iterator():
        text = json.dumps(event.detail, ensure_ascii=False)
        actor_name = event.actor_name
        for name in names:
            text = text.replace(json.dumps(name, ensure_ascii=False)[1:-1], pseudonym)
            actor_name = pseudonym if actor_name == name else actor_name
        if text != json.dumps(event.detail, ensure_ascii=False) or actor_name != event.actor_name:
            AuditEvent.objects.filter(pk=event.pk).update(
                detail=json.loads(text), actor_name=actor_name
            )
            changed += 1
    return changed
