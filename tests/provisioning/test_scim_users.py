"""/scim/v2/Users with the requests Entra ID and Okta send. The bodies follow Microsoft's
"Tutorial: Develop and plan provisioning for a SCIM endpoint in Microsoft Entra ID" (the
request/response examples of its "Request and response examples" section) and Okta's "SCIM 2.0
protocol reference" (create, retrieve by userName filter, PATCH active false, PUT)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from licensing.models import AuditEvent, EndUser, ScimUser, SsoIdentity

from .conftest import PATCH_SCHEMA, SCIM, USER_SCHEMA, assert_scim_error

ENTERPRISE = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"


def entra_user(user_name="Test_User_ab6490ee@alpha.example.edu", external_id="0a21f0f2-8d2a"):
    """Entra ID's "Create User" request (its tutorial's example, names changed)."""
    return {
        "schemas": [USER_SCHEMA, ENTERPRISE],
        "externalId": external_id,
        "userName": user_name,
        "active": True,
        "emails": [{"primary": True, "type": "work", "value": user_name.lower()}],
        "meta": {"resourceType": "User"},
        "name": {
            "formatted": "givenName familyName",
            "familyName": "familyName",
            "givenName": "givenName",
        },
        "roles": [],
    }


def okta_user(user_name="isabella.chen@alpha.example.edu"):
    """Okta's "Create the user" request (SCIM 2.0 protocol reference)."""
    return {
        "schemas": [USER_SCHEMA],
        "userName": user_name,
        "name": {"givenName": "Isabella", "familyName": "Chen"},
        "emails": [{"primary": True, "value": user_name, "type": "work"}],
        "displayName": "Isabella Chen",
        "locale": "en-US",
        "externalId": "00u" + user_name.split("@")[0],
        "groups": [],
        "password": "1mz050nq",
        "active": True,
    }


def test_entra_create_get_and_filters(alpha, schools):
    created = alpha.send("POST", "/Users", entra_user())
    assert created.status_code == 201, created.content
    assert created["Content-Type"].startswith(SCIM)
    body = created.json()
    assert body["userName"] == "Test_User_ab6490ee@alpha.example.edu"
    assert body["active"] is True
    assert body["meta"]["resourceType"] == "User"
    assert created["Location"] == body["meta"]["location"]
    row = ScimUser.objects.get(scim_id=body["id"])
    assert row.institution == schools[0].institution
    assert row.user.email == "test_user_ab6490ee@alpha.example.edu"
    assert row.user.first_name == "givenName" and row.user.is_active
    identity = SsoIdentity.objects.get(user=row.user)
    assert (identity.provider, identity.subject) == (schools[0].provider, "0a21f0f2-8d2a")
    assert AuditEvent.objects.filter(action="scim_changed", target=f"user:{row.user_id}").exists()

    got = alpha.get(f"/Users/{body['id']}")
    assert got.status_code == 200 and got.json()["id"] == body["id"]
    # Entra's first call of a cycle: a userName filter (its tutorial, "Get User by query").
    listed = alpha.get('/Users?filter=userName eq "Test_User_ab6490ee@alpha.example.edu"')
    assert listed.status_code == 200
    assert listed.json()["totalResults"] == 1
    assert listed.json()["Resources"][0]["id"] == body["id"]
    none = alpha.get('/Users?filter=userName eq "nobody@alpha.example.edu"')
    assert none.json()["totalResults"] == 0 and none.json()["Resources"] == []
    by_external = alpha.get('/Users?filter=externalId eq "0a21f0f2-8d2a"')
    assert by_external.json()["totalResults"] == 1
    by_mail = alpha.get(
        '/Users?filter=emails[type eq "work"].value eq "test_user_ab6490ee@alpha.example.edu"'
    )
    assert by_mail.json()["totalResults"] == 1


def test_duplicate_user_name_is_a_conflict(alpha):
    assert alpha.send("POST", "/Users", entra_user()).status_code == 201
    again = alpha.send("POST", "/Users", entra_user(external_id="other"))
    assert_scim_error(again, 409, "uniqueness")
    assert ScimUser.objects.count() == 1


def test_entra_patch_operations(alpha):
    scim_id = alpha.send("POST", "/Users", entra_user()).json()["id"]
    # Entra's "Update User [Multi-valued properties]" and "[Single-valued properties]".
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [
            {
                "op": "Replace",
                "path": 'emails[type eq "work"].value',
                "value": "updatedemail@alpha.example.edu",
            },
            {"op": "Replace", "path": "name.familyName", "value": "updatedFamilyName"},
            {"op": "Add", "path": f"{ENTERPRISE}:department", "value": "Biology"},
            {"op": "Replace", "value": {"displayName": "Updated Name"}},
        ],
    }
    patched = alpha.send("PATCH", f"/Users/{scim_id}", patch)
    assert patched.status_code == 200, patched.content
    body = patched.json()
    assert body["emails"][0]["value"] == "updatedemail@alpha.example.edu"
    assert body["displayName"] == "Updated Name"
    assert body[ENTERPRISE]["department"] == "Biology"
    row = ScimUser.objects.get(scim_id=scim_id)
    assert row.user.email == "updatedemail@alpha.example.edu"
    assert row.user.last_name == "updatedFamilyName"
    removed = alpha.send(
        "PATCH",
        f"/Users/{scim_id}",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "Remove", "path": "displayName"}]},
    )
    assert removed.status_code == 200 and "displayName" not in removed.json()


def test_entra_disable_with_the_string_false(alpha):
    scim_id = alpha.send("POST", "/Users", entra_user()).json()["id"]
    # Entra's "Disable User": `"value": "False"` (a string) in some tenants.
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "Replace", "path": "active", "value": "False"}],
    }
    answer = alpha.send("PATCH", f"/Users/{scim_id}", patch)
    assert answer.status_code == 200 and answer.json()["active"] is False
    row = ScimUser.objects.get(scim_id=scim_id)
    assert row.active is False and row.user.is_active is False
    assert AuditEvent.objects.filter(action="user_deactivated", target=f"user:{row.user_id}")


def test_okta_create_put_and_deactivate(alpha):
    created = alpha.send("POST", "/Users", okta_user())
    assert created.status_code == 201, created.content
    body = created.json()
    assert "password" not in body
    assert "1mz050nq" not in str(ScimUser.objects.get(scim_id=body["id"]).resource)
    # Okta's "Update a specific user (PUT)": the whole resource with the change.
    replaced = dict(okta_user(), id=body["id"], name={"givenName": "Bella", "familyName": "Chen"})
    replaced.pop("password")
    put = alpha.send("PUT", f"/Users/{body['id']}", replaced)
    assert put.status_code == 200, put.content
    assert get_user_model().objects.get(scim_user__scim_id=body["id"]).first_name == "Bella"
    # Okta's deactivation: PATCH with a no-path value object.
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "replace", "value": {"active": False}}],
    }
    off = alpha.send("PATCH", f"/Users/{body['id']}", patch)
    assert off.status_code == 200 and off.json()["active"] is False
    assert not get_user_model().objects.get(scim_user__scim_id=body["id"]).is_active
    back = alpha.send(
        "PATCH",
        f"/Users/{body['id']}",
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "replace", "value": {"active": True}}]},
    )
    assert back.json()["active"] is True
    assert get_user_model().objects.get(scim_user__scim_id=body["id"]).is_active


def test_paging(alpha):
    for n in range(5):
        assert alpha.send("POST", "/Users", okta_user(f"p{n}@alpha.example.edu")).status_code == 201
    page = alpha.get("/Users?startIndex=2&count=2").json()
    assert page["totalResults"] == 5 and page["startIndex"] == 2 and page["itemsPerPage"] == 2
    assert [r["userName"] for r in page["Resources"]] == [
        "p1@alpha.example.edu",
        "p2@alpha.example.edu",
    ]
    assert alpha.get("/Users?count=0").json()["Resources"] == []
    assert_scim_error(alpha.get("/Users?count=1e400"), 400, "invalidValue")
    assert_scim_error(alpha.get(f"/Users?startIndex={2**64}"), 400, "invalidValue")


def test_delete_keeps_the_person_inactive(alpha):
    scim_id = alpha.send("POST", "/Users", okta_user()).json()["id"]
    gone = alpha.send("DELETE", f"/Users/{scim_id}")
    assert gone.status_code == 204
    assert not ScimUser.objects.exists()
    user = get_user_model().objects.get(email="isabella.chen@alpha.example.edu")
    assert user.is_active is False
    assert_scim_error(alpha.get(f"/Users/{scim_id}"), 404)


def test_a_prior_sign_in_is_the_same_person(alpha, schools):
    """A person who signed in by SSO before provisioning: SCIM takes over the same user."""
    user = get_user_model().objects.create_user("early@alpha.example.edu")
    SsoIdentity.objects.create(provider=schools[0].provider, subject="sub-early", user=user)
    created = alpha.send(
        "POST", "/Users", entra_user("early@alpha.example.edu", external_id="sub-early")
    )
    assert created.status_code == 201
    assert ScimUser.objects.get().user == user
    assert EndUser.objects.count() == 0  # no group yet: no student role
