"""POST /Users/.search and /Groups/.search (RFC 7644 3.4.3): a SearchRequest answered as the GET
list is, hostile bodies refused in SCIM's shape; and a group's members answered with the
`display` the identity system sent, else the person's own name."""

from __future__ import annotations

import json

import pytest

from licensing.models import AuditEvent, ScimGroup

from .conftest import GROUP_SCHEMA, PATCH_SCHEMA, assert_scim_error
from .test_scim_users import okta_user

SEARCH = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


def _users(client, *names: str) -> list[str]:
    ids = []
    for name in names:
        answer = client.send("POST", "/Users", okta_user(f"{name}@alpha.example.edu"))
        assert answer.status_code == 201, answer.content
        ids.append(answer.json()["id"])
    return ids


def _search(client, path: str, **fields):
    return client.send("POST", path, {"schemas": [SEARCH], **fields})


def test_user_search_filters_pages_and_selects_like_get(alpha, beta):
    _users(alpha, "ann", "bob", "cat")
    _users(beta, "dan")  # another institution's: never found
    found = _search(
        alpha,
        "/Users/.search",
        filter='userName sw "b" or userName sw "c"',
        attributes=["userName"],
        startIndex=1,
        count=1,
    )
    assert found.status_code == 200, found.content
    body = found.json()
    assert body["schemas"] == [LIST]
    assert (body["totalResults"], body["startIndex"], body["itemsPerPage"]) == (2, 1, 1)
    (only,) = body["Resources"]
    assert only["userName"] == "bob@alpha.example.edu"
    assert "emails" not in only and "name" not in only  # attributes: userName (and id)
    same = alpha.get("/Users?filter=userName%20sw%20%22b%22&attributes=userName")
    assert same.json()["Resources"] == [only]
    second = _search(alpha, "/Users/.search", excludedAttributes=["emails"], startIndex=3)
    assert [r["userName"] for r in second.json()["Resources"]] == ["cat@alpha.example.edu"]
    assert "emails" not in second.json()["Resources"][0]
    everyone = alpha.send("POST", "/Users/.search", {})  # no schemas: all defaults
    assert everyone.json()["totalResults"] == 3


def test_group_search_and_the_root_search(alpha):
    (ann,) = _users(alpha, "ann")
    for name in ("alpha-students", "alpha-teachers"):
        created = alpha.send(
            "POST",
            "/Groups",
            {"schemas": [GROUP_SCHEMA], "displayName": name, "members": [{"value": ann}]},
        )
        assert created.status_code == 201, created.content
    found = _search(alpha, "/Groups/.search", filter='displayName eq "alpha-teachers"')
    assert found.status_code == 200, found.content
    assert [g["displayName"] for g in found.json()["Resources"]] == ["alpha-teachers"]
    assert found.json()["Resources"][0]["members"][0]["value"] == ann
    # Every type at once is not served: 501, RFC 7644 3.12's "not supported".
    assert_scim_error(_search(alpha, "/.search"), 501)
    assert_scim_error(alpha.get("/Users/.search"), 405)


BIG = 2**64
HEAD = f'{{"schemas": ["{SEARCH}"], '


@pytest.mark.parametrize(
    "raw, status, scim_type",
    [
        (HEAD + '"filter": "userName eq \\"a\\u0000b\\""}', 400, "invalidValue"),
        (HEAD + '"filter": "userName eq \\"\\ud800\\""}', 400, "invalidSyntax"),
        (HEAD + '"count": 1e400}', 400, "invalidSyntax"),
        (HEAD + f'"count": {BIG}}}', 400, "invalidValue"),
        (HEAD + f'"startIndex": {BIG}}}', 400, "invalidValue"),
        (HEAD + '"count": 2.5}', 400, "invalidValue"),
        (HEAD + '"count": "10"}', 400, "invalidValue"),
        (HEAD + '"count": true}', 400, "invalidValue"),
        (HEAD + '"filter": ' + "[" * 5000 + "]" * 5000 + "}", 400, "invalidSyntax"),
        (HEAD + '"filter": 7}', 400, "invalidFilter"),
        (HEAD + '"filter": "userName zz 1"}', 400, "invalidFilter"),
        (HEAD + '"filter": "' + "a" * 2000 + '"}', 400, "invalidFilter"),
        (HEAD + '"attributes": ' + json.dumps(["userName"] * 101) + "}", 400, "tooMany"),
        (HEAD + '"attributes": [{"a": 1}]}', 400, "invalidValue"),
        ('{"schemas": ["urn:x"]}', 400, "invalidSyntax"),
        ("[]", 400, "invalidSyntax"),
        ("x" * 1_100_000, 413, "tooMany"),
    ],
)
def test_hostile_search_bodies(alpha, raw, status, scim_type):
    answer = alpha.send("POST", "/Users/.search", raw=raw)
    assert_scim_error(answer, status, scim_type)
    assert AuditEvent.objects.filter(action="scim_refused", detail__status=status).count() == 1


def test_member_display_is_answered_as_sent_else_the_persons_name(alpha):
    ann, bob = _users(alpha, "ann", "bob")
    created = alpha.send(
        "POST",
        "/Groups",
        {
            "schemas": [GROUP_SCHEMA],
            "displayName": "alpha-students",
            "members": [{"value": ann, "display": "Ann (Year 9)"}, {"value": bob}],
        },
    )
    assert created.status_code == 201, created.content
    group = created.json()["id"]

    def displays():
        answer = alpha.get(f"/Groups/{group}")
        return {m["value"]: m["display"] for m in answer.json()["members"]}

    # Bob sent without one: his displayName (okta_user's), as Okta's own answers show.
    assert displays() == {ann: "Ann (Year 9)", bob: "Isabella Chen"}
    row = ScimGroup.objects.get()
    assert row.member_displays == {ann: "Ann (Year 9)"}
    # A PATCH that adds a member with a display keeps the others' as they were.
    (cat,) = _users(alpha, "cat")
    patch = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "add", "path": "members", "value": [{"value": cat, "display": "C"}]}],
    }
    assert alpha.send("PATCH", f"/Groups/{group}", patch).status_code == 200
    assert displays() == {ann: "Ann (Year 9)", bob: "Isabella Chen", cat: "C"}
    too_long = {**patch, "Operations": [{**patch["Operations"][0]}]}
    too_long["Operations"][0]["value"] = [{"value": cat, "display": "x" * 300}]
    assert_scim_error(alpha.send("PATCH", f"/Groups/{group}", too_long), 400, "invalidValue")
    # Removing a member forgets their display.
    remove = {
        "schemas": [PATCH_SCHEMA],
        "Operations": [{"op": "remove", "path": f'members[value eq "{ann}"]'}],
    }
    assert alpha.send("PATCH", f"/Groups/{group}", remove).status_code == 200
    assert ann not in ScimGroup.objects.get().member_displays
