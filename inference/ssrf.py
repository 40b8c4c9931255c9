"""The SSRF guard of the gateway's own fetcher (POST /v1/fetch).

Every connection the fetcher opens goes through `GuardedBackend.connect_tcp`, the network
layer under httpx/httpcore: the host is resolved once, every address it resolves to is
checked, and the socket is opened to the checked address itself (no second lookup that a
rebinding DNS server could answer differently). TLS still verifies the certificate against
the host name. Redirects are followed by the fetcher one hop at a time, so each hop comes back
through here. Refused: loopback, private, link-local, shared (CGNAT), multicast, reserved,
unspecified and documentation addresses, IPv4 embedded in IPv6 (mapped, 6to4, Teredo, NAT64,
compatible) when the IPv4 part is refused, cloud metadata addresses always, and ports other
than the allowed ones.

`GATEWAY_FETCH_ALLOW_PRIVATE` (CIDR list, empty by default) opens exactly the networks it
lists, for tests and on-premises hosts; metadata addresses stay closed even then.
`httpx-secure` was considered and not used: it picks the address by opening a TCP probe to
the host (a connection to a denied address before refusing it).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpcore
import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS DNS
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


class Refused(Exception):
    """A URL or address the fetcher will not reach; `code` goes into the per-URL error."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@functools.lru_cache(maxsize=8)
def _networks(spec: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(part.strip()) for part in spec.split(",") if part.strip())


def allowed_networks():
    return _networks(settings.GATEWAY["FETCH_ALLOW_PRIVATE"])


def allowed_ports() -> frozenset[int]:
    return settings.GATEWAY["FETCH_ALLOWED_PORTS"]


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or ip in _NAT64_LOCAL or (ip in _V4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(ip.packed[-4:])
    return None


def refusal(ip: IPAddress, networks=None) -> str | None:
    """Why the fetcher must not connect to `ip`, or None when it may."""
    networks = allowed_networks() if networks is None else networks
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # the same socket address: judged as IPv4
        else:
            inner = _embedded_v4(ip)
            if inner is not None and refusal(inner, networks):
                return "embeds a refused IPv4 address"
    if ip in METADATA_ADDRESSES:
        return "cloud metadata address"
    if any(ip.version == net.version and ip in net for net in networks):
        return None
    if (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
    ):
        return "not a public address"
    return None


async def getaddrinfo(host: str, port: int) -> list[str]:
    """The addresses of `host` (the network edge; tests answer it themselves)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [info[4][0] for info in infos]


async def admit(host: str, port: int) -> str:
    """The one address to connect to for host:port, after every check; raises Refused."""
    if port not in allowed_ports():
        raise Refused("blocked_port", f"Port {port} is not allowed")
    addresses = await _addresses(host, port)
    # Any refused address refuses the host: a name that mixes public and internal answers is
    # how rebinding attacks start.
    for ip in addresses:
        if refusal(ip) is not None:
            raise Refused("blocked_address", f"The address of '{host}' is not allowed")
    return str(addresses[0])


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = await getaddrinfo(host, port)
    except (OSError, UnicodeError) as exc:
        raise Refused("dns_error", f"Host '{host}' could not be resolved") from exc
    addresses = []
    for address in found:
        try:
            addresses.append(ipaddress.ip_address(address.split("%", 1)[0]))
        except ValueError:
            continue
    if not addresses:
        raise Refused("dns_error", f"Host '{host}' could not be resolved")
    return addresses


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to admitted addresses."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None):
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host, port, timeout=None, local_address=None, socket_options=None
    ) -> httpcore.AsyncNetworkStream:
        address = await admit(host, port)
        return await self.inner.connect_tcp(
            address,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise Refused("blocked_address", "Unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose every connection goes through GuardedBackend."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend | None = None):
        super().__init__(trust_env=False, retries=0)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=100,
            # No keep-alive: every request opens (and checks) its own connection, so an
            # operator's change of the allow-list holds at once; fetched sites are rarely
            # asked twice in a row.
            max_keepalive_connections=0,
            network_backend=backend or GuardedBackend(),
        )


def guarded_client(backend: httpcore.AsyncNetworkBackend | None = None) -> httpx.AsyncClient:
    """A client that never keeps cookies (a jar whose policy accepts none), never reads proxy
    settings from the environment and never follows redirects by itself."""
    return httpx.AsyncClient(
        transport=GuardedTransport(backend),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        follow_redirects=False,
        trust_env=False,
    )
