"""The SSRF guard of the gateway's own fetcher (POST /v1/fetch), on `core.outbound`.

The rules (addresses refused, one lookup per connection, the socket opened to the checked
address) live in `core/outbound.py`, shared with every URL an admin sets (JWKS, and the OIDC
and LTI URLs to come). What is the fetcher's own: its allow-list
`GATEWAY_FETCH_ALLOW_PRIVATE` (CIDR list, empty by default: networks opened for tests and
on-premises hosts; metadata addresses stay closed even then) and its ports
`GATEWAY_FETCH_ALLOWED_PORTS`. Redirects are followed by the fetcher one hop at a time, so
each hop comes back through here.
"""

from __future__ import annotations

import httpcore
import httpx
from django.conf import settings

from core import outbound
from core.outbound import METADATA_ADDRESSES, IPAddress, Refused  # noqa: F401 (public names)

_networks = outbound.networks


def allowed_networks():
    return _networks(settings.GATEWAY["FETCH_ALLOW_PRIVATE"])


def allowed_ports() -> frozenset[int]:
    return settings.GATEWAY["FETCH_ALLOWED_PORTS"]


def refusal(ip: IPAddress, networks=None) -> str | None:
    """Why the fetcher must not connect to `ip`, or None when it may."""
    return outbound.refusal(ip, allowed_networks() if networks is None else networks)


async def getaddrinfo(host: str, port: int) -> list[str]:
    """The addresses of `host` (the network edge; tests answer it themselves)."""
    return await outbound.getaddrinfo(host, port)


async def admit(host: str, port: int) -> str:
    """The one address to connect to for host:port, after every check; raises Refused."""
    # `getaddrinfo` is looked up here at each call, so that a test's resolver replaces it.
    return await outbound.admit(
        host, port, allowed=allowed_networks(), ports=allowed_ports(), resolve=getaddrinfo
    )


class GuardedBackend(outbound.GuardedBackend):
    """httpcore's network backend, connecting only to addresses the fetcher admits (its
    allow-list and ports, read at each connection)."""

    async def admit(self, host: str, port: int) -> str:
        return await admit(host, port)


class GuardedTransport(outbound.GuardedTransport):
    def __init__(self, backend: httpcore.AsyncNetworkBackend | None = None):
        super().__init__(backend or GuardedBackend())


def guarded_client(backend: httpcore.AsyncNetworkBackend | None = None) -> httpx.AsyncClient:
    """A client that never keeps cookies, never reads proxy settings from the environment and
    never follows redirects by itself."""
    return outbound.guarded_client(backend or GuardedBackend())
