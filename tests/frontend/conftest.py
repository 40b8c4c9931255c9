"""A school whose students chat through a trusted front end (Open WebUI) with a front-end key,
and a second school beside it. Students are made by the sign-in itself
(`licensing.signin.sso.sign_in_complete`, what a verified id_token does: the user, the SSO
identity with the verified e-mail, the end user on the student license); the front end is the
real `openai` SDK sending Open WebUI's forwarded user headers (`default_headers`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import openai
import pytest

from core.localcache import clear_all
from licensing.access.credentials import api_key_create
from licensing.access.frontend import EMAIL_HEADER
from licensing.access.services import license_create
from licensing.courses.services import course_create, course_member_add
from licensing.models import ApiKey, Course, EndUser, IdentityProvider, License
from licensing.signin.sso import sign_in_complete

MINI = "gpt-4o-mini"
SMALL = "text-embedding-3-small"
CHAT = {"model": MINI, "messages": [{"role": "user", "content": "Hello from the chat"}]}

_serial = itertools.count(1)


@dataclass
class School:
    license: License
    provider: IdentityProvider
    key: str  # the front-end key
    key_row: ApiKey
    students: dict[str, EndUser] = field(default_factory=dict)  # e-mail -> end user

    def student(self, email: str, *, sub: str | None = None) -> EndUser:
        """A student as their first sign-in leaves them (a verified e-mail, the student group)."""
        sub = sub or f"sub-{next(_serial)}"
        sign_in_complete(
            provider=self.provider,
            claims={
                "sub": sub,
                "email": email,
                "email_verified": True,
                "groups": ["students"],
            },
        )
        end_user = EndUser.objects.get(license=self.license, user__sso_identity__subject=sub)
        self.students[email] = end_user
        return end_user

    def course(self, code: str, *, members=(), **kwargs) -> Course:
        course = course_create(license=self.license, name=f"Course {code}", code=code, **kwargs)
        for end_user in members:
            course_member_add(course=course, end_user=end_user)
        return course


def make_school(name: str, *, limit: int | None = 10_000_000, **license_kwargs) -> School:
    license = license_create(
        name=f"{name} students",
        institution=name,
        limit=limit,
        period="monthly",
        strategy="per_user",
        **license_kwargs,
    )
    provider = IdentityProvider.objects.create(
        institution=license.institution,
        issuer=f"https://idp.{name.split()[0].lower()}.example/realms/school",
        client_id="gateway",
        student_groups=["students"],
        student_license=license,
    )
    row, key = api_key_create(license=license, name="Open WebUI", kind=ApiKey.Kind.FRONT_END)
    clear_all()
    return School(license=license, provider=provider, key=key, key_row=row)


@pytest.fixture
def school(transactional_db):
    return make_school("Front School")


@pytest.fixture
def other_school(transactional_db):
    return make_school("Other School")


def chat_client(gateway, key: str, email: str | None = None, **headers) -> openai.OpenAI:
    """The openai SDK as Open WebUI calls the gateway for one of its users."""
    if email is not None:
        headers[EMAIL_HEADER] = email
    return openai.OpenAI(
        api_key=key, base_url=gateway.url + "/v1", max_retries=0, default_headers=headers
    )


def as_user(key: str, email: str | None = None, **headers) -> dict[str, str]:
    """The headers of a raw HTTP request from the front end for one of its users."""
    headers = {"Authorization": f"Bearer {key}", **headers}
    if email is not None:
        headers[EMAIL_HEADER] = email
    return headers
