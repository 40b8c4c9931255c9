"""/scim/v2/: the HTTP side of provisioning. Each view authenticates the institution's token,
parses and calls a service or a selector; a refusal is SCIM's error shape and an audit row."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from core.jsonio import dumps

from ..access.audit import audit_event_record
from ..models import AuditEvent, ScimToken
from . import selectors, services, wire

logger = logging.getLogger("gateway")


def _answer(body: Any, status: int = 200, location: str | None = None) -> HttpResponse:
    response = HttpResponse(dumps(body), status=status, content_type=wire.SCIM_JSON)
    if location:
        response["Location"] = location
    return response


def _refused(request: HttpRequest, refusal: wire.ScimRefusal, token: ScimToken | None):
    audit_event_record(
        action=AuditEvent.Action.SCIM_REFUSED,
        request=request,
        actor_name=f"SCIM token {token.prefix}" if token else "",
        institution=token.institution_id if token else None,
        target=request.path[:200],
        detail={
            "method": request.method,
            "status": refusal.status,
            "scim_type": refusal.scim_type,
            "detail": refusal.detail[:300],
        },
    )
    logger.warning("SCIM %s %s refused: %s", request.method, request.path, refusal.detail)
    response = _answer(wire.error_body(refusal), refusal.status)
    if refusal.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="scim"'
    return response


def scim_view(methods: tuple[str, ...]):
    """The token checked (401), the method (405), refusals answered in SCIM's shape."""

    def wrap(view: Callable[..., HttpResponse]):
        @csrf_exempt
        @functools.wraps(view)
        def handle(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            token = selectors.token_of(request.META.get("HTTP_AUTHORIZATION", ""))
            try:
                if token is None:
                    raise wire.ScimRefusal(401, "Send the institution's SCIM token as a Bearer.")
                services.do_note_scim_token_use(token=token)
                if request.method not in methods:
                    raise wire.ScimRefusal(405, f"{request.method} is not served here.")
                return view(request, token, *args, **kwargs)
            except wire.ScimRefusal as refusal:
                return _refused(request, refusal, token)

        return handle

    return wrap


def _base(request: HttpRequest) -> str:
    return request.build_absolute_uri("/scim/v2").rstrip("/")


def _who(token: ScimToken) -> str:
    return f"SCIM token {token.prefix}"


def _body(request: HttpRequest) -> dict[str, Any]:
    return wire.body_of(request.body, request.content_type or "")


def _listed(request: HttpRequest, token: ScimToken, model: Any, lister, query=None):
    """A list: GET's query parameters, or POST /.search's body turned into them (`query`)."""
    query = request.GET if query is None else query
    scim_filter = wire.filter_of(model, query.get("filter"))
    start, count = wire.paging(query.get("startIndex"), query.get("count"))
    selection = wire.selection_of(query)
    found, total = lister(
        token.institution_id, scim_filter, start, count, _base(request), selection
    )
    return _answer(wire.list_body(found, total, start))


def _searched(request: HttpRequest, token: ScimToken, model: Any, lister) -> HttpResponse:
    """POST /Users/.search, /Groups/.search (RFC 7644 3.4.3): the SearchRequest's filter,
    paging and attributes, answered as the GET list would be."""
    return _listed(request, token, model, lister, wire.search_query(_body(request)))


# --- discovery ---------------------------------------------------------------------------------


@scim_view(("GET",))
def service_provider_config(request: HttpRequest, token: ScimToken) -> HttpResponse:
    return _answer(wire.service_provider_config(_base(request)))


def _one_or_list(items: list[dict[str, Any]], wanted: str | None, total_key: str = "id"):
    if wanted is None:
        return _answer(wire.list_body(items, len(items), 1))
    for item in items:
        if item[total_key] == wanted:
            return _answer(item)
    raise wire.ScimRefusal(404, f"No such item: {wanted[:100]}")


@scim_view(("GET",))
def resource_types(request: HttpRequest, token: ScimToken, kind: str | None = None):
    return _one_or_list(wire.resource_types(_base(request)), kind)


@scim_view(("GET",))
def schemas(request: HttpRequest, token: ScimToken, schema: str | None = None):
    return _one_or_list(wire.schemas(_base(request)), schema)


# --- users -------------------------------------------------------------------------------------


def _user_answer(request: HttpRequest, row, status: int = 200) -> HttpResponse:
    resource = selectors.user_resource(row, _base(request))
    body = wire.dumped(resource, wire.selection_of(request.GET))
    return _answer(body, status, resource.meta.location)


@scim_view(("GET", "POST"))
def users(request: HttpRequest, token: ScimToken) -> HttpResponse:
    if request.method == "GET":
        return _listed(request, token, wire.UserModel, selectors.users_listed)
    row = services.do_create_user(
        institution_id=token.institution_id, data=_body(request), request=request, who=_who(token)
    )
    return _user_answer(request, row, 201)


@scim_view(("GET", "PUT", "PATCH", "DELETE"))
def user(request: HttpRequest, token: ScimToken, scim_id: str) -> HttpResponse:
    institution_id, who = token.institution_id, _who(token)
    if request.method == "DELETE":
        services.do_delete_user(
            institution_id=institution_id, scim_id=scim_id, request=request, who=who
        )
        return HttpResponse(status=204)
    if request.method in ("PUT", "PATCH"):
        write = services.do_replace_user if request.method == "PUT" else services.do_patch_user
        row = write(
            institution_id=institution_id,
            scim_id=scim_id,
            data=_body(request),
            request=request,
            who=who,
        )
        return _user_answer(request, row)
    found = selectors.user_row(institution_id, scim_id)
    if found is None:
        raise wire.ScimRefusal(404, f"No user {scim_id[:100]}.")
    return _user_answer(request, found)


@scim_view(("POST",))
def users_search(request: HttpRequest, token: ScimToken) -> HttpResponse:
    return _searched(request, token, wire.UserModel, selectors.users_listed)


# --- groups ------------------------------------------------------------------------------------


def _group_answer(request: HttpRequest, row, status: int = 200) -> HttpResponse:
    resource = selectors.group_resource(row, _base(request))
    body = wire.dumped(resource, wire.selection_of(request.GET))
    return _answer(body, status, resource.meta.location)


@scim_view(("GET", "POST"))
def groups(request: HttpRequest, token: ScimToken) -> HttpResponse:
    if request.method == "GET":
        return _listed(request, token, wire.GroupModel, selectors.groups_listed)
    row = services.do_create_group(
        institution_id=token.institution_id, data=_body(request), request=request, who=_who(token)
    )
    return _group_answer(request, row, 201)


@scim_view(("POST",))
def groups_search(request: HttpRequest, token: ScimToken) -> HttpResponse:
    return _searched(request, token, wire.GroupModel, selectors.groups_listed)


@scim_view(("POST",))
def root_search(request: HttpRequest, token: ScimToken) -> HttpResponse:
    """A search of every resource type at once: not served (docs/decisions/scim.md); 501 is
    RFC 7644 3.12's answer for an operation a server does not support."""
    raise wire.ScimRefusal(501, "Search /Users/.search or /Groups/.search: not every type at once.")


@scim_view(("GET", "PUT", "PATCH", "DELETE"))
def group(request: HttpRequest, token: ScimToken, scim_id: str) -> HttpResponse:
    institution_id, who = token.institution_id, _who(token)
    if request.method == "DELETE":
        services.do_delete_group(
            institution_id=institution_id, scim_id=scim_id, request=request, who=who
        )
        return HttpResponse(status=204)
    if request.method in ("PUT", "PATCH"):
        write = services.do_replace_group if request.method == "PUT" else services.do_patch_group
        row = write(
            institution_id=institution_id,
            scim_id=scim_id,
            data=_body(request),
            request=request,
            who=who,
        )
        return _group_answer(request, row)
    found = selectors.group_row(institution_id, scim_id)
    if found is None:
        raise wire.ScimRefusal(404, f"No group {scim_id[:100]}.")
    return _group_answer(request, found)


@scim_view(("GET", "POST", "PUT", "PATCH", "DELETE"))
def not_found(request: HttpRequest, token: ScimToken, rest: str = "") -> HttpResponse:
    raise wire.ScimRefusal(404, "No such SCIM endpoint.")
