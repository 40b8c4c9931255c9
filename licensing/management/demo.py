"""The demo school of `scripts/run.sh`'s first run (`manage.py setup_demo`): its sign-in through
the development identity provider and the LMS simulator (fake_upstreams/demo.py declares the
people, the course and the registrations), and the demo API key kept for the next run.

Development tools only, and never in place of real ones (docs/decisions/dev-tools.md): nothing
here is configured when `DEV_SIGN_IN=off`, when the gateway is served at an address other than
this computer's (`GATEWAY_PUBLIC_URL`), when a tool would not be on 127.0.0.1, or when the demo
school already signs in with another identity provider (the identity provider's part) or
launches from another LMS (the LMS's part).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core.config import get_config
from fake_upstreams import demo
from licensing.access.changes import audit_api_key
from licensing.access.credentials import api_key_create, key_digest
from licensing.access.services import license_create
from licensing.courses.services import course_create, course_member_add, course_teacher_add
from licensing.models import (
    AdminProfile,
    ApiKey,
    Course,
    EndUser,
    IdentityProvider,
    Institution,
    License,
    LtiIdentity,
    LtiPlatform,
    SsoIdentity,
)
from licensing.signin.lti import lti_platform_configure
from licensing.signin.sso import identity_provider_configure

# A tool's address: this computer, a port, nothing else (no path, no user, no odd character).
LOOPBACK_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\])(?::(\d{1,5}))?/?")
SWITCH = "DEV_SIGN_IN"  # "off": no development sign-in (scripts/run.sh starts no tool either)
ACTOR = "manage.py setup_demo"


def on_loopback(url: str) -> bool:
    match = LOOPBACK_URL.fullmatch(url) if isinstance(url, str) else None
    return match is not None and 0 < int(match.group(1) or 80) < 65536


def is_dev_provider(provider: IdentityProvider) -> bool:
    """The development identity provider's registration (a real one is never taken for it)."""
    return provider.client_id == demo.IDP_CLIENT_ID and on_loopback(provider.issuer)


def is_dev_platform(platform: LtiPlatform) -> bool:
    return platform.client_id == demo.LMS_CLIENT_ID and on_loopback(platform.issuer)


@dataclass
class Plan:
    """Which development tools the demo school signs in with, and why not the others."""

    idp: str | None = None
    lms: str | None = None
    notes: list[str] = field(default_factory=list)


def dev_sign_in_plan(
    *, idp_url: str | None, lms_url: str | None, public_url: str | None = None
) -> Plan:
    """The tools asked for that may be used: see the module's docstring. `public_url`:
    GATEWAY_PUBLIC_URL unless given."""
    plan = Plan()
    if not idp_url and not lms_url:
        return plan
    if os.environ.get(SWITCH, "").strip().lower() in ("off", "0", "false", "no"):
        plan.notes.append(f"{SWITCH}=off: no development identity provider or LMS simulator")
        return plan
    public = public_url or get_config().GATEWAY_PUBLIC_URL
    if not on_loopback(public):
        plan.notes.append(
            f"GATEWAY_PUBLIC_URL is {public}: a development identity provider on this computer "
            "is no way in for the people of a gateway served there, so none is configured"
        )
        return plan
    institution = Institution.objects.filter(name=demo.INSTITUTION).first()
    plan.idp = _idp_allowed(institution, idp_url, plan.notes)
    plan.lms = _lms_allowed(institution, lms_url, plan.notes)
    return plan


def _idp_allowed(institution: Institution | None, url: str | None, notes: list[str]) -> str | None:
    if not url:
        return None
    if not on_loopback(url):
        notes.append(f"{url} is not on this computer: no development identity provider")
        return None
    provider = IdentityProvider.objects.filter(institution=institution).first()
    if provider is not None and not is_dev_provider(provider):
        notes.append(
            f"{demo.INSTITUTION} signs in with {provider.issuer}: the development identity "
            "provider is not used"
        )
        return None
    return url


def _lms_allowed(institution: Institution | None, url: str | None, notes: list[str]) -> str | None:
    if not url:
        return None
    if not on_loopback(url):
        notes.append(f"{url} is not on this computer: no LMS simulator")
        return None
    platforms = LtiPlatform.objects.filter(institution=institution, active=True)
    real = [p for p in platforms if not is_dev_platform(p)]
    if real:
        notes.append(
            f"{demo.INSTITUTION} launches from {real[0].issuer}: the LMS simulator is not used"
        )
        return None
    return url


# --- the demo school --------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoSchool:
    course: Course
    idp: str | None
    lms: str | None


@transaction.atomic
def demo_school_configure(plan: Plan) -> DemoSchool | None:
    """The demo school's sign-in through the tools of `plan`, its student license, its course
    and its people (each one account, whichever way they come in); None when `plan` has no
    tool. Runs at every start: what is there already is left as it is."""
    if plan.idp is None and plan.lms is None:
        return None
    institution, _ = Institution.objects.get_or_create(name=demo.INSTITUTION)
    license = _student_license()
    course = _course(license)
    users = {person.login: _account(person, institution, course) for person in demo.PEOPLE}
    if plan.idp is not None:
        provider = _provider(institution, license, plan.idp)
        for person in demo.PEOPLE:
            SsoIdentity.objects.get_or_create(
                provider=provider,
                subject=person.login,
                defaults={"user": users[person.login], "email": person.email},
            )
    if plan.lms is not None:
        platform = _platform(institution, license, plan.lms)
        for person in demo.PEOPLE:
            LtiIdentity.objects.get_or_create(
                platform=platform,
                subject=person.login,
                defaults={"user": users[person.login], "name": person.name, "email": person.email},
            )
    return DemoSchool(course=course, idp=plan.idp, lms=plan.lms)


def _student_license() -> License:
    license = License.objects.filter(name=demo.STUDENT_LICENSE).first()
    if license is None:
        license = license_create(
            name=demo.STUDENT_LICENSE,
            institution=demo.INSTITUTION,
            limit=demo.STUDENT_BUDGET,
            period=License.Period.MONTHLY,
            strategy=License.Strategy.PER_USER,
        )
    return license


def _course(license: License) -> Course:
    course = Course.objects.filter(
        institution_id=license.institution_id, lti_context_id=demo.COURSE.context_id
    ).first()
    if course is None:
        course = course_create(
            license=license,
            name=demo.COURSE.title,
            code=demo.COURSE.code,
            allowance=demo.COURSE_ALLOWANCE,
            allowance_period=Course.Period.WEEK,
            actor_name=ACTOR,
        )
        # The LMS's course: a launch from the simulator lands in this one.
        course.lti_context_id = demo.COURSE.context_id
        course.save(update_fields=["lti_context_id"])
    return course


def _account(person: demo.DemoPerson, institution: Institution, course: Course):
    """The person's user (no password: they sign in through the tools) and their role, as
    the identity provider's groups and the LMS's roles give it."""
    user, created = get_user_model().objects.get_or_create(
        username=person.email, defaults={"email": person.email, "first_name": person.name}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if person.role == "student":
        end_user, _ = EndUser.objects.get_or_create(
            license=course.license,
            user=user,
            defaults={"subject": person.login, "issuer": None, "active": True},
        )
        course_member_add(course=course, end_user=end_user, actor_name=ACTOR)
        return user
    role = AdminProfile.Role.ADMIN if person.role == "admin" else AdminProfile.Role.TEACHER
    AdminProfile.objects.get_or_create(
        user=user, defaults={"institution": institution, "role": role, "managed_by_idp": True}
    )
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    if role == AdminProfile.Role.TEACHER:
        course_teacher_add(course=course, user=user, actor_name=ACTOR)
    return user


def _provider(institution: Institution, license: License, url: str) -> IdentityProvider:
    provider = IdentityProvider.objects.filter(institution=institution).first()
    if provider is not None and provider.issuer == url.rstrip("/") and provider.active:
        return provider
    return identity_provider_configure(
        institution=institution,
        issuer=url,
        client_id=demo.IDP_CLIENT_ID,
        client_secret=demo.IDP_CLIENT_SECRET,
        admin_groups=[demo.GROUPS["admin"]],
        teacher_groups=[demo.GROUPS["teacher"]],
        student_groups=[demo.GROUPS["student"]],
        student_license=license,
        email_domains=[demo.EMAIL_DOMAIN],
    )


def _platform(institution: Institution, license: License, url: str) -> LtiPlatform:
    issuer = url.rstrip("/")
    ours = [p for p in LtiPlatform.objects.filter(institution=institution) if is_dev_platform(p)]
    current = next((p for p in ours if p.issuer == issuer), None)
    if current is not None and current.active:
        return current
    if current is None and ours:
        # The simulator moved to another port: the same registration (its identities) follows.
        LtiPlatform.objects.filter(pk=ours[0].pk).update(issuer=issuer)
    platform, _ = lti_platform_configure(
        institution=institution,
        issuer=issuer,
        client_id=demo.LMS_CLIENT_ID,
        deployment_ids=[demo.LMS_DEPLOYMENT_ID],
        jwks_url=issuer + "/jwks",
        auth_login_url=issuer + "/auth",
        license=license,
        allowance=demo.COURSE_ALLOWANCE,
        allowance_period=Course.Period.WEEK,
    )
    return platform


# --- the demo API key -------------------------------------------------------------------------


def demo_key(*, license: License, key_file: Path | None, name: str) -> tuple[str, bool]:
    """The demo license's API key: the one kept in `key_file` while it is still a usable key
    of `license` in this database (its hash is what the database holds), else a new one,
    written there (mode 0600). (key, reused)."""
    kept = _kept_key(key_file)
    if kept is not None and _usable(kept, license):
        return kept, True
    row, key = api_key_create(license=license, name=name)
    audit_api_key(row, created=True, via="command", actor_name=ACTOR)
    if key_file is not None:
        _write_private(key_file, key)
    return key, False


def _kept_key(key_file: Path | None) -> str | None:
    if key_file is None:
        return None
    try:
        text = key_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeError):
        return None
    return text or None


def _usable(key: str, license: License) -> bool:
    rows = ApiKey.objects.filter(
        digest=key_digest(key), license=license, active=True, end_user=None, course=None
    )
    row = rows.first()
    return row is not None and (row.expires_at is None or row.expires_at > timezone.now())


def _write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only, replacing what was there at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(text + "\n")
    os.replace(tmp, path)
