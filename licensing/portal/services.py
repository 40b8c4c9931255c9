"""Writes of the student portal: accepting the terms of use, making and revoking the
student's own API keys. Each is one transaction and leaves one audit event
(licensing.access.audit, the audit log's one door)."""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from core.text import is_storable_text

from ..access.audit import audit_event_record
from ..access.credentials import api_key_create
from ..courses.services import course_has_ended, course_key_create
from ..models import ApiKey, AuditEvent, Course, EndUser
from .selectors import active_key_count, terms_pending

MAX_KEY_NAME = 100


class PortalRefused(Exception):
    """A write the student may not do now (terms not accepted, key limit reached): shown on
    the page as a message, with a 4xx status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


def key_name_clean(raw: str) -> str:
    """The key's name as typed, trimmed. No control characters (NUL among them), no lone
    surrogates, at most 100 characters."""
    name = raw.strip()
    if len(name) > MAX_KEY_NAME:
        raise ValidationError(_("At most %(n)s characters.") % {"n": MAX_KEY_NAME})
    if not is_storable_text(name) or any(unicodedata.category(c) == "Cc" for c in name):
        raise ValidationError(_("The name cannot hold control characters."))
    return name


def _locked(end_user: EndUser) -> EndUser:
    """The end user's row, locked until the transaction ends: two key creations at once
    cannot both pass the limit (PostgreSQL; SQLite writes one at a time anyway)."""
    return (
        EndUser.objects.select_for_update()
        .select_related("license__institution")
        .get(pk=end_user.pk)
    )


@transaction.atomic
def terms_accept(*, end_user: EndUser, request=None) -> EndUser:
    locked = _locked(end_user)
    if locked.terms_accepted_at is not None:
        return locked  # accepted already: nothing new to record
    locked.terms_accepted_at = timezone.now()
    locked.save(update_fields=["terms_accepted_at"])
    audit_event_record(
        action=AuditEvent.Action.TERMS_ACCEPTED,
        request=request,
        institution=locked.license.institution_id,
        target=f"end_user:{locked.pk}",
        detail={"license": locked.license.name},
    )
    return locked


def personal_data_exported(*, end_user: EndUser, what: str, request=None) -> None:
    """The audit row of a student's download of their own data (which part, which format)."""
    audit_event_record(
        action=AuditEvent.Action.DATA_EXPORTED,
        request=request,
        institution=end_user.license.institution_id,
        target=f"end_user:{end_user.pk}",
        detail={"what": what},
    )


@transaction.atomic
def portal_key_create(
    *, end_user: EndUser, name: str = "", course: Course | None = None, request=None
) -> tuple[ApiKey, str]:
    """The student's own key on their license (their wallet, their ledger rows); returns
    (row, full key), the key shown once. Refused before the terms are accepted and at the
    institution's limit of active keys per student (course keys count). With a `course` the
    student is a member of: a course key (licensing.courses.services.course_key_create,
    which audits it), paying at their allowance, the course pool and the license."""
    locked = _locked(end_user)
    if not locked.active:
        raise PortalRefused(gettext("Your student access has ended."), status=403)
    if terms_pending(locked):
        raise PortalRefused(gettext("Accept the terms of use before you create a key."), status=403)
    limit = locked.license.institution.portal_key_limit
    if active_key_count(locked) >= limit:
        raise PortalRefused(
            ngettext(
                "You have %(limit)s active key, the most allowed: revoke one first.",
                "You have %(limit)s active keys, the most allowed: revoke one first.",
                limit,
            )
            % {"limit": limit},
            status=409,
        )
    clean_name = key_name_clean(name)
    if course is not None:
        if course_has_ended(course):
            raise PortalRefused(gettext("This course has ended: it takes no new keys."), status=403)
        try:
            return course_key_create(
                course=course, end_user=locked, name=clean_name, via="portal", request=request
            )
        except ValidationError as exc:  # not (or no longer) a member
            raise PortalRefused(
                gettext("You are not a member of this course."), status=404
            ) from exc
    row, key = api_key_create(license=locked.license, end_user=locked, name=clean_name)
    audit_event_record(
        action=AuditEvent.Action.API_KEY_CREATED,
        request=request,
        institution=locked.license.institution_id,
        target=f"api_key:{row.pk}",
        detail={"prefix": row.prefix, "name": row.name, "end_user": locked.pk, "portal": True},
    )
    return row, key


@transaction.atomic
def portal_key_revoke(
    *, end_user: EndUser, key_id: int, course: Course | None = None, request=None
) -> ApiKey | None:
    """Revoke the student's own active key (with a `course`: their key for that course); None
    when it is not theirs or not active. Saving the row clears the credential caches
    (licensing.signals), so /v1 refuses it at once."""
    rows = ApiKey.objects.select_for_update().filter(pk=key_id, end_user=end_user, active=True)
    if course is not None:
        rows = rows.filter(course=course)
    row = rows.first()
    if row is None:
        return None
    row.active = False
    row.save(update_fields=["active", "updated_at"])
    audit_event_record(
        action=AuditEvent.Action.API_KEY_REVOKED,
        request=request,
        institution=end_user.license.institution_id,
        target=f"api_key:{row.pk}",
        detail={
            "prefix": row.prefix,
            "name": row.name,
            "end_user": end_user.pk,
            "portal": True,
            **({"course": row.course_id} if row.course_id is not None else {}),
        },
    )
    return row


def sign_out_record(*, request, institution_id: int | None = None) -> None:
    """Before the session ends (the actor is still the signed-in user)."""
    audit_event_record(
        action=AuditEvent.Action.SIGN_OUT,
        request=request,
        institution=institution_id,
        detail={"portal": True},
    )
