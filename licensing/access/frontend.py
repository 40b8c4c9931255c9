"""A front-end key (issue 37): a trusted chat front end (Open WebUI) acting for the person each
request names, so that every student pays from their own allowance under their course's rules
(docs/open-webui.md; the choices: docs/decisions/front-end-keys.md).

**Who.** The e-mail address of Open WebUI's forwarded user headers (`X-OpenWebUI-User-Email`,
sent when Open WebUI runs with ENABLE_FORWARD_USER_INFO_HEADERS=true), lower-cased, matched to
the SSO identities of the key's institution (the address its identity provider verified at the
person's last sign-in here, licensing.signin.sso) whose user has an active end user on the key's
license. Never by Open WebUI's user id (its own uuid, not the identity provider's subject), name
or role, which are ignored. An address no such identity holds, or more than one holds, is no
person (401): an e-mail is never guessed into someone's wallet.

**Which course.** The key's own course when it has one. Otherwise the request's model chooses:
`<course code> · <model>` (the aliases `GET /v1/models` lists for the key) is that course; a
plain model id is the person's only active course of the license, or the license alone when
they are in none; a person in several courses chooses by alias (403 otherwise).

**On the request path**, only for a front-end key (an ordinary key's request never comes here):
`acting_for` at check 3, like a missing Authorization header (the header, then the person from
a cache per license and address; no provider call without a person: never a shared wallet by
accident), `act_in_course` before the budget (the course that pays and the model it names).
`GET /v1/models` reads no header: its list is the same for everyone (Open WebUI keeps one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.urls import reverse

from core.config import get_config
from core.db import UNREACHABLE, run_db
from core.errors import AuthenticationFailed, PolicyDenied
from core.localcache import TTLCache
from core.text import is_storable_text

from ..models import Course, CourseMember, EndUser
from .credentials import LicenseInfo, Principal

logger = logging.getLogger("gateway")

# Open WebUI's name for it (backend/open_webui/env.py, FORWARD_USER_INFO_HEADER_USER_EMAIL).
EMAIL_HEADER = "X-OpenWebUI-User-Email"
# `<course code> · <model>`: a model alias of one course (a middle dot between spaces: no model
# id of the catalog holds it, and it reads as one name in Open WebUI's model menu).
ALIAS_SEPARATOR = " · "
MAX_EMAIL_LENGTH = 254  # RFC 5321's path limit; SsoIdentity.email's column
# Characters no address a front end forwards holds: list separators (a repeated header arrives
# joined by commas), quotes and brackets of display-name forms.
_NOT_IN_ADDRESS = frozenset(',;<>"()[]\\')

MALFORMED = f"The {EMAIL_HEADER} header must hold one e-mail address"
UNNAMED = (
    f"This front-end key acts for the person each request names: send {EMAIL_HEADER} "
    "(Open WebUI: ENABLE_FORWARD_USER_INFO_HEADERS=true)"
)

# (license id, lower-cased address) -> Person. Filled on a request's first use; cleared with
# every credential cache (licensing.signals: an end user, a membership or a course saved or
# deleted, an SSO identity's e-mail changed or its identity deleted), else within the TTL.
_person_cache = TTLCache("front-end-people", max_entries=20_000)
# license id -> the active courses of the license, (id, code) by code: `GET /v1/models`'s aliases.
_courses_cache = TTLCache("front-end-courses", max_entries=5_000)


@dataclass(frozen=True)
class Person:
    """Whom a front-end key's request acts for: their end user on the key's license, and the
    courses of that license they are a member of (paused or not), as (id, code, active)."""

    end_user_id: int
    courses: tuple[tuple[int, str, bool], ...]


# --- check 3: the header names a person ------------------------------------------------------


async def acting_for(principal: Principal, headers, *, required: bool = True) -> Principal:
    """A front-end key's principal with the person its request names, from `headers` (Django's
    request headers). 401 without the header (unless not `required`: the principal as it is),
    for a header that holds no address, and for an address that names no one or several."""
    raw = headers.get(EMAIL_HEADER)
    if raw is None:
        if required:
            raise AuthenticationFailed(UNNAMED)
        return principal
    email = address_of(raw)
    person = _person_cache.get((principal.license.id, email))
    if person is None:
        person = await run_db(_person, principal.license, email)
    return replace(principal, end_user_id=person.end_user_id, courses=person.courses)


def address_of(raw: str) -> str:
    """The header's one e-mail address, lower-cased (as licensing.signin.sso stores a verified
    one); 401 for anything else. Header values arrive as ISO-8859-1 text (ASGI's bytes): an
    address in UTF-8 is decoded back, and bytes that are not UTF-8 are no address."""
    try:
        text = raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise AuthenticationFailed(MALFORMED) from None
    email = text.strip().lower()
    local, at, domain = email.rpartition("@")
    if not (at and local and domain and len(email) <= MAX_EMAIL_LENGTH):
        raise AuthenticationFailed(MALFORMED)
    if not is_storable_text(email) or any(_foreign(c) for c in email):
        raise AuthenticationFailed(MALFORMED)
    return email


def _foreign(character: str) -> bool:
    return character.isspace() or not character.isprintable() or character in _NOT_IN_ADDRESS


def _person(license: LicenseInfo, email: str) -> Person:
    """The person of `email` on the license (the database; the cache's stale entry while it is
    unreachable, as for keys: docs/reliability.md)."""
    cache_key = (license.id, email)
    generation = _person_cache.generation
    try:
        found = _end_users_of(license, email)
        courses = _courses_of(license.id, found[0]) if len(found) == 1 else ()
    except UNREACHABLE:
        stale = _person_cache.stale(cache_key)
        if stale is None:
            raise
        return stale
    if len(found) != 1:
        logger.info(
            "front-end key on license %s: %s person for the e-mail address given",
            license.id,
            "no" if not found else "more than one",
        )
        raise AuthenticationFailed(unknown_message(license) if not found else _ambiguous(license))
    person = Person(end_user_id=found[0], courses=courses)
    _person_cache.set(cache_key, person, generation)
    return person


def _end_users_of(license: LicenseInfo, email: str) -> list[int]:
    """The active end users of the license whose active user holds an SSO identity of the
    license's institution with this verified address (two at most: one is the answer)."""
    rows = EndUser.objects.filter(
        license_id=license.id,
        active=True,
        user__is_active=True,
        user__sso_identity__provider__institution_id=license.institution_id,
        user__sso_identity__email=email,
    )
    return list(rows.order_by("pk").values_list("pk", flat=True)[:2])


def _courses_of(license_id: int, end_user_id: int) -> tuple[tuple[int, str, bool], ...]:
    members = CourseMember.objects.filter(end_user_id=end_user_id, course__license_id=license_id)
    fields = ("course_id", "course__code", "course__active")
    return tuple(members.order_by("course__code").values_list(*fields))


def portal_url() -> str:
    return get_config().GATEWAY_PUBLIC_URL.rstrip("/") + reverse("portal:dashboard")


def unknown_message(license: LicenseInfo) -> str:
    """What the chat shows a student the gateway does not know (yet): signing in to the portal
    once makes their end user (licensing.signin.sso)."""
    return (
        f"{license.institution} has no student account with your e-mail address on this AI "
        f"gateway yet: sign in once at {portal_url()} with your school account, then send your "
        "message again."
    )


def _ambiguous(license: LicenseInfo) -> str:
    return (
        f"More than one account of {license.institution} has your e-mail address on this AI "
        "gateway: ask your school's IT to remove the old one."
    )


# --- before the budget: the course that pays, the model it names -----------------------------


def act_in_course(principal: Principal, model: str | None) -> tuple[Principal, str | None]:
    """The principal with the course that pays (None: the license alone) and the model the
    request means (an alias's model part). 403 `policy_denied` (param `model`) when the person
    may not work in the course the request names. A course that is switched off stays theirs:
    its own gate then says it is closed."""
    code, real = split_alias(model) if model is not None else (None, model)
    mine = {course_code: course_id for course_id, course_code, _ in principal.courses}
    if principal.course_id is not None:  # the key's own course
        if principal.course_id not in mine.values():
            raise PolicyDenied("You are not a member of the course this chat is for", param="model")
        if code is not None and mine.get(code) != principal.course_id:
            raise PolicyDenied(_not_member(code, principal.courses), param="model")
        return principal, real
    if code is not None:
        if code not in mine:
            raise PolicyDenied(_not_member(code, principal.courses), param="model")
        return replace(principal, course_id=mine[code]), real
    active = [course for course in principal.courses if course[2]]
    if len(active) > 1:
        raise PolicyDenied(_choose_course(active, model), param="model")
    return replace(principal, course_id=active[0][0] if active else None), model


def split_alias(model: str) -> tuple[str | None, str]:
    """(course code, model) of `<course code> · <model>`; (None, model) for a plain id."""
    code, separator, real = model.rpartition(ALIAS_SEPARATOR)
    if not separator or not code or not real:
        return None, model
    return code, real


def alias(code: str, model: str) -> str:
    return f"{code}{ALIAS_SEPARATOR}{model}"


def _not_member(code: str, courses: Sequence[tuple[int, str, bool]]) -> str:
    yours = ", ".join(course_code for _, course_code, active in courses if active)
    return f"You are not a member of course '{code}'" + (
        f": choose a model of one of your courses ({yours})" if yours else ""
    )


def _choose_course(courses: Sequence[tuple[int, str, bool]], model: str | None) -> str:
    codes = [course_code for _, course_code, _ in courses]
    example = f", e.g. '{alias(codes[0], model)}'" if model else ""
    return (
        f"You are in several courses ({', '.join(codes)}): choose the model named after the "
        f"course you are working in{example}"
    )


# --- GET /v1/models: the aliases ------------------------------------------------------------


def license_courses(license_id: int) -> tuple[tuple[int, str], ...]:
    """The active courses of a license, (id, code) by code: a front-end key without a course of
    its own lists `<code> · <model>` for each (the same list for every person: Open WebUI keeps
    one model list for all its users)."""
    cached = _courses_cache.get(license_id)
    if cached is not None:
        return cached
    generation = _courses_cache.generation
    courses = tuple(
        Course.objects.filter(license_id=license_id, active=True)
        .order_by("code")
        .values_list("pk", "code")
    )
    _courses_cache.set(license_id, courses, generation)
    return courses


async def license_courses_async(license_id: int) -> tuple[tuple[int, str], ...]:
    cached = _courses_cache.get(license_id)
    if cached is not None:
        return cached
    return await run_db(license_courses, license_id)
