"""Check 4: the X-Service-Provider and X-Service-Metadata headers."""

from __future__ import annotations

import json

from catalog.routing import ProviderPin
from core.errors import BadRequest

MAX_METADATA_BYTES = 4096


def _header(request, name: str) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    # ASGI hands headers over as latin-1; clients send UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return None


def parse_provider_pin(request) -> ProviderPin | None:
    raw = request.headers.get("X-Service-Provider")
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


def parse_metadata(request) -> dict:
    if "X-Service-Metadata" not in request.headers:
        return {}
    raw = _header(request, "X-Service-Metadata")
    if raw is None or len(raw) > MAX_METADATA_BYTES:
        raise BadRequest("X-Service-Metadata must be a valid JSON object")
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise BadRequest("X-Service-Metadata must be a valid JSON object") from exc
    if not isinstance(value, dict):
        raise BadRequest("X-Service-Metadata must be a JSON object")
    for key, item in value.items():
        if isinstance(item, dict | list):
            raise BadRequest(
                f"X-Service-Metadata value for '{key}' must be a scalar; "
                "nested objects/arrays are not allowed"
            )
    return value


def parse_service_headers(request) -> tuple[ProviderPin | None, dict]:
    return parse_provider_pin(request), parse_metadata(request)
