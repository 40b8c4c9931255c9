"""A school for the privacy pack: a catalog of two providers (one connection in the US, one
tagged eu, and a disabled one), two license types of the school (an open one with moderation,
one that requires eu connections), retention and safeguarding settings of its own, staff in
every role, students, and another school with an admin of its own."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from catalog.models import Connection, Model, Provider, ProviderModel
from licensing.models import (
    AdminProfile,
    AuditEvent,
    EndUser,
    Institution,
    License,
    LicenseType,
    SafeguardingSettings,
)

PRICE = {"type": "per_token", "prompt": 1, "completion": 2}
EU_ONLY = {
    "version": 1,
    "services": {"chat_completions": {}},
    "routing": {"connection_tags": ["eu"]},
}


def staff(institution, role: str, username: str, active: bool = True):
    user = get_user_model().objects.create_user(
        username, password="pw", is_staff=True, is_active=active
    )
    AdminProfile.objects.create(user=user, institution=institution, role=role)
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def make_catalog(connection_name: str = "eu-frankfurt") -> dict:
    direct = Provider.objects.create(slug="direct", kind="openai")
    campus = Provider.objects.create(slug="campus", kind="openai_compatible")
    us = Connection.objects.create(
        provider=direct, name="default", base_url="https://api.us-provider.example/v1",
        api_key="sk-us", region="us-east-1",
    )  # fmt: skip
    eu = Connection.objects.create(
        provider=direct, name=connection_name, base_url="https://eu.provider.example/v1",
        api_key="sk-eu", tags="eu", region="eu-central-1",
    )  # fmt: skip
    Connection.objects.create(
        provider=campus, name="switched-off", base_url="https://gpu.campus.example/v1",
        api_key="sk-off", tags="eu", active=False,
    )  # fmt: skip
    model = Model.objects.create(
        model_id="gpt-small", owned_by=direct, supported_features=["chat_completions"], cost=PRICE
    )
    ProviderModel.objects.create(model=model, provider=direct, upstream_model_id="gpt-small")
    return {"us": us, "eu": eu}


def make_school(type_name: str = "Open for all") -> dict:
    school = Institution.objects.create(
        name="Privacy school", ledger_identity_days=200, audit_log_days=400, language="en"
    )
    open_type = LicenseType.objects.create(
        institution=school, name=type_name,
        guardrails={"input": {"moderation": True, "patterns": ["secret"]}},
    )  # fmt: skip
    eu_type = LicenseType.objects.create(institution=school, name="EU only", policy=EU_ONLY)
    open_license = License.objects.create(
        institution=school, license_type=open_type, name="privacy-open"
    )
    eu_license = License.objects.create(institution=school, license_type=eu_type, name="privacy-eu")
    for n in range(3):
        EndUser.objects.create(license=open_license, subject=f"open-{n}")
    EndUser.objects.create(license=eu_license, subject="eu-0")
    EndUser.objects.create(license=eu_license, subject="eu-gone", active=False)
    SafeguardingSettings.objects.create(
        institution=school, enabled=True, retention_days=14, categories=["self-harm"]
    )
    people = {
        "admin": staff(school, "admin", "pp-admin"),
        "admin2": staff(school, "admin", "pp-admin2"),
        "reviewer": staff(school, "reviewer", "pp-reviewer"),
        "teacher": staff(school, "teacher", "pp-teacher"),
        "contact": staff(school, "safeguarding", "pp-contact"),
    }
    staff(school, "teacher", "pp-former-teacher", active=False)
    other = Institution.objects.create(name="Other school")
    people["other_admin"] = staff(other, "admin", "pp-other-admin")
    return {"school": school, "other": other, "open": open_type, "eu": eu_type, **people}


@pytest.fixture
def world(db):
    catalog = make_catalog()
    found = make_school()
    AuditEvent.objects.create(institution=found["school"], action="retention_applied")
    return {**catalog, **found}
