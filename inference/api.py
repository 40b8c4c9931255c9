"""The /v1 API: django-ninja, bent to the spec's error contract in one place.

- every `GatewayError` renders as `{error: {...}}` with its status;
- 422 items keep `input` and have `loc` = ["body", <field path>] (no schema parameter name);
  the body adds an OpenAI-style `error` beside `detail` (core.errors.validation_error_body);
- a body that is not JSON (or not UTF-8) is 422 `json_invalid` at its character offset;
- anything unexpected is a plain-text 500 `Internal Server Error`, DEBUG or not.
The 404/405 shapes of paths and methods ninja does not know are fixed in
gateway_site.middleware.
"""

from __future__ import annotations

import json
import logging

import psycopg
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.security.http import HttpAuthBase

from core.errors import (
    IMAGES_HINTS,
    GatewayError,
    ServiceUnavailable,
    internal_server_error,
    validation_error_body,
)
from core.jsonio import dumps, json_invalid_item, json_response, parse_json
from licensing.access.credentials import authenticate

from .providers.pool import current_license

logger = logging.getLogger("gateway")


class StrictJSONParser(Parser):
    """JSON bodies as the spec wants them: UTF-8, no NaN/Infinity, offsets in characters, and
    the limits of `core.jsonio.parse_json` (depth, number range, lone surrogates)."""

    def parse_body(self, request):
        raw = request.body
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            prefix = raw[: exc.start].decode("utf-8", errors="replace")
            raise json.JSONDecodeError("Invalid UTF-8", "", len(prefix)) from exc
        return parse_json(text)


class ORJSONRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request, data, *, response_status):
        return dumps(data)


ANONYMOUS = object()  # no Authorization header: decided after body validation (check 3)


class BearerAuth(HttpAuthBase):
    """Check 1 of the order: a present but malformed or unresolvable header is a 401 before
    the body is validated; a missing header passes here and is refused after validation."""

    openapi_scheme = "bearer"
    is_async = True

    async def __call__(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")  # not request.headers (headers.py)
        if header is None or not header.strip():
            request.principal = None
            return ANONYMOUS
        request.principal = await authenticate(header)
        # Its license's share of every provider pool (providers.pool): the calls below it ask.
        current_license.set(request.principal.license.id)
        return request.principal


class GatewayAPI(NinjaAPI):
    def validation_error_from_error_contexts(self, error_contexts) -> ValidationError:
        errors = []
        for context in error_contexts:
            model = context.model
            source = model.__ninja_param_source__
            single = getattr(model, "__read_from_single_attr__", None)
            flatten = model.__ninja_flatten_map_reverse__
            for error in context.pydantic_validation_error.errors(include_url=False):
                loc = tuple(error["loc"])
                if single and loc and loc[0] == single:
                    loc = loc[1:]
                else:
                    loc = flatten.get(loc, loc)
                item = {
                    "type": error["type"],
                    "loc": [source, *loc],
                    "msg": error["msg"],
                    "input": _jsonable(error.get("input")),
                }
                if "ctx" in error:
                    item["ctx"] = {k: _jsonable(v) for k, v in error["ctx"].items()}
                errors.append(item)
        return ValidationError(errors)


def _jsonable(value):
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    return str(value)


api = GatewayAPI(
    title="Inference Gateway",
    version="1.1",
    description="OpenAI-style inference endpoints with license policy, budgets and a ledger.",
    urls_namespace="v1",
    parser=StrictJSONParser(),
    renderer=ORJSONRenderer(),
    auth=BearerAuth(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


@api.exception_handler(GatewayError)
def _gateway_error(request, exc: GatewayError):
    response = json_response(exc.body(), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value  # Retry-After of a 429
    return response


@api.exception_handler(ValidationError)
def _validation_error(request, exc: ValidationError):
    try:  # to tell fields from union branches in the message (the parser read it once already)
        body = parse_json(request.body.decode()) if request.body else None
    except ValueError:
        body = None
    hints = IMAGES_HINTS if request.path.endswith("/images/generations") else None
    return json_response(validation_error_body(exc.errors, body, hints), status=422)


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    cause = exc.__cause__
    if isinstance(cause, RequestDataTooBig):
        return _body_too_large(request, cause)
    if isinstance(cause, json.JSONDecodeError):
        return json_response(validation_error_body([json_invalid_item(cause)]), status=422)
    return json_response({"error": {"message": str(exc.message)}}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _body_too_large(request, exc: RequestDataTooBig):
    return json_response({"error": {"message": "Request body is too large"}}, status=413)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
@api.exception_handler(psycopg.OperationalError)  # the hot path's own pool (core.pgpool)
def _database_unavailable(request, exc: Exception):
    """The database is down or went away: the contract's retryable 503, not a 500. A provider
    call that already happened is in the ledger spool by now (licensing.ledger.spool)."""
    logger.warning(
        "database unavailable request_id=%s: %s", getattr(request, "request_id", "-"), exc
    )
    return _gateway_error(request, ServiceUnavailable())


@api.exception_handler(DatabaseError)
@api.exception_handler(psycopg.Error)
def _database_error(request, exc: Exception):
    """Any other database error (the server refused a statement: a prepared statement a pooler
    lost, a serialization failure...) is the database's trouble, not the caller's: the same
    retryable 503, never a 500 (docs/reliability.md), with its traceback in the log."""
    logger.error(
        "database error request_id=%s: %s",
        getattr(request, "request_id", "-"),
        exc,
        exc_info=exc,
    )
    return _gateway_error(request, ServiceUnavailable())


@api.exception_handler(Exception)
def _unexpected(request, exc: Exception):
    logger.exception(
        "unexpected error request_id=%s path=%s", getattr(request, "request_id", "-"), request.path
    )
    return internal_server_error()


def register_endpoints() -> None:
    """GET /v1/models, /v1/health, /v1/license, then each declared service's router."""
    from .endpoints import info, service_routers

    api.add_router("", info.router)
    for router in service_routers():
        api.add_router("", router)


register_endpoints()
