"""The one SSRF guard for every connection the gateway opens to a URL that a person chose.

Two users: the fetcher (`inference/ssrf.py`: URLs an API client sends to `/v1/fetch`, its own
allow-list `GATEWAY_FETCH_ALLOW_PRIVATE`) and URLs an institution admin saves — JWKS URLs of
JWT issuers, OpenID Connect discovery/token/JWKS/userinfo, LTI key sets — through
`validate_outbound_url` (when saved) and `fetch_outbound_json` / `post_outbound_form` (when
fetched), allow-list `GATEWAY_OUTBOUND_ALLOW`, TLS trust `outbound_ssl_context()` (certifi's
CAs and the operator's `GATEWAY_EXTRA_CA_CERTS`; the fetcher trusts certifi's alone).

How a connection is guarded: the host is resolved once, every address it resolves to is
checked, and the socket is opened to the checked address itself (no second lookup that a
rebinding DNS server could answer differently); TLS still verifies the certificate against the
host name. Refused: loopback, private, link-local, shared (CGNAT), multicast, reserved,
unspecified and documentation addresses, IPv4 embedded in IPv6 (mapped, 6to4, Teredo, NAT64,
compatible) when the IPv4 part is refused, cloud metadata addresses always (even inside an
allowed network), and ports other than the allowed ones. `httpx-secure` was considered and not
used: it picks the address by opening a TCP probe to the host (a connection to a denied address
before refusing it).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import re
import socket
import ssl
import time
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

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
    """A URL or address the gateway will not reach, or an outbound fetch that failed: `code`
    is machine-readable (the fetcher's per-URL error code), `message` is for people."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# --- addresses --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def networks(spec: str) -> tuple[Network, ...]:
    """The networks of a comma-separated CIDR list (settings validate it at start-up)."""
    return tuple(ipaddress.ip_network(part.strip()) for part in spec.split(",") if part.strip())


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


def refusal(ip: IPAddress, allowed: tuple[Network, ...] = ()) -> str | None:
    """Why the gateway must not connect to `ip`, or None when it may (`allowed`: the
    operator's networks, open although not public)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # the same socket address: judged as IPv4
        else:
            inner = _embedded_v4(ip)
            if inner is not None and refusal(inner, allowed):
                return "embeds a refused IPv4 address"
    if ip in METADATA_ADDRESSES:
        return "cloud metadata address"
    if _inside(ip, allowed):
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


def _inside(ip: IPAddress, allowed: tuple[Network, ...]) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in allowed)


async def getaddrinfo(host: str, port: int) -> list[str]:
    """The addresses of `host` (the network edge; tests answer it themselves)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]  # an address string (an int only for AF_CAN)


def getaddrinfo_sync(host: str, port: int) -> list[str]:
    """The same for code running on a thread (the JWT check)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def _literal(host: str) -> list[IPAddress] | None:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return None


def _parsed(host: str, found: list[str]) -> list[IPAddress]:
    addresses = []
    for address in found:
        try:
            addresses.append(ipaddress.ip_address(address.split("%", 1)[0]))
        except ValueError:
            continue
    if not addresses:
        raise Refused("dns_error", f"Host '{host}' could not be resolved")
    return addresses


def _judged(host: str, addresses: list[IPAddress], allowed: tuple[Network, ...]) -> str:
    # Any refused address refuses the host: a name that mixes public and internal answers is
    # how rebinding attacks start.
    for ip in addresses:
        reason = refusal(ip, allowed)
        if reason is not None:
            raise Refused("blocked_address", f"The address of '{host}' is not allowed ({reason})")
    return str(addresses[0])


async def admit(
    host: str, port: int, *, allowed: tuple[Network, ...], ports: frozenset[int], resolve=None
) -> str:
    """The one address to connect to for host:port, after every check; raises Refused."""
    if port not in ports:
        raise Refused("blocked_port", f"Port {port} is not allowed")
    addresses = _literal(host)
    if addresses is None:
        try:
            found = await (resolve or getaddrinfo)(host, port)
        except (OSError, UnicodeError) as exc:
            raise Refused("dns_error", f"Host '{host}' could not be resolved") from exc
        addresses = _parsed(host, found)
    return _judged(host, addresses, allowed)


def _resolved_sync(host: str, port: int, allowed: tuple[Network, ...]) -> list[IPAddress]:
    """Every address of the host, all of them admitted (for code on a thread)."""
    addresses = _literal(host)
    if addresses is None:
        try:
            found = getaddrinfo_sync(host, port)
        except (OSError, UnicodeError) as exc:
            raise Refused("dns_error", f"Host '{host}' could not be resolved") from exc
        addresses = _parsed(host, found)
    _judged(host, addresses, allowed)
    return addresses


# --- the guarded httpx client (async: the fetcher) --------------------------------------------


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to admitted addresses."""

    def __init__(
        self,
        inner: httpcore.AsyncNetworkBackend | None = None,
        *,
        allowed: tuple[Network, ...] = (),
        ports: frozenset[int] = frozenset({443}),
    ):
        self.inner = inner or httpcore.AnyIOBackend()
        self.allowed = allowed
        self.ports = ports

    async def admit(self, host: str, port: int) -> str:
        return await admit(host, port, allowed=self.allowed, ports=self.ports)

    async def connect_tcp(
        self, host, port, timeout=None, local_address=None, socket_options=None
    ) -> httpcore.AsyncNetworkStream:
        address = await self.admit(host, port)
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


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """The fetcher's trust: certifi's public CAs only (a URL an API client chose is never
    trusted on an institution's own CA)."""
    return httpx.create_ssl_context(trust_env=False)


@functools.lru_cache(maxsize=4)
def _admin_ssl_context(extra_ca_certs: str | None) -> ssl.SSLContext:
    """The trust of admin-set URLs: certifi's CAs and the operator's `GATEWAY_EXTRA_CA_CERTS`
    (an institution's own CA for its on-premises IdP, LMS or JWKS server). Built once per
    file (the setting is read at start; a test may name another file), not per request:
    loading certifi's bundle costs milliseconds."""
    context = httpx.create_ssl_context(trust_env=False)
    if extra_ca_certs:
        context.load_verify_locations(cafile=extra_ca_certs)
    return context


def outbound_ssl_context() -> ssl.SSLContext:
    """The one TLS context of every connection to an admin-set URL (JWKS, OpenID Connect
    discovery/token/userinfo, LTI key sets, an OpenAI-compatible server's model list)."""
    return _admin_ssl_context(settings.GATEWAY.get("EXTRA_CA_CERTS"))


def provider_ssl_context() -> ssl.SSLContext | bool:
    """The trust of the gateway's provider connections (an admin-set base URL too: a campus's
    own vLLM or Ollama server behind its CA): the clients' own default (True) unless the
    operator set `GATEWAY_EXTRA_CA_CERTS`, then certifi's CAs and those (`outbound_ssl_context`).
    Read when a connection's pool is built, never per request."""
    extra = settings.GATEWAY.get("EXTRA_CA_CERTS")
    return _admin_ssl_context(extra) if extra else True


def _check_private_pool(transport, pool_class: type) -> None:
    """The guarded transports replace httpx's private `_pool` (the pool its requests go
    through). Were it renamed, the replacement would be an unused attribute and requests would
    connect anywhere: refuse to build the transport instead (docs/performance.md, "The
    workarounds"; tests/ops/test_upgrade_guards.py)."""
    if not isinstance(getattr(transport, "_pool", None), pool_class):
        raise RuntimeError(
            f"httpx {httpx.__version__}: {type(transport).__name__} keeps no "
            f"{pool_class.__name__} in `_pool`; core/outbound.py's address guard would not "
            'apply (docs/performance.md, "The workarounds")'
        )


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose every connection goes through GuardedBackend."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend):
        super().__init__(verify=_ssl_context(), trust_env=False, retries=0)
        _check_private_pool(self, httpcore.AsyncConnectionPool)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            max_connections=100,
            # No keep-alive: every request opens (and checks) its own connection, so an
            # operator's change of the allow-list holds at once.
            max_keepalive_connections=0,
            network_backend=backend,
        )


def _no_cookies() -> CookieJar:
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def guarded_client(backend: httpcore.AsyncNetworkBackend) -> httpx.AsyncClient:
    """A client that never keeps cookies (a jar whose policy accepts none), never reads proxy
    settings from the environment and never follows redirects by itself."""
    return httpx.AsyncClient(
        transport=GuardedTransport(backend),
        cookies=_no_cookies(),
        follow_redirects=False,
        trust_env=False,
    )


# --- URLs an admin sets: checked when saved, checked again when fetched ------------------------


def outbound_allowed() -> tuple[Network, ...]:
    return networks(settings.GATEWAY["OUTBOUND_ALLOW"])


def outbound_ports() -> frozenset[int]:
    return settings.GATEWAY["OUTBOUND_ALLOWED_PORTS"]


MAX_URL_LENGTH = 2000
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)\Z")


def _url_parts(url) -> tuple[str, str, int]:
    """(scheme, host, port) of an admin-set URL, from its text alone; raises Refused."""
    if not isinstance(url, str) or not url:
        raise Refused("invalid_url", "Not a valid URL")
    # ASCII without controls or spaces: no NUL, no lone surrogates, no look-alike letters
    # (an international host name is given in its xn-- form).
    if len(url) > MAX_URL_LENGTH or not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise Refused("invalid_url", "Not a valid URL (ASCII only, no spaces or controls)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused("invalid_url", "Not a valid URL") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http") or not parts.netloc:
        raise Refused("invalid_url", "Only absolute https URLs are allowed")
    if "@" in parts.netloc:
        raise Refused("invalid_url", "URLs with credentials (user@...) are not allowed")
    host = _checked_host(parts.hostname)
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80)


def _checked_host(hostname: str | None) -> str:
    """The URL's host without its trailing dot: a host name of valid labels, or an IP address
    in its usual form; raises Refused."""
    host = (hostname or "").rstrip(".")
    if not host:
        raise Refused("invalid_url", "The URL has no host")
    if _literal(host) is None:
        labels = host.split(".")
        if not all(_HOST_LABEL.match(label) for label in labels):
            raise Refused("invalid_url", f"'{host}' is not a valid host name")
        # `2130706433`, `0x7f.1`, `127.1`: numbers the resolver reads as IPv4 addresses. A top
        # label is never numeric in a real name; IP addresses are written in their usual form.
        if labels[-1].isdigit() or _inet_aton(host):
            raise Refused("invalid_url", "Write an IP address in its usual dotted form")
    elif "%" in host:
        raise Refused("invalid_url", "IPv6 zone identifiers are not allowed")
    return host


def _inet_aton(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def _admit_outbound(scheme: str, host: str, port: int) -> list[IPAddress]:
    """The addresses an admin-set URL may connect to: public (or inside the operator's
    allow-list, never metadata), plain http only inside the allow-list, an allowed port."""
    allowed = outbound_allowed()
    addresses = _resolved_sync(host, port, allowed)
    if scheme == "http" and not all(_inside(ip, allowed) for ip in addresses):
        raise Refused(
            "https_required",
            "Only https URLs are allowed (plain http only for hosts in GATEWAY_OUTBOUND_ALLOW)",
        )
    if port not in outbound_ports():
        raise Refused("blocked_port", f"Port {port} is not allowed")
    return addresses


def validate_outbound_url(url) -> str:
    """Check an admin-set URL when it is saved: https (http only for hosts inside the
    operator's `GATEWAY_OUTBOUND_ALLOW`), no credentials, an allowed port, a host that resolves
    to public (or allow-listed) addresses only. Returns the URL; raises Refused."""
    _admit_outbound(*_url_parts(url))
    return url


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write waits at most until the fetch's deadline, so a
    server that trickles one byte at a time cannot hold the fetch longer than its timeout."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: float):
        self.inner = inner
        self.deadline = deadline

    def _left(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("The fetch's time is up")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        tls = self.inner.start_tls(ssl_context, server_hostname, self._left(timeout))
        return _DeadlineStream(tls, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _SyncGuardedBackend(httpcore.NetworkBackend):
    """The synchronous backend of `fetch_outbound_json`: admits the address (and, for plain
    http, requires it inside the allow-list) at connect time, then holds the deadline."""

    def __init__(self, scheme: str, deadline: float):
        self.inner = httpcore.SyncBackend()
        self.scheme = scheme
        self.deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = _admit_outbound(self.scheme, host, port)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("The fetch's time is up")
        stream = self.inner.connect_tcp(
            str(addresses[0]),
            port,
            timeout=left if timeout is None else min(timeout, left),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self.deadline)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise Refused("blocked_address", "Unix sockets are not allowed")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # httpcore's retries only; the transport has none


class _SyncGuardedTransport(httpx.HTTPTransport):
    def __init__(self, backend: _SyncGuardedBackend):
        context = outbound_ssl_context()
        super().__init__(verify=context, trust_env=False, retries=0)
        _check_private_pool(self, httpcore.ConnectionPool)
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=1,
            max_keepalive_connections=0,
            network_backend=backend,
        )


def fetch_outbound_json(
    url: str, *, max_bytes: int, timeout: float, headers: dict[str, str] | None = None
) -> Any:
    """GET an admin-set URL and return its JSON: checked again as when saved (the row may have
    been written past validation, or the host's addresses changed), connected only to the
    admitted address, no redirect followed, no compressed answer, at most `max_bytes` read,
    within `timeout` seconds in all. `headers` adds request headers (a server's API key). Any
    failure raises Refused with a readable message."""
    return _outbound_json("GET", url, max_bytes=max_bytes, timeout=timeout, headers=headers)


def post_outbound_form(
    url: str,
    *,
    data: dict[str, str],
    max_bytes: int,
    timeout: float,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST `data` form-encoded to an admin-set URL (an OpenID Connect token endpoint) and
    return its JSON, under the same guard as `fetch_outbound_json`. `headers` adds request
    headers (HTTP Basic client authentication). A 4xx with a JSON body is still a Refused
    (`http_error`): the caller logs the status, the body is the IdP's and is not shown."""
    return _outbound_json(
        "POST", url, max_bytes=max_bytes, timeout=timeout, data=data, headers=headers
    )


def fetch_outbound_bytes(url: str, *, max_bytes: int, timeout: float, accept: str) -> bytes:
    """GET an admin-set URL and return its body (SAML metadata: XML), under the same guard as
    `fetch_outbound_json`."""
    return bytes(_outbound_body("GET", url, max_bytes=max_bytes, timeout=timeout, accept=accept))


def _outbound_json(
    method: str,
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    data: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    body = _outbound_body(
        method, url, max_bytes=max_bytes, timeout=timeout, data=data, headers=headers
    )
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise Refused("invalid_json", "The answer is not JSON") from exc


def _outbound_body(
    method: str,
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    data: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    accept: str = "application/json",
) -> bytearray:
    scheme, host, port = _url_parts(url)
    deadline = time.monotonic() + timeout
    try:
        with httpx.Client(
            transport=_SyncGuardedTransport(_SyncGuardedBackend(scheme, deadline)),
            cookies=_no_cookies(),
            follow_redirects=False,
            trust_env=False,
            timeout=timeout,
        ) as client:
            sent = {"Accept": accept, "Accept-Encoding": "identity", **(headers or {})}
            with client.stream(method, url, headers=sent, data=data) as response:
                body = _answer_body(response, max_bytes)
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError) as exc:
        raise _transport_refusal(exc, timeout) from exc
    return body


def _answer_body(response: httpx.Response, max_bytes: int) -> bytearray:
    """The body of a plain 200 answer, read as it comes and never past `max_bytes`; anything
    else (a redirect, another status, a compressed body) raises Refused."""
    if response.is_redirect:
        raise Refused("redirect_not_allowed", "The URL redirected (not followed)")
    if response.status_code != 200:
        raise Refused("http_error", f"The URL answered {response.status_code}")
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        raise Refused("unreadable_content", "The answer is compressed")
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > max_bytes:
            raise Refused("too_large", f"The answer is larger than {max_bytes} bytes")
    return body


def _transport_refusal(exc: Exception, timeout: float) -> Refused:
    """The Refused of a fetch that failed on the way: no answer in time, a certificate not
    trusted, or any other failure to connect or read (its detail for the operator's log)."""
    if isinstance(exc, httpx.TimeoutException):
        return Refused("timeout", f"No complete answer within {timeout:g} s")
    if isinstance(exc, httpx.ConnectError) and _untrusted_certificate(exc):
        return Refused(
            "certificate_untrusted",
            f"The server's TLS certificate is not trusted ({_cause_text(exc)}); a server "
            "with a certificate of the institution's own CA needs GATEWAY_EXTRA_CA_CERTS",
        )
    detail = f"{type(exc).__name__}: {exc}"[:300]  # for the operator's log line
    return Refused("connection_failed", f"Connection failed ({detail})")


def _untrusted_certificate(exc: BaseException) -> bool:
    """Whether a connection failed because the server's certificate chain is not trusted
    (httpx wraps httpcore's error, which wraps the ssl module's)."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_code in _UNTRUSTED_CODES
        seen = seen.__cause__ or seen.__context__
    return False


# X509_V_ERR_*: unable to get the issuer (locally), self-signed leaf, self-signed in the chain,
# unable to verify the first certificate: the chain ends at a CA not in the trust store.
_UNTRUSTED_CODES = frozenset({2, 18, 19, 20, 21})


def _cause_text(exc: BaseException) -> str:
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, ssl.SSLCertVerificationError):
        seen = seen.__cause__ or seen.__context__
    text = getattr(seen, "verify_message", None) or str(exc)
    return str(text)[:200]
