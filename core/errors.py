"""The gateway's one application error class and the statuses the contract names.

Everything below the views raises a `GatewayError`; `inference.api` renders it in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.http import HttpResponse

SERVICE_UNAVAILABLE = "Service temporarily unavailable"


class GatewayError(Exception):
    status = 400
    # What staff see in the ledger beside the client's message (e.g. why a 503 happened); never
    # sent to the client.
    reason: str | None = None
    headers: dict[str, str] = {}  # extra answer headers (a 429's Retry-After); never mutated

    def __init__(self, message: str, *, status: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if reason is not None:
            self.reason = reason

    def body(self) -> dict:
        return {"error": {"message": self.message}}


class BadRequest(GatewayError):
    status = 400


class AuthenticationFailed(GatewayError):
    status = 401


class PolicyDenied(GatewayError):
    status = 403

    def __init__(self, message: str, *, param: str | None):
        super().__init__(message)
        self.param = param

    def body(self) -> dict:
        return {"error": {"message": self.message, "code": "policy_denied", "param": self.param}}


class NotFound(GatewayError):
    status = 404


class BudgetConfigurationError(GatewayError):
    status = 500

    def __init__(self, message: str = "Budget configuration error"):
        super().__init__(message)


class ServiceUnavailable(GatewayError):
    status = 503

    def __init__(self, message: str = SERVICE_UNAVAILABLE, *, reason: str | None = None):
        super().__init__(message, reason=reason)


# Messages of the contract, kept together so tests and code cannot drift apart.
AUTH_REQUIRED = "Authentication required"
AUTH_BAD_SCHEME = "Authorization header must use the Bearer scheme"
AUTH_INVALID = "Invalid API key"
OUT_OF_BUDGET = "Your license is out of budget"
GUARDRAIL_BLOCKED = "Request blocked by guardrail"
PROVIDER_ERROR = "An error occurred"


# --- the 422/405 body ------------------------------------------------------------------------

# Where the first validation error has a known fix, the `error.message` says what to do.
VALIDATION_HINTS = {
    ("encoding_format", "literal_error"): 'pass encoding_format="float": embeddings are '
    'returned as float arrays only (the openai SDK sends "base64" unless told)',
}
# Hints of one endpoint only (the field means something else, or nothing, elsewhere).
IMAGES_HINTS = {
    ("response_format", "extra_forbidden"): "images always come back as base64 (`b64_json`), "
    "never as a URL: leave `response_format` out of the request",
}
# `loc` sources that name a client field (`request` is the method of a 405: no field).
_FIELD_SOURCES = {"body", "query", "path", "header"}


# How many problems a 422's message lists; the rest are counted (every one is in `detail`).
MAX_LISTED_PROBLEMS = 5
_MISSING = object()


def client_path(loc: Sequence[Any], body: Any = _MISSING) -> str:
    """A field's path as the client wrote it (`tools[4].type`) from a `loc` without its source.

    pydantic puts the branch of a union it tried into `loc` (`ResponseFunctionTool`, a tag such
    as `function`, `list[str]`): not a field of the client's. With the body, a part is kept
    only where it names a key the object has (or the last, missing, one) or an index of a
    list; without it, labels are recognised by their spelling (field names are snake_case)."""
    parts: list[Any] = []
    current = body
    for position, part in enumerate(loc):
        if current is _MISSING:
            if isinstance(part, int) or (part[:1].islower() and "[" not in part):
                parts.append(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            parts.append(part)
            current = current[part]
        elif isinstance(current, dict) and part in current:
            parts.append(part)
            current = current[part]
        elif position == len(loc) - 1 and isinstance(current, dict) and part[:1].islower():
            parts.append(part)  # a key the object lacks (`missing`)
        # else a union branch's label: the value is still the same one
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _problem(item: dict, body: Any, hints: dict) -> tuple[str | None, str]:
    """One detail item as `(param, "<where>: <msg>")`; param is None when no field is to blame."""
    kind = str(item.get("type", "invalid_request"))
    msg = str(item.get("msg", "Invalid request"))
    loc: Sequence[Any] = item.get("loc") or ()
    if kind == "json_invalid":
        offset = loc[1] if len(loc) > 1 else 0
        error = (item.get("ctx") or {}).get("error")
        return None, f"{msg} at character {offset}" + (f": {error}" if error else "")
    if kind == "method_not_allowed":
        allowed = ", ".join((item.get("ctx") or {}).get("allowed") or ())
        return None, f"{msg}: {item.get('input')}" + (f" (allowed: {allowed})" if allowed else "")
    if len(loc) > 1 and loc[0] in _FIELD_SOURCES:
        param = ".".join(str(part) for part in loc[1:])
        where = client_path(loc[1:], body if loc[0] == "body" else _MISSING) or param
        message = f"{where}: {msg}"
        hint = hints.get((param, kind))
        return param, f"{message}; {hint}" if hint else message
    if loc:
        return None, f"{loc[0]}: {msg}"  # the whole body (an empty one, an unknown model prefix)
    return None, msg


def validation_error_body(
    detail: list[dict], body: Any = _MISSING, hints: dict | None = None
) -> dict:
    """The body of every 422 and 405: the contract's `{"detail": [...]}` unchanged, and beside
    it an OpenAI-style `error`, the only part the SDKs show. Its `message` is the problem
    (`"<path>: <msg>"`, the path as the client wrote it: `tools[4].type`), or, when there are
    several, `"N problems: 1) ...; 2) ..."` (the first MAX_LISTED_PROBLEMS, then how many more).
    `param` is the first item's `loc` without its source (`body`), joined with dots
    (`messages.0.content`); null when no field is to blame (a body that is not JSON, a wrong
    method, an empty body). `code` is the first item's `type`. `body` is the parsed request
    body, when there is one, to tell pydantic's union branches in `loc` from the fields;
    `hints`, an endpoint's own (`IMAGES_HINTS`), beside VALIDATION_HINTS."""
    hints = VALIDATION_HINTS if hints is None else {**VALIDATION_HINTS, **hints}
    first = detail[0] if detail else {}
    kind = str(first.get("type", "invalid_request"))
    # A union's branches can each report the same problem: listed once.
    problems = list(dict.fromkeys(_problem(item, body, hints) for item in detail))
    problems = problems or [(None, "Invalid request")]
    param = problems[0][0]
    if len(problems) == 1:
        message = problems[0][1]
    else:
        listed = "; ".join(
            f"{number}) {text}"
            for number, (_, text) in enumerate(problems[:MAX_LISTED_PROBLEMS], start=1)
        )
        more = len(problems) - MAX_LISTED_PROBLEMS
        message = f"{len(problems)} problems: {listed}" + (
            f"; and {more} more (all are in `detail`)" if more > 0 else ""
        )
    return {
        "detail": detail,
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": kind,
        },
    }


def internal_server_error() -> HttpResponse:
    """The contract's answer to anything unexpected: a plain-text 500, DEBUG or not (the /v1
    API's last exception handler and the site's middleware both send it)."""
    return HttpResponse(
        "Internal Server Error", status=500, content_type="text/plain; charset=utf-8"
    )
