"""SCIM's wire format, through scim2-models (docs/decisions/scim.md): bodies parsed strictly,
resources validated, PATCH applied, filters matched, errors shaped. No ORM here."""

from __future__ import annotations

import json
from typing import Any

from lark.exceptions import LarkError
from pydantic import ValidationError
from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    Context,
    EnterpriseUser,
    Error,
    ETag,
    Filter,
    Group,
    ListResponse,
    Patch,
    PatchOp,
    ResourceType,
    ResponseParameters,
    SCIMException,
    ScimFilter,
    ServiceProviderConfig,
    Sort,
    User,
)

from core.jsonio import parse_json
from core.text import is_storable_json

SCIM_JSON = "application/scim+json"
ACCEPTED_TYPES = (SCIM_JSON, "application/json")
MAX_BODY = 1_000_000  # bytes; a body of a thousand members fits many times over
MAX_MEMBERS = 1000  # members named by one request (Entra sends them by the hundred at most)
MAX_RESULTS = 200  # a page's largest `count`
MAX_FILTER = 1000  # characters of a filter
MAX_TEXT = 255  # characters of a stored text (a name, an id, a member's display)
MAX_ATTRIBUTES = 100  # names in a SearchRequest's attributes or excludedAttributes
SEARCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:SearchRequest"

UserModel = User[EnterpriseUser]
GroupModel = Group


class ScimRefusal(Exception):
    """A request SCIM answers with its error shape: `status`, `scim_type` (RFC 7644 3.12)."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.scim_type = scim_type


def error_body(refusal: ScimRefusal) -> dict[str, Any]:
    error = Error(status=refusal.status, scim_type=refusal.scim_type, detail=refusal.detail)
    return error.model_dump()


def body_of(raw: bytes, content_type: str) -> dict[str, Any]:
    """The request's JSON object: the SCIM media type (or JSON), UTF-8, no NUL, no lone
    surrogate, no number beyond a float, no nesting beyond the strict parser's depth."""
    media = content_type.split(";")[0].strip().lower()
    if media not in ACCEPTED_TYPES:
        raise ScimRefusal(415, f"Send the body as {SCIM_JSON}.", "invalidSyntax")
    if len(raw) > MAX_BODY:
        raise ScimRefusal(413, f"The body is larger than {MAX_BODY} bytes.", "tooMany")
    try:
        data = parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScimRefusal(400, f"The body is not valid JSON: {exc}", "invalidSyntax") from exc
    if not isinstance(data, dict):
        raise ScimRefusal(400, "The body is not a JSON object.", "invalidSyntax")
    if not is_storable_json(data):
        raise ScimRefusal(400, "The body holds a NUL or a lone surrogate.", "invalidValue")
    return data


def _validated(model: Any, data: Any, context: Context) -> Any:
    try:
        return model.model_validate(data, scim_ctx=context)
    except (ValidationError, ValueError, TypeError, LarkError, SCIMException) as exc:
        raise ScimRefusal(400, _first_error(exc), "invalidValue") from exc


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ()))
        return f"{where}: {error.get('msg', 'invalid')}"[:500]
    return str(exc)[:500]


def user_in(data: dict[str, Any], *, replacing: bool = False) -> Any:
    context = (
        Context.RESOURCE_REPLACEMENT_REQUEST if replacing else Context.RESOURCE_CREATION_REQUEST
    )
    return _validated(UserModel, data, context)


def group_in(data: dict[str, Any], *, replacing: bool = False) -> Group:
    context = (
        Context.RESOURCE_REPLACEMENT_REQUEST if replacing else Context.RESOURCE_CREATION_REQUEST
    )
    group = _validated(GroupModel, data, context)
    if len(group.members or []) > MAX_MEMBERS:
        raise ScimRefusal(400, f"More than {MAX_MEMBERS} members in one request.", "tooMany")
    return group


def resource_of(model: Any, stored: dict[str, Any]) -> Any:
    """A stored resource back as its model (it was validated when written)."""
    return model.model_validate(stored, scim_ctx=Context.DEFAULT)


def patched(model: Any, resource: Any, data: dict[str, Any]) -> Any:
    """The resource with the PatchOp applied (scim2-models' own semantics of add, replace and
    remove, with or without a path, filtered paths and Entra's "False" strings)."""
    operations = data.get("Operations")
    if isinstance(operations, list) and len(operations) > MAX_MEMBERS:
        raise ScimRefusal(400, f"More than {MAX_MEMBERS} operations in one request.", "tooMany")
    patch = _validated(PatchOp[model], data, Context.RESOURCE_PATCH_REQUEST)
    for operation in patch.operations or []:
        value = operation.value
        if isinstance(value, list) and len(value) > MAX_MEMBERS:
            raise ScimRefusal(400, f"More than {MAX_MEMBERS} values in one operation.", "tooMany")
    try:
        patch.patch(resource)
    except (ValidationError, ValueError, TypeError, LookupError, LarkError, SCIMException) as exc:
        raise ScimRefusal(400, _first_error(exc), "invalidPath") from exc
    return resource


def dumped(resource: Any, selection: dict[str, str] | None = None) -> dict[str, Any]:
    """The resource as answered; `selection` is the query's `attributes` and
    `excludedAttributes` (RFC 7644 3.9)."""
    parameters: Any = None
    if selection:
        try:
            parameters = ResponseParameters.model_validate(selection)
        except (ValidationError, ValueError, LarkError, SCIMException) as exc:
            raise ScimRefusal(400, _first_error(exc), "invalidValue") from exc
    return resource.model_dump(
        scim_ctx=Context.RESOURCE_QUERY_RESPONSE, response_parameters=parameters
    )


def selection_of(query: Any) -> dict[str, str]:
    return {name: query[name] for name in ("attributes", "excludedAttributes") if query.get(name)}


def stored(resource: Any) -> dict[str, Any]:
    """What is kept of a resource: all it said but its password, id and meta (ours)."""
    data = resource.model_dump(scim_ctx=Context.DEFAULT)
    for name in ("password", "id", "meta", "groups"):
        data.pop(name, None)
    return data


def filter_of(model: Any, text: str | None) -> ScimFilter | None:
    if text is None or text == "":
        return None
    if len(text) > MAX_FILTER or not is_storable_json(text):
        raise ScimRefusal(400, "The filter is too long or holds a NUL.", "invalidFilter")
    try:
        scim_filter = ScimFilter[model](text)
        _ = scim_filter.ast  # parsed now: a syntax error is the request's, not the listing's
        return scim_filter
    except (ValueError, TypeError, LookupError, LarkError, SCIMException) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"Not a filter this server reads: {first_line}"[:500]
        raise ScimRefusal(400, message, "invalidFilter") from exc


def paging(start: str | None, count: str | None) -> tuple[int, int]:
    """RFC 7644 3.4.2.4: startIndex 1-based (less than 1 is 1), count at most MAX_RESULTS."""
    return max(_whole(start, "startIndex", 1), 1), min(_whole(count, "count", 100), MAX_RESULTS)


def _whole(value: str | None, name: str, default: int) -> int:
    if value is None or value == "":
        return default
    if not value.isascii() or not value.lstrip("-").isdigit() or len(value) > 9:
        raise ScimRefusal(400, f"{name} is not a whole number.", "invalidValue")
    return max(int(value), 0)


def search_query(data: dict[str, Any]) -> dict[str, str]:
    """A SearchRequest body (RFC 7644 3.4.3) as the query parameters a GET list takes, so that
    POST /.search goes through the same filter, paging and attribute selection as GET."""
    schemas = data.get("schemas", [SEARCH_SCHEMA])
    if not isinstance(schemas, list) or SEARCH_SCHEMA not in schemas:
        raise ScimRefusal(400, f"The body's schemas must name {SEARCH_SCHEMA}.", "invalidSyntax")
    query: dict[str, str] = {}
    for name in ("attributes", "excludedAttributes"):
        if data.get(name) is not None:
            query[name] = _names(data[name], name)
    if data.get("filter") is not None:
        if not isinstance(data["filter"], str):
            raise ScimRefusal(400, "filter is not a string.", "invalidFilter")
        query["filter"] = data["filter"]
    for name in ("startIndex", "count"):
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScimRefusal(400, f"{name} is not a whole number.", "invalidValue")
        query[name] = str(value)  # paging() refuses what is beyond nine digits
    return query


def _names(value: Any, name: str) -> str:
    """attributes / excludedAttributes: a list of attribute names (or one comma-joined string,
    as in a URL)."""
    names = value if isinstance(value, list) else [value]
    if len(names) > MAX_ATTRIBUTES:
        raise ScimRefusal(400, f"More than {MAX_ATTRIBUTES} names in {name}.", "tooMany")
    if not all(isinstance(item, str) and item and len(item) <= MAX_TEXT for item in names):
        raise ScimRefusal(400, f"{name} is not a list of attribute names.", "invalidValue")
    return ",".join(names)


def list_body(resources: list[dict[str, Any]], total: int, start: int) -> dict[str, Any]:
    response = ListResponse[UserModel | GroupModel](
        total_results=total, start_index=start, items_per_page=len(resources)
    )
    body = response.model_dump(scim_ctx=Context.SEARCH_RESPONSE)
    body["Resources"] = resources
    return body


def service_provider_config(base_url: str) -> dict[str, Any]:
    config = ServiceProviderConfig(
        patch=Patch(supported=True),
        bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
        filter=Filter(supported=True, max_results=MAX_RESULTS),
        change_password=ChangePassword(supported=False),
        sort=Sort(supported=False),
        etag=ETag(supported=False),
        authentication_schemes=[
            AuthenticationScheme(
                type="oauthbearertoken",
                name="OAuth Bearer Token",
                description="The institution's token from manage.py scim_token",
                primary=True,
            )
        ],
    )
    body = config.model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)
    body["meta"] = {
        "resourceType": "ServiceProviderConfig",
        "location": f"{base_url}/ServiceProviderConfig",
    }
    return body


def resource_types(base_url: str) -> list[dict[str, Any]]:
    out = []
    for model in (UserModel, GroupModel):
        body = ResourceType.from_resource(model).model_dump(
            scim_ctx=Context.RESOURCE_QUERY_RESPONSE
        )
        body["meta"] = {
            "resourceType": "ResourceType",
            "location": f"{base_url}/ResourceTypes/{body['id']}",
        }
        out.append(body)
    return out


def schemas(base_url: str) -> list[dict[str, Any]]:
    out = []
    for model in (User, EnterpriseUser, Group):
        body = model.to_schema().model_dump(scim_ctx=Context.RESOURCE_QUERY_RESPONSE)
        body["meta"] = {"resourceType": "Schema", "location": f"{base_url}/Schemas/{body['id']}"}
        out.append(body)
    return out
