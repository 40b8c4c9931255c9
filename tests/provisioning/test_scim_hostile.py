"""Hostile bodies: a clear 4xx in SCIM's error shape, an audit row, nothing changed."""

from __future__ import annotations

import json

import pytest

from licensing.models import AuditEvent, ScimGroup, ScimUser

from .conftest import GROUP_SCHEMA, PATCH_SCHEMA, USER_SCHEMA, assert_scim_error
from .test_scim_users import okta_user

NUL = json.dumps({"schemas": [USER_SCHEMA], "userName": "a\u0000b@alpha.example.edu"})
HEAD = f'{{"schemas": ["{USER_SCHEMA}"], '
SURROGATE = HEAD + '"userName": "\\ud800@alpha.example.edu"}'
HUGE_FLOAT = HEAD + '"userName": "x@alpha.example.edu", "active": 1e400}'
BIG_INT = HEAD + f'"userName": {2**64}}}'
DEEP = HEAD + '"userName": "d@x.org", "name": ' + "[" * 5000 + "]" * 5000 + "}"
LONG_NAME = json.dumps({"schemas": [USER_SCHEMA], "userName": "x" * 300 + "@alpha.example.edu"})


@pytest.mark.parametrize(
    "raw, status",
    [
        (NUL, 400),
        (SURROGATE, 400),
        (HUGE_FLOAT, 400),
        (BIG_INT, 400),
        (DEEP, 400),
        (LONG_NAME, 400),
        ("not json", 400),
        ("[]", 400),
        (json.dumps({"schemas": [USER_SCHEMA]}), 400),  # no userName
        (b"\xff\xfe", 400),
        ("x" * 1_100_000, 413),
    ],
)
def test_hostile_user_bodies(alpha, raw, status):
    answer = alpha.send("POST", "/Users", raw=raw)
    assert_scim_error(answer, status)
    assert not ScimUser.objects.exists()
    assert AuditEvent.objects.filter(action="scim_refused", detail__status=status).count() == 1


def test_wrong_content_type(alpha):
    answer = alpha.send("POST", "/Users", okta_user(), content_type="text/plain")
    assert_scim_error(answer, 415)
    assert not ScimUser.objects.exists()


def test_huge_member_lists_and_bad_ids(alpha):
    ann = alpha.send("POST", "/Users", okta_user("ann@alpha.example.edu")).json()["id"]
    group = alpha.send(
        "POST", "/Groups", {"schemas": [GROUP_SCHEMA], "displayName": "alpha-students"}
    ).json()["id"]
    many = [{"value": ann}] * 1001
    huge = alpha.send(
        "PATCH",
        f"/Groups/{group}",
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "add", "path": "members", "value": many}],
        },
    )
    assert_scim_error(huge, 400, "tooMany")
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000", "\u0000"):
        answer = alpha.send(
            "PATCH",
            f"/Groups/{group}",
            {
                "schemas": [PATCH_SCHEMA],
                "Operations": [{"op": "add", "path": "members", "value": [{"value": bad}]}],
            },
        )
        assert answer.status_code == 400, answer.content
    assert ScimGroup.objects.get().members.count() == 0
    assert_scim_error(alpha.get("/Users/not-a-uuid"), 404)


def test_bad_patches_and_filters(alpha):
    ann = alpha.send("POST", "/Users", okta_user("ann@alpha.example.edu")).json()["id"]
    for body in (
        {"schemas": [PATCH_SCHEMA], "Operations": [{"op": "explode", "path": "active"}]},
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "replace", "path": "nope[[", "value": 1}],
        },
        {"schemas": [PATCH_SCHEMA], "Operations": "all"},
        {
            "schemas": [PATCH_SCHEMA],
            "Operations": [{"op": "replace", "path": "userName", "value": "y" * 400}],
        },
    ):
        answer = alpha.send("PATCH", f"/Users/{ann}", body)
        assert answer.status_code == 400, (body, answer.content)
        assert answer.json()["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]
    assert ScimUser.objects.get().user_name == "ann@alpha.example.edu"
    for text in ('userName eq "a', "userName xx 1", "x" * 2000):
        assert_scim_error(alpha.get(f"/Users?filter={text}"), 400, "invalidFilter")
    assert_scim_error(alpha.send("POST", f"/Users/{ann}", okta_user()), 405)


def test_attribute_values_do_not_escalate(alpha, schools):
    """Roles come from the mapping of groups' names only: an attribute saying "admin" or a
    user name of the superuser gives nothing."""
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root@alpha.example.edu", password="x")
    body = dict(
        okta_user("root@alpha.example.edu"),
        roles=[{"value": "admin"}],
        userType="admin",
        title="superuser",
    )
    answer = alpha.send("POST", "/Users", body)
    assert answer.status_code == 201
    row = ScimUser.objects.get()
    assert row.user != root and not row.user.is_staff and not row.user.is_superuser
    root.refresh_from_db()
    assert root.is_active and root.is_superuser
