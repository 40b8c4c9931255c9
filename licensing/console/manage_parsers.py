"""What the management API reads: its JSON bodies (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES
names the parser) and the instants its bodies and query parameters carry. A module of its own,
so the setting imports nothing of the API's views."""

from __future__ import annotations

import json
import math

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import models
from rest_framework import serializers
from rest_framework.exceptions import APIException, ErrorDetail, NotAuthenticated, ParseError
from rest_framework.parsers import JSONParser

from core.instants import OFFSET_REFUSED, offset_problem
from core.jsonio import parse_json
from core.text import is_storable_text

from .manage_auth import SEND_TOKEN


class BodyTooLarge(APIException):
    status_code = 413
    default_detail = "Request body is too large."
    default_code = "too_large"


def too_large_detail(limit: int | None = None) -> str:
    """The 413's words, wherever it is answered (here, gateway_site.bodylimit before the body
    is read, gateway_site.errors for what Django refuses outside a view)."""
    if limit is None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return f"Request body is larger than {limit} bytes."


def too_large() -> BodyTooLarge:
    return BodyTooLarge(too_large_detail())


def exception_handler(exc, context):
    """DRF's (REST_FRAMEWORK's EXCEPTION_HANDLER), with what Django raises itself while a view
    reads the request in DRF's shapes rather than Django's HTML 400: a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE (a form body, or one something read before the JSON reader)
    is the reader's 413, too many form fields a 400. A request with no credentials at all is
    told what to send."""
    # Here, not at the top: rest_framework.views reads the settings that name this module.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, RequestDataTooBig):
        exc = too_large()
    elif isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        exc = ParseError("The body has too many form fields.")
    elif isinstance(exc, NotAuthenticated):
        # In place: DRF has set its status and WWW-Authenticate header on this one.
        exc.detail = ErrorDetail(f"{exc.detail} {SEND_TOKEN}", code=exc.default_code)
    return drf_exception_handler(exc, context)


class StrictJSONParser(JSONParser):
    """The management API's JSON bodies, read by the one bounded reader /v1 uses
    (core.jsonio.parse_json): a body larger than DATA_UPLOAD_MAX_MEMORY_SIZE (the gateway's
    GATEWAY_MAX_BODY_BYTES) is a 413, one that is not UTF-8 or not JSON, nested deeper than
    core.jsonio.MAX_DEPTH, or holding a lone surrogate escape or a number no float holds (`1e400`)
    a 400 saying what and where (`{"detail": "JSON parse error: ... at character N"}`). Then what
    no database column or JSON encoder can take is a 400 on the top-level field that holds it,
    before any serializer sees it: NUL (PostgreSQL refuses it, and DRF's messages quote a
    refused value back), integers beyond 64 bits, and nesting deeper than 32 levels."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        data = _read_json(stream, encoding)
        if isinstance(data, dict):
            bad = {}
            for name, value in data.items():
                problem = _unstorable(name, 1) or _unstorable(value, 1)
                if problem:
                    shown = name if _unstorable(name, 1) is None else "non_field_errors"
                    bad[shown] = [problem]
            if bad:
                raise serializers.ValidationError(bad)
        else:
            problem = _unstorable(data, 0)
            if problem:
                raise serializers.ValidationError({"non_field_errors": [problem]})
        return data


def _read_json(stream, encoding: str):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    raw = stream.read(limit + 1) if stream is not None else b""
    if limit is not None and len(raw) > limit:
        raise too_large()
    try:
        text = raw.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise ParseError(f"The body is not {encoding} text.") from exc
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"JSON parse error: {exc.msg} at character {exc.pos}.") from exc


def _unstorable(value, depth: int) -> str | None:
    """Why a parsed JSON value cannot be taken (None: it can)."""
    if depth > 32:
        return "Nested deeper than 32 levels."
    if isinstance(value, dict):
        return _first_unstorable((part for pair in value.items() for part in pair), depth + 1)
    if isinstance(value, list):
        return _first_unstorable(value, depth + 1)
    return _unstorable_scalar(value)


def _first_unstorable(values, depth: int) -> str | None:
    """The first problem among a container's keys and values (in order, key before value)."""
    for item in values:
        problem = _unstorable(item, depth)
        if problem:
            return problem
    return None


def _unstorable_scalar(value) -> str | None:
    """A string, number, boolean or null: NUL, lone surrogates, and numbers no column holds."""
    if isinstance(value, str):
        if not is_storable_text(value):
            return "NUL and lone surrogates are not accepted."
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -(2**63) <= value < 2**63 else "A number out of range."
    if isinstance(value, float):
        return None if math.isfinite(value) else "A number out of range."
    return None


class Instant(serializers.DateTimeField):
    """A date-time of a body or a query: ISO 8601, stored in UTC; an offset no time zone has
    (core.instants: beyond ±14:00) is a 400 on the field, not a database error."""

    default_error_messages = {"offset": OFFSET_REFUSED}

    def enforce_timezone(self, value):
        if offset_problem(value):
            self.fail("offset")
        return super().enforce_timezone(value)


class InstantModelSerializer(serializers.ModelSerializer):
    """A model serializer whose date-time columns are read as `Instant`s."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: Instant,
    }
