"""What `Connection.options` may hold for each provider kind, checked on every save
(`Connection.clean`: the admin's form and `catalog.services.connection_configure` both call it).

- `azure_openai`: `api_version` (set: the classic deployment paths with `?api-version=`; absent:
  the v1 API path) and `deployments` ({catalog model id: deployment name}).
- `openai_compatible`: `responses_api` ("chat": `/v1/responses` translated to chat completions,
  the default; "native": the server's own Responses API) and `stream_usage` ("ask": send
  `stream_options.include_usage`, the default; "always": the server reports usage on every stream
  unasked and refuses `stream_options`, as Mistral's API does).

docs/providers.md says what each one does; docs/decisions/providers.md why.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

# Azure's api-version values: a date, optionally -preview (2024-10-21, 2025-04-01-preview).
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(?:-preview)?$")
# Azure's deployment names: letters, digits, '-', '_' and '.', at most 64.
DEPLOYMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MODEL_ID_MAX = 200
RESPONSES_API = ("chat", "native")
STREAM_USAGE = ("ask", "always")

OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "azure_openai": ("api_version", "deployments"),
    "openai_compatible": ("responses_api", "stream_usage"),
}
# A trailing API path an operator may paste with an Azure endpoint; the adapter adds its own.
AZURE_PATH_SUFFIXES = ("/openai/v1", "/openai")


def _api_version(value) -> list[str]:
    if isinstance(value, str) and API_VERSION.match(value):
        return []
    return ["'api_version' must be an Azure API version like 2024-10-21 or 2025-04-01-preview"]


def _deployments(value) -> list[str]:
    if not isinstance(value, dict):
        return ["'deployments' must be an object {model id: deployment name}"]
    errors = []
    for model, deployment in value.items():
        if not model or len(model) > MODEL_ID_MAX or "\x00" in model:
            errors.append(f"'deployments': invalid model id {model[:40]!r}")
        elif not isinstance(deployment, str) or not DEPLOYMENT.match(deployment):
            errors.append(
                f"'deployments': the deployment of {model!r} must be 1-64 letters, digits, "
                "'-', '_' or '.'"
            )
    return errors


def _choice(name: str, allowed: tuple[str, ...]):
    def check(value) -> list[str]:
        if value in allowed:
            return []
        return [f"'{name}' must be one of: {', '.join(allowed)}"]

    return check


CHECKS = {
    "api_version": _api_version,
    "deployments": _deployments,
    "responses_api": _choice("responses_api", RESPONSES_API),
    "stream_usage": _choice("stream_usage", STREAM_USAGE),
}


def option_errors(kind: str, options) -> list[str]:
    """What is wrong with `options` for a connection of `kind` (empty: nothing)."""
    if not isinstance(options, dict):
        return ["Options must be a JSON object"]
    allowed = OPTION_KEYS.get(kind, ())
    errors = []
    for key, value in options.items():
        if key not in allowed:
            takes = ", ".join(allowed) if allowed else "none"
            errors.append(f"Unknown option {key!r} for a {kind} connection (it takes: {takes})")
        else:
            errors.extend(CHECKS[key](value))
    return errors


def validate_options(kind: str, options) -> None:
    errors = option_errors(kind, options)
    if errors:
        raise ValidationError({"options": errors})


def normalized_base_url(kind: str, base_url: str) -> str:
    """An Azure endpoint without the API path an operator may have pasted with it."""
    url = base_url.rstrip("/")
    if kind == "azure_openai":
        for suffix in AZURE_PATH_SUFFIXES:
            if url.endswith(suffix):
                return url[: -len(suffix)]
    return url
