"""Reads of provisioning: whose token a request carries, and the institution's users and groups
as SCIM resources. Every read is scoped by the token's institution: another institution's id is
simply not found."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.db.models import QuerySet
from scim2_models import GroupMember, Meta

from ..models import ScimGroup, ScimToken, ScimUser
from . import wire

TOKEN_PREFIX = "scim-"
TOKEN_MAX = 100


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_of(authorization: str) -> ScimToken | None:
    """The active token an `Authorization: Bearer ...` header carries, if any."""
    parts = authorization.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    token = parts[1]
    if len(token) > TOKEN_MAX or not token.isascii() or not token.startswith(TOKEN_PREFIX):
        return None
    return (
        ScimToken.objects.select_related("institution")
        .filter(digest=token_digest(token), active=True)
        .first()
    )


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError, AttributeError):
        return None


def user_row(institution_id: int, scim_id: str, *, lock: bool = False) -> ScimUser | None:
    key = _uuid(scim_id)
    if key is None:
        return None
    rows = ScimUser.objects.select_related("user").filter(
        institution_id=institution_id, scim_id=key
    )
    return (rows.select_for_update() if lock else rows).first()


def group_row(institution_id: int, scim_id: str, *, lock: bool = False) -> ScimGroup | None:
    key = _uuid(scim_id)
    if key is None:
        return None
    rows = ScimGroup.objects.filter(institution_id=institution_id, scim_id=key)
    return (rows.select_for_update() if lock else rows).first()


def members_of(institution_id: int, ids: list[str]) -> list[ScimUser]:
    """The institution's users these SCIM ids name; an id of no user of it is refused."""
    parsed = [_uuid(value) for value in ids]
    keys = [key for key in parsed if key is not None]
    if len(keys) != len(parsed):
        raise wire.ScimRefusal(
            400, "A member id is not a user of this institution.", "invalidValue"
        )
    rows = list(ScimUser.objects.filter(institution_id=institution_id, scim_id__in=keys))
    if len(rows) != len(set(keys)):
        raise wire.ScimRefusal(
            400, "A member id is not a user of this institution.", "invalidValue"
        )
    return rows


def _meta(row: ScimUser | ScimGroup, kind: str, base_url: str) -> Meta:
    path = "Users" if kind == "User" else "Groups"
    return Meta(
        resource_type=kind,
        created=row.created_at,
        last_modified=row.updated_at,
        location=f"{base_url}/{path}/{row.scim_id}",
    )


def user_resource(row: ScimUser, base_url: str) -> Any:
    resource = wire.resource_of(wire.UserModel, row.resource)
    resource.id = str(row.scim_id)
    resource.meta = _meta(row, "User", base_url)
    return resource


def member_display(member: ScimUser) -> str:
    """A member's display when the identity system sent none: the person's displayName, else
    their userName."""
    name = member.resource.get("displayName") if isinstance(member.resource, dict) else None
    return name if isinstance(name, str) and name else member.user_name


def group_resource(row: ScimGroup, base_url: str) -> Any:
    sent = row.member_displays if isinstance(row.member_displays, dict) else {}
    members = [
        GroupMember(
            value=str(m.scim_id),
            display=sent.get(str(m.scim_id)) or member_display(m),
            type="User",
            ref=f"{base_url}/Users/{m.scim_id}" if base_url else None,
        )
        for m in row.members.order_by("id")
    ]
    resource = wire.GroupModel(
        id=str(row.scim_id),
        display_name=row.display_name,
        external_id=row.external_id or None,
        members=members or None,
        meta=_meta(row, "Group", base_url),
    )
    return resource


def _narrowed(rows: QuerySet, scim_filter: Any, fields: dict[str, str]) -> QuerySet:
    """A top-level `attr eq "value"` on an indexed column is asked of the database first."""
    from scim2_models.path.expressions import Comparison

    node = scim_filter.ast if scim_filter is not None else None
    if isinstance(node, Comparison) and node.op.value == "eq" and node.attr_path.uri is None:
        column = fields.get(node.attr_path.attr.lower())
        if column is not None and node.attr_path.sub_attr is None and isinstance(node.value, str):
            return rows.filter(**{f"{column}__iexact": node.value})
    return rows


USER_COLUMNS = {"username": "user_name", "externalid": "external_id"}
GROUP_COLUMNS = {"displayname": "display_name", "externalid": "external_id"}


def users_listed(
    institution_id: int, scim_filter: Any, start: int, count: int, base_url: str, selection=None
) -> tuple[list[dict[str, Any]], int]:
    rows = _narrowed(
        ScimUser.objects.filter(institution_id=institution_id), scim_filter, USER_COLUMNS
    )
    found = [user_resource(row, base_url) for row in rows.order_by("id")]
    return _page(found, scim_filter, start, count, selection)


def groups_listed(
    institution_id: int, scim_filter: Any, start: int, count: int, base_url: str, selection=None
) -> tuple[list[dict[str, Any]], int]:
    rows = _narrowed(
        ScimGroup.objects.filter(institution_id=institution_id), scim_filter, GROUP_COLUMNS
    )
    found = [group_resource(row, base_url) for row in rows.order_by("id")]
    return _page(found, scim_filter, start, count, selection)


def _page(found: list, scim_filter: Any, start: int, count: int, selection=None):
    if scim_filter is not None:
        found = [resource for resource in found if scim_filter.match(resource)]
    page = found[start - 1 : start - 1 + count]
    return [wire.dumped(resource, selection) for resource in page], len(found)
