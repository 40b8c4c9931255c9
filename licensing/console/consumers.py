"""The websocket of the live feed (/ws/admin/transactions/): staff who may view transactions
receive the ledger rows of their scope as licensing.ledger.feed publishes them.

Authentication is the admin's session cookie (channels' AuthMiddlewareStack). A connection is
refused (closed with 4403 before it is accepted) unless the user is active staff whose role may
view transactions, and unless its Origin is trusted: another site's page must not open it with
the admin's cookie (a websocket has no CSRF token; the Origin is all there is). See `same_origin`.
AllowedHostsOriginValidator comes first, but with ALLOWED_HOSTS=* it lets every origin through.

The consumer only sends. Every HEARTBEAT seconds it checks the session and the user again (a
logout, a deactivation or a role taken away closes it), joins its group again (a layer drops a
member whose messages expired unread) and refreshes its presence for the publishers.
"""

from __future__ import annotations

import asyncio
import logging
from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.contrib import auth
from django.http.request import split_domain_port, validate_host
from django.urls import path

from ..access.languages import page_language
from ..access.scoping import scope_of
from ..ledger import feed as live
from ..models import Transaction
from .live import PATH, HolderNames

REFUSED = 4403
HEARTBEAT = 30.0  # seconds

logger = logging.getLogger("gateway")


def feed_group(user) -> str | None:
    """The group whose rows `user` may see; None: no feed at all."""
    scope = scope_of(user)
    if not scope.allows(Transaction, "view"):
        return None
    if scope.superuser:
        return live.ALL_GROUP
    assert scope.institution_id is not None  # a role comes with its institution (scope_of)
    return live.institution_group(scope.institution_id)


def _group_now(connection_scope) -> str | None:
    """The user's group as the database has it now: the session read again (a logout empties
    it, a password change invalidates it), the user and its role too."""
    session = connection_scope.get("session")
    user: Any
    if session is not None:
        store = import_module(settings.SESSION_ENGINE).SessionStore(session.session_key)
        # get_user reads nothing of the request but its session.
        user = auth.get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    else:  # a scope built without the session middleware (tests): the user row itself
        user = auth.get_user_model().objects.filter(pk=connection_scope["user"].pk).first()
    return feed_group(user) if user is not None else None


DEFAULT_PORTS = {"http": 80, "https": 443}
# Under ALLOWED_HOSTS=* (the development default) the request's own Host vouches for nothing, save
# these: what a browser on the same machine sends (Django's DEBUG default is the same three).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def parse_origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) origin, the port made explicit; None for anything else
    ("null", another scheme, no host, a bad port)."""
    try:
        parts = urlsplit(value.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _secure(connection_scope, headers: dict[bytes, bytes]) -> bool:
    """Whether the page was served over https, as Django's request.is_secure() decides it for
    the admin's forms: SECURE_PROXY_SSL_HEADER when it is set and sent, else the connection's
    scheme (wss, from TLS or from a trusted proxy's X-Forwarded-Proto)."""
    if settings.SECURE_PROXY_SSL_HEADER:
        name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        header = name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        if header in headers:
            return headers[header].decode("latin-1").split(",", 1)[0].strip() == secure_value
    return connection_scope.get("scheme") in ("wss", "https")


def own_origin(connection_scope, headers: dict[bytes, bytes]) -> tuple[str, str, int] | None:
    """The origin of the gateway's own pages for this request: its scheme and its Host, if
    the Host is one ALLOWED_HOSTS names (a `*` names none: then loopback only)."""
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _ = split_domain_port(host)
    if not domain:
        return None
    named = [pattern for pattern in settings.ALLOWED_HOSTS if pattern != "*"]
    if not validate_host(domain, named):
        loopback = "*" in settings.ALLOWED_HOSTS and domain in LOOPBACK_HOSTS
        if not loopback:
            return None
    scheme = "https" if _secure(connection_scope, headers) else "http"
    return parse_origin(f"{scheme}://{host}")


def trusted_origin(origin: tuple[str, str, int], pattern: str) -> bool:
    """`origin` is the CSRF_TRUSTED_ORIGINS entry `pattern` (its `*.` matches the domain and
    every subdomain, as Django's CSRF check does)."""
    scheme, _, netloc = pattern.strip().lower().partition("://")
    wildcard = netloc.startswith("*.")
    trusted = parse_origin(f"{scheme}://{netloc.removeprefix('*.')}")
    if trusted is None or (trusted[0], trusted[2]) != (origin[0], origin[2]):
        return False
    host, domain = origin[1], trusted[1]
    return host == domain or (wildcard and host.endswith("." + domain))


def same_origin(connection_scope) -> bool:
    """The Origin is trusted: scheme, host and port (a default port made explicit) equal to an
    entry of CSRF_TRUSTED_ORIGINS, or to the gateway's own origin for this request (`own_origin`:
    the request's scheme and a Host that ALLOWED_HOSTS names). With ALLOWED_HOSTS=* the Host is
    whatever the client says, so a forged Host/Origin pair must not vouch for itself: only
    CSRF_TRUSTED_ORIGINS and loopback hosts are trusted then."""
    headers = dict(connection_scope.get("headers", []))
    raw = headers.get(b"origin")
    if raw is None:
        return True  # not a browser, so not someone else's cookie either
    origin = parse_origin(raw.decode("latin-1"))
    if origin is None:
        return False
    if any(trusted_origin(origin, pattern) for pattern in settings.CSRF_TRUSTED_ORIGINS):
        return True
    return origin == own_origin(connection_scope, headers)


def viewer_language(connection_scope) -> str:
    """The language of the viewer's page (the rows' words: "key", "end user"), chosen as the
    admin's pages choose it (licensing.access.languages.page_language): the websocket carries
    the same user, cookie and Accept-Language."""
    cookies = connection_scope.get("cookies") or {}
    headers = dict(connection_scope.get("headers") or ())
    accept = headers.get(b"accept-language", b"").decode("latin-1")
    return page_language(
        connection_scope.get("user"), cookies.get(settings.LANGUAGE_COOKIE_NAME), accept
    )


class TransactionFeed(AsyncJsonWebsocketConsumer):
    group: str | None = None
    heartbeat: asyncio.Task | None = None
    names: HolderNames | None = None

    async def connect(self):
        user = self.scope.get("user")
        group = None
        if same_origin(self.scope) and user is not None:
            group = await database_sync_to_async(feed_group)(user)
        if group is None:
            await self.close(code=REFUSED)
            return
        # The rows' words in the viewer's language (their user was read just now: no query).
        self.names = HolderNames(language=await database_sync_to_async(viewer_language)(self.scope))
        await self.channel_layer.group_add(group, self.channel_name)
        self.group = group
        await self.accept()
        live.viewer_joined()
        await self._present()
        self.heartbeat = asyncio.create_task(self._beat())

    async def disconnect(self, code):
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        await self._leave()

    async def _leave(self) -> None:
        if self.group is None:
            return
        group, self.group = self.group, None
        live.viewer_left()
        await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """The browser has nothing to say: whatever it sends is ignored."""

    async def ledger_rows(self, event):
        rows = event["rows"]
        if self.names is None:
            self.names = HolderNames()
        missing = self.names.missing(rows)
        if any(missing):  # ids not named yet: the database, once each (live.HolderNames)
            try:
                await database_sync_to_async(self.names.learn)(*missing)
            except Exception:  # the database is away: those rows go out with ids for names
                logger.warning("live feed: naming the rows' holders failed", exc_info=True)
        await self.send_json({"type": "rows", "rows": self.names.label(rows)})

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            try:
                group = await database_sync_to_async(_group_now)(self.scope)
            except Exception:  # the database is away: keep the feed, check again later
                logger.warning("live feed: re-checking a viewer failed", exc_info=True)
                continue
            if group != self.group:
                await self._leave()
                await self.close(code=REFUSED)
                return
            await self.channel_layer.group_add(self.group, self.channel_name)
            await self._present()

    async def _present(self) -> None:
        try:
            await live.mark_present(self.channel_layer)
        except Exception:
            logger.warning("live feed: refreshing the presence key failed", exc_info=True)


websocket_urlpatterns = [path(PATH.lstrip("/"), TransactionFeed.as_asgi())]


def websocket_application():
    """The "websocket" branch of gateway_site.asgi (built at import: the origin validator reads
    ALLOWED_HOSTS then)."""
    return AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
