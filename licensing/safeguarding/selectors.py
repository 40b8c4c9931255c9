"""Safeguarding's reads: an institution's settings, who is told of an alert, what the student's
data-flow page says. No writes."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model

from core.languages import supported_language

from ..models import AdminProfile, SafeguardingSettings
from ..models.safeguarding import DEFAULT_RETENTION_DAYS

SAFEGUARDING = AdminProfile.Role.SAFEGUARDING.value
TEACHER = AdminProfile.Role.TEACHER.value


def settings_of(institution_id: int) -> SafeguardingSettings | None:
    """The institution's settings row (None: never saved, so alerts are off)."""
    return SafeguardingSettings.objects.filter(institution_id=institution_id).first()


@dataclass(frozen=True)
class Notice:
    """What a student's data-flow page says of safeguarding (alerts on, or nothing)."""

    enabled: bool
    retention_days: int = DEFAULT_RETENTION_DAYS


def notice_for(institution_id: int) -> Notice:
    row = settings_of(institution_id)
    if row is None or not row.enabled:
        return Notice(enabled=False)
    return Notice(enabled=True, retention_days=row.retention_days)


def recipients(
    *, institution_id: int, course_id: int | None, contacts_only: bool = False
) -> list[tuple[str, str]]:
    """(e-mail, language) of those an alert is mailed to: the course's teachers (teacher role)
    and the institution's safeguarding contacts; only the contacts for an escalation. Active
    staff with an address only; each in their own language, else their institution's."""
    users = get_user_model().objects.filter(
        is_active=True, is_staff=True, gateway_profile__institution_id=institution_id
    )
    contacts = users.filter(gateway_profile__role=SAFEGUARDING)
    people = contacts
    if course_id is not None and not contacts_only:
        teachers = users.filter(gateway_profile__role=TEACHER, taught_courses__course_id=course_id)
        people = contacts | teachers
    rows = (
        people.exclude(email="")
        .distinct()
        .values_list("email", "gateway_profile__language", "gateway_profile__institution__language")
    )
    return sorted(
        {
            (
                email,
                supported_language(own) or supported_language(default) or settings.LANGUAGE_CODE,
            )
            for email, own, default in rows
        }
    )
