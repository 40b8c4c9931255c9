"""A token reaches its own institution only; deactivation ends sessions and revokes keys."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client

from licensing.access.credentials import api_key_create
from licensing.models import ApiKey, AuditEvent, EndUser, ScimGroup, ScimUser
from licensing.provisioning.services import do_create_scim_token, do_revoke_scim_token

from .conftest import GROUP_SCHEMA, PATCH_SCHEMA, ScimClient, assert_scim_error
from .test_scim_users import okta_user


def test_another_institutions_ids_are_not_found(alpha, beta):
    ann = alpha.send("POST", "/Users", okta_user("ann@alpha.example.edu")).json()["id"]
    group = alpha.send(
        "POST", "/Groups", {"schemas": [GROUP_SCHEMA], "displayName": "alpha-students"}
    ).json()["id"]
    assert_scim_error(beta.get(f"/Users/{ann}"), 404)
    assert_scim_error(beta.get(f"/Groups/{group}"), 404)
    off = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "replace", "path": "active", "value": False}],
    }
    assert_scim_error(beta.send("PATCH", f"/Users/{ann}", off), 404)
    assert_scim_error(beta.send("DELETE", f"/Users/{ann}"), 404)
    assert_scim_error(beta.send("DELETE", f"/Groups/{group}"), 404)
    assert beta.get("/Users").json()["totalResults"] == 0
    assert beta.get('/Users?filter=userName eq "ann@alpha.example.edu"').json()["Resources"] == []
    # Beta's group naming Alpha's person as a member: refused, nothing made.
    foreign = beta.send(
        "POST",
        "/Groups",
        {"schemas": [GROUP_SCHEMA], "displayName": "beta-admins", "members": [{"value": ann}]},
    )
    assert_scim_error(foreign, 400, "invalidValue")
    assert not ScimGroup.objects.filter(display_name="beta-admins").exists()
    assert ScimUser.objects.get(scim_id=ann).user.is_active
    refused = AuditEvent.objects.filter(action="scim_refused", institution__name="Beta College")
    assert refused.count() == 6


def test_tokens(schools, alpha):
    assert_scim_error(ScimClient(Client(), "scim-not-a-token").get("/Users"), 401)
    assert_scim_error(Client().get("/scim/v2/Users"), 401)
    rotated = do_create_scim_token(institution=schools[0].institution, rotate=True)
    assert_scim_error(alpha.get("/Users"), 401)  # the old token
    assert ScimClient(Client(), rotated).get("/Users").status_code == 200
    assert do_revoke_scim_token(institution=schools[0].institution) == 1
    assert_scim_error(ScimClient(Client(), rotated).get("/Users"), 401)
    changes = AuditEvent.objects.filter(action="scim_token_changed").values_list(
        "detail__change", flat=True
    )
    assert sorted(changes) == ["created", "created", "revoked", "rotated"]


def test_deactivation_ends_sessions_and_revokes_keys(alpha, schools):
    ann = alpha.send("POST", "/Users", okta_user("ann@alpha.example.edu")).json()["id"]
    alpha.send(
        "POST",
        "/Groups",
        {"schemas": [GROUP_SCHEMA], "displayName": "alpha-students", "members": [{"value": ann}]},
    )
    user = get_user_model().objects.get(scim_user__scim_id=ann)
    end_user = EndUser.objects.get(user=user, license=schools[0].license)
    portal_key, _ = api_key_create(license=schools[0].license, end_user=end_user)
    browser = Client()
    browser.force_login(user)
    other = get_user_model().objects.create_user("someone-else")
    Client().force_login(other)
    assert Session.objects.count() == 2

    off = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "Replace", "path": "active", "value": False}],
    }
    assert alpha.send("PATCH", f"/Users/{ann}", off).status_code == 200

    assert Session.objects.count() == 1  # hers ended, the other person's kept
    assert Session.objects.get().get_decoded()["_auth_user_id"] == str(other.pk)
    assert ApiKey.objects.get(pk=portal_key.pk).active is False
    assert EndUser.objects.get(pk=end_user.pk).active is False
    user.refresh_from_db()
    assert user.is_active is False
    row = AuditEvent.objects.get(action="user_deactivated", target=f"user:{user.pk}")
    assert row.detail["sessions_ended"] == 1 and row.detail["keys_revoked"] == 1
