"""Check 4: the X-Service-Provider and X-Service-Metadata headers.

The metadata object is stored as it is in the ledger (a JSON column), so every value must be
storable by every database we support: finite numbers, integers within int64, strings without
NUL and lone surrogates, keys of at most `MAX_METADATA_KEY` characters.
"""

from __future__ import annotations

import json
import math

from catalog.routing import ProviderPin
from core.errors import BadRequest
from core.text import is_storable_text

MAX_METADATA_BYTES = 4096
MAX_METADATA_KEY = 256
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INVALID_JSON = "X-Service-Metadata must be a valid JSON object"


# Read from META (Django's `HTTP_<NAME>` keys, what `request.headers` is built from): on /v1 no
# one needs `request.headers` itself, whose making cost ~4 µs a request (docs/performance.md).
PROVIDER_HEADER = "HTTP_X_SERVICE_PROVIDER"
METADATA_HEADER = "HTTP_X_SERVICE_METADATA"


def _header(request, name: str) -> str | None:
    value = request.META.get(name)
    if value is None:
        return None
    # ASGI hands headers over as latin-1; clients send UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None


def parse_provider_pin(request) -> ProviderPin | None:
    raw = request.META.get(PROVIDER_HEADER)
    if raw is None:
        return None
    value = raw.strip()
    parts = value.split("/")
    if len(parts) > 2 or any(not part.strip() for part in parts):
        raise BadRequest(f"Malformed X-Service-Provider header: '{raw}'")
    return ProviderPin(
        slug=parts[0].strip(), connection=parts[1].strip() if len(parts) == 2 else None
    )


def _reject_constant(name):
    raise ValueError(name)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise ValueError(literal)
    return value


def _check_value(key: str, item) -> None:
    if isinstance(item, dict | list):
        raise BadRequest(
            f"X-Service-Metadata value for '{key}' must be a scalar; "
            "nested objects/arrays are not allowed"
        )
    if isinstance(item, int) and not isinstance(item, bool):
        if not INT64_MIN <= item <= INT64_MAX:
            raise BadRequest(
                f"X-Service-Metadata value for '{key}' must be an integer between "
                f"{INT64_MIN} and {INT64_MAX}"
            )
    elif isinstance(item, str) and not is_storable_text(item):
        raise BadRequest(
            f"X-Service-Metadata value for '{key}' must not contain NUL characters or "
            "lone surrogates"
        )


def parse_metadata(request) -> dict:
    if METADATA_HEADER not in request.META:
        return {}
    raw = _header(request, METADATA_HEADER)
    if raw is None or len(raw) > MAX_METADATA_BYTES:
        raise BadRequest(INVALID_JSON)
    try:
        # 1e400 would be inf, which no JSON column stores: not valid JSON here, like NaN.
        value = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(INVALID_JSON) from exc
    if not isinstance(value, dict):
        raise BadRequest("X-Service-Metadata must be a JSON object")
    for key, item in value.items():
        # A key is echoed in the messages below, so it is checked first and never echoed.
        if len(key) > MAX_METADATA_KEY or not is_storable_text(key):
            raise BadRequest(
                f"X-Service-Metadata keys must be at most {MAX_METADATA_KEY} characters, "
                "without NUL characters or lone surrogates"
            )
        _check_value(key, item)
    return value


def parse_service_headers(request) -> tuple[ProviderPin | None, dict]:
    return parse_provider_pin(request), parse_metadata(request)
