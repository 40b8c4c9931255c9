"""Two institutions, each with its identity provider's group mapping and a SCIM token."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from django.test import Client

from licensing.access.services import license_create
from licensing.models import IdentityProvider, Institution, License
from licensing.provisioning.services import do_create_scim_token

SCIM = "application/scim+json"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"


@dataclass
class School:
    institution: Institution
    license: License
    provider: IdentityProvider
    token: str


def school(name: str) -> School:
    short = name.split()[0].lower()
    license = license_create(
        name=f"{name} students", institution=name, limit=1_000_000, strategy="per_user"
    )
    provider = IdentityProvider.objects.create(
        institution=license.institution,
        issuer=f"https://idp.{short}.example.edu",
        client_id=f"{short}-gateway",
        client_secret="secret",
        admin_groups=[f"{short}-admins"],
        teacher_groups=[f"{short}-teachers"],
        student_groups=[f"{short}-students"],
        student_license=license,
    )
    token = do_create_scim_token(institution=license.institution)
    return School(license.institution, license, provider, token)


@pytest.fixture
def schools(db):
    return school("Alpha School"), school("Beta College")


class ScimClient:
    """Django's test client speaking SCIM with one institution's token."""

    def __init__(self, client, token: str):
        self.client = client
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def send(self, method: str, path: str, body=None, content_type: str = SCIM, raw=None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else "")
        call = getattr(self.client, method.lower())
        return call("/scim/v2" + path, data=data, content_type=content_type, **self.headers)

    def get(self, path: str):
        return self.client.get("/scim/v2" + path, **self.headers)


@pytest.fixture
def alpha(schools):
    return ScimClient(Client(), schools[0].token)


@pytest.fixture
def beta(schools):
    return ScimClient(Client(), schools[1].token)


def assert_scim_error(response, status: int, scim_type: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith(SCIM)
    body = response.json()
    assert body["schemas"] == [ERROR_SCHEMA]
    assert body["status"] == str(status)
    assert body["detail"]
    if scim_type is not None:
        assert body["scimType"] == scim_type
    return body
