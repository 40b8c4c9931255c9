"""/scim/v2/Groups with Entra ID's and Okta's requests (Entra's tutorial: "Create Group",
"Update Group [Add Members]", "[Remove Members]", "[Non-member attributes]"; Okta's SCIM 2.0
reference: "Create groups", "Update group name", "Update group membership"). Memberships give
roles through the sign-in mapping (licensing.signin.sso)."""

from __future__ import annotations

from licensing.models import AdminProfile, AuditEvent, EndUser, ScimGroup

from .conftest import GROUP_SCHEMA, PATCH_SCHEMA, assert_scim_error
from .test_scim_users import okta_user


def _user(client, name: str) -> str:
    answer = client.send("POST", "/Users", okta_user(f"{name}@alpha.example.edu"))
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def _patch(*operations) -> dict:
    return {"schemas": [PATCH_SCHEMA], "Operations": list(operations)}


def test_entra_group_membership_gives_and_takes_roles(alpha, schools):
    ann, bob = _user(alpha, "ann"), _user(alpha, "bob")
    # Entra's "Create Group": no members at first.
    created = alpha.send(
        "POST",
        "/Groups",
        {
            "schemas": [GROUP_SCHEMA],
            "externalId": "8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159",
            "displayName": "alpha-students",
            "meta": {"resourceType": "Group"},
        },
    )
    assert created.status_code == 201, created.content
    group_id = created.json()["id"]
    added = alpha.send(
        "PATCH",
        f"/Groups/{group_id}",
        _patch({"op": "Add", "path": "members", "value": [{"value": ann}, {"value": bob}]}),
    )
    assert added.status_code == 200, added.content
    assert {m["value"] for m in added.json()["members"]} == {ann, bob}
    students = EndUser.objects.filter(license=schools[0].license, active=True)
    assert {e.user.scim_user.user_name for e in students} == {
        "ann@alpha.example.edu",
        "bob@alpha.example.edu",
    }
    # Entra's "Remove Members": a filtered path.
    removed = alpha.send(
        "PATCH",
        f"/Groups/{group_id}",
        _patch({"op": "Remove", "path": f'members[value eq "{bob}"]'}),
    )
    assert removed.status_code == 200
    assert [m["value"] for m in removed.json()["members"]] == [ann]
    bob_end_user = EndUser.objects.get(user__scim_user__scim_id=bob)
    assert bob_end_user.active is False
    assert AuditEvent.objects.filter(action="role_changed", target=f"user:{bob_end_user.user_id}")
    # Renamed to a teachers' group: Ann is a teacher, no longer a student.
    renamed = alpha.send(
        "PATCH",
        f"/Groups/{group_id}",
        _patch({"op": "Replace", "path": "displayName", "value": "alpha-teachers"}),
    )
    assert renamed.status_code == 200 and renamed.json()["displayName"] == "alpha-teachers"
    profile = AdminProfile.objects.get(user__scim_user__scim_id=ann)
    assert profile.role == "teacher" and profile.institution == schools[0].institution
    assert not EndUser.objects.filter(user__scim_user__scim_id=ann, active=True).exists()
    assert alpha.send("DELETE", f"/Groups/{group_id}").status_code == 204
    assert not AdminProfile.objects.filter(user__scim_user__scim_id=ann).exists()
    assert not ScimGroup.objects.exists()


def test_okta_group_create_with_members_rename_and_filter(alpha):
    ann = _user(alpha, "ann")
    created = alpha.send(
        "POST",
        "/Groups",
        {
            "schemas": [GROUP_SCHEMA],
            "displayName": "alpha-admins",
            "members": [{"value": ann, "display": "ann@alpha.example.edu"}],
        },
    )
    assert created.status_code == 201, created.content
    group_id = created.json()["id"]
    assert AdminProfile.objects.get(user__scim_user__scim_id=ann).role == "admin"
    # Okta's "Update group name": a replace with a value object (no path).
    renamed = alpha.send(
        "PATCH",
        f"/Groups/{group_id}",
        _patch({"op": "replace", "value": {"id": group_id, "displayName": "Other name"}}),
    )
    assert renamed.status_code == 200, renamed.content
    assert not AdminProfile.objects.filter(user__scim_user__scim_id=ann).exists()
    listed = alpha.get('/Groups?filter=displayName eq "Other name"').json()
    assert listed["totalResults"] == 1 and listed["Resources"][0]["id"] == group_id
    # Okta's PUT of a group with its members.
    put = alpha.send(
        "PUT",
        f"/Groups/{group_id}",
        {
            "schemas": [GROUP_SCHEMA],
            "id": group_id,
            "displayName": "alpha-admins",
            "members": [{"value": ann}],
        },
    )
    assert put.status_code == 200, put.content
    assert AdminProfile.objects.get(user__scim_user__scim_id=ann).role == "admin"


def test_duplicate_group_name_is_a_conflict(alpha):
    body = {"schemas": [GROUP_SCHEMA], "displayName": "alpha-students"}
    assert alpha.send("POST", "/Groups", body).status_code == 201
    assert_scim_error(alpha.send("POST", "/Groups", body), 409, "uniqueness")
