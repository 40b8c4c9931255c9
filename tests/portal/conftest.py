"""A student as the SSO sign-in leaves them (issue 25's contract, branch issue25-sso): a Django
user (not staff) with an active `EndUser(license=<the provider's student_license>, user=...,
subject=<sub>, issuer=None)`. Until the SSO flow lands, the tests sign them in with
`force_login`."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from licensing.access.services import license_create
from licensing.models import EndUser, IdentityProvider, Institution

_serial = itertools.count(1)


def make_student(
    *,
    institution: str = "Hill School",
    license: str = "hill-students",
    limit: int | None = 5_000_000,
    period: str = "monthly",
    strategy: str = "per_user",
    username: str | None = None,
    **license_kwargs,
):
    """(user, end_user) on the named license, made if it does not exist yet."""
    from licensing.models import License

    lic = License.objects.filter(name=license).first()
    if lic is None:
        lic = license_create(
            name=license,
            institution=institution,
            limit=limit,
            period=period,
            strategy=strategy,
            **license_kwargs,
        )
    n = next(_serial)
    username = username or f"student{n}"
    user = get_user_model().objects.create_user(username, email=f"{username}@hill.example")
    end_user = EndUser.objects.create(license=lic, user=user, subject=f"sub-{username}")
    return user, end_user


def signed_in(user, enforce_csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def identity_provider(institution: Institution, license=None, n: int = 0) -> IdentityProvider:
    return IdentityProvider.objects.create(
        institution=institution,
        issuer=f"https://idp{n}.{institution.pk}.example/realms/school",
        client_id="gateway",
        student_license=license,
    )


@pytest.fixture
def student(db):
    return make_student()


@pytest.fixture
def portal(student):
    return signed_in(student[0])


@pytest.fixture
def anon(db) -> Client:
    """Django's test client, signed out (the suite's `client` is httpx on the live gateway)."""
    return Client()
