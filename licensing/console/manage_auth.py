"""Who calls the management API (REST_FRAMEWORK's DEFAULT_AUTHENTICATION_CLASSES names the
class; a module of its own, so the setting imports nothing of the API's views).

A management token (rest_framework.authtoken: the admin's "My API token" page, or `manage.py
create_management_token`) is sent as `Authorization: Bearer <token>`, what every HTTP client
and OpenAPI tool sends, or as DRF's own `Authorization: Token <token>`. DRF's
TokenAuthentication knows only `Token`, so a `Bearer` header was skipped and answered "credentials
were not provided", which sent people looking for a missing header. A header that cannot be a
token (NUL, a character outside printable ASCII, longer than any token, several words) is refused
before any query; a /v1 API key sent here is told apart, as the commonest mistake.
Another scheme (`Basic` from a proxy in front of the site) is left to the session."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from ..access.credentials import KEY_PREFIX

SCHEMES = ("bearer", "token")
TOKEN_MAX = 40  # rest_framework.authtoken's Token.key: 40 characters at most
SEND_TOKEN = (
    "Send your management token as `Authorization: Bearer <token>` (make one on the admin's "
    "My API token page)."
)
NO_TOKEN_GIVEN = "The Authorization header names no token. " + SEND_TOKEN
NOT_A_TOKEN = "Invalid token."
API_KEY_SENT = "This is an API key for /v1, not a management token. " + SEND_TOKEN


class ManagementTokenAuthentication(TokenAuthentication):
    """`Bearer <token>` or `Token <token>`; anything else under those schemes is a 401 saying
    what to send."""

    keyword = "Bearer"  # the 401's WWW-Authenticate, and the OpenAPI scheme (http bearer)

    def authenticate(self, request):
        # As a str (Django decodes header bytes as latin-1): no re-encoding that could fail.
        parts = request.META.get("HTTP_AUTHORIZATION", "").split()
        if not parts or parts[0].lower() not in SCHEMES:
            return None  # not ours: the session may still authenticate the request
        if len(parts) == 1:
            raise AuthenticationFailed(NO_TOKEN_GIVEN)
        token = parts[1]
        if token.startswith(KEY_PREFIX):
            raise AuthenticationFailed(API_KEY_SENT)
        if len(parts) > 2 or len(token) > TOKEN_MAX or not _printable_ascii(token):
            raise AuthenticationFailed(NOT_A_TOKEN)
        return self.authenticate_credentials(token)


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()  # no NUL, no control character


class ManagementTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI document's security scheme: HTTP bearer, so that the docs page's "Authorize"
    and every generated client send `Authorization: Bearer <token>`."""

    target_class = "licensing.console.manage_auth.ManagementTokenAuthentication"
    name = "managementToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": 'A management token: the admin\'s "My API token" page, or '
            "`manage.py create_management_token USERNAME`. `Authorization: Token <token>` "
            "works too.",
        }
