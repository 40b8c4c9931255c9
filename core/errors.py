"""The gateway's one application error class and the statuses the contract names.

Everything below the views raises a `GatewayError`; `inference.api` renders it in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
# `loc` sources that name a client field (`request` is the method of a 405: no field).
_FIELD_SOURCES = {"body", "query", "path", "header"}


def validation_error_body(detail: list[dict]) -> dict:
    """The body of every 422 and 405: the contract's `{"detail": [...]}` unchanged, and beside
    it an OpenAI-style `error` made from the first item, the only part the SDKs show
    (`"<param>: <msg>"`). `param` is the item's `loc` without its source (`body`), joined with
    dots (`messages.0.content`); null when no field is to blame (a body that is not JSON, a
    wrong method, an empty body). `code` is the item's `type`."""
    first = detail[0] if detail else {}
    kind = str(first.get("type", "invalid_request"))
    msg = str(first.get("msg", "Invalid request"))
    loc: Sequence[Any] = first.get("loc") or ()
    param = None
    if kind == "json_invalid":
        offset = loc[1] if len(loc) > 1 else 0
        error = (first.get("ctx") or {}).get("error")
        message = f"{msg} at character {offset}" + (f": {error}" if error else "")
    elif kind == "method_not_allowed":
        allowed = ", ".join((first.get("ctx") or {}).get("allowed") or ())
        message = f"{msg}: {first.get('input')}" + (f" (allowed: {allowed})" if allowed else "")
    elif len(loc) > 1 and loc[0] in _FIELD_SOURCES:
        param = ".".join(str(part) for part in loc[1:])
        message = f"{param}: {msg}"
        hint = VALIDATION_HINTS.get((param, kind))
        if hint:
            message = f"{message}; {hint}"
    elif loc:
        message = f"{loc[0]}: {msg}"  # the whole body (an empty one, an unknown model prefix)
    else:
        message = msg
    return {
        "detail": detail,
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": kind,
        },
    }
