"""A person's language: their own choice, stored on their profile so that it follows them
(a staff user's AdminProfile, a student's EndUser rows), and their institution's default
(Institution.language). The pages' middleware (gateway_site.languages) and the e-mails read it
here; docs/languages.md has the order of the sources."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from core.languages import browser_language, supported_language

from ..models import AdminProfile, EndUser
from .scoping import scope_of


def person_languages(user) -> tuple[str, str]:
    """(their own choice, their institution's default), each "" where there is none: a staff
    user's institution role, a student's most recent active end user."""
    if user is None or not getattr(user, "is_authenticated", False) or user.is_superuser:
        return "", ""  # a superuser has no profile: their cookie keeps their choice
    if user.is_staff:  # read with their scope, which the admin's pages need anyway
        scope_of(user)
        return getattr(user, "_gateway_languages", ("", ""))
    row = (
        EndUser.objects.filter(user_id=user.pk)
        .order_by("-active", "-created_at")
        .values_list("language", "license__institution__language")
        .first()
    )
    return row or ("", "")


def page_language(user, cookie: object, accept_language: str) -> str:
    """The language of a page (or the live feed's websocket) for `user`: their stored choice,
    the language cookie, the browser's Accept-Language, their institution's default, the
    gateway's (docs/languages.md has the order and why)."""
    own, institution = person_languages(user)
    return (
        supported_language(own)
        or supported_language(cookie)
        or browser_language(accept_language)
        or supported_language(institution)
        or settings.LANGUAGE_CODE
    )


def language_of(user) -> str:
    """The language of what is sent to `user` where no browser asks (an e-mail): their own
    choice, else their institution's, else the gateway's."""
    own, institution = person_languages(user)
    return supported_language(own) or supported_language(institution) or settings.LANGUAGE_CODE


def do_set_person_language(user, code: str) -> bool:
    """Stores `code` (a language of settings.LANGUAGES) as the person's own choice on every
    profile they have; False when they have none (a superuser: the cookie alone keeps it)."""
    language = supported_language(code)
    if language is None:
        raise ValueError(f"not a language of settings.LANGUAGES: {code!r}")
    with transaction.atomic():
        staff = AdminProfile.objects.filter(user_id=user.pk).update(language=language)
        students = EndUser.objects.filter(user_id=user.pk).update(language=language)
    return bool(staff or students)
