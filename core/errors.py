"""The gateway's one application error class and the statuses the contract names.

Everything below the views raises a `GatewayError`; `inference.api` renders it in one place.
"""

from __future__ import annotations

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
