"""GET /metrics: the Prometheus text exposition, in front of Django (no session, no CSRF).

Only for clients in GATEWAY_METRICS_ALLOW (networks) or with `Authorization: Bearer
<GATEWAY_METRICS_TOKEN>`; anybody else is handed to Django, which answers its ordinary 404 for
an unknown path, so the endpoint is not revealed. The client address is the ASGI scope's (what
Django calls REMOTE_ADDR): uvicorn rewrites it from X-Forwarded-For only for the proxies named in
its `--forwarded-allow-ips`, as everywhere else in the project.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress

from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from core import metrics

PATH = "/metrics"


@functools.lru_cache(maxsize=8)
def parse_networks(value: str) -> tuple:
    """A comma-separated list of CIDR networks (ValueError on a bad one)."""
    return tuple(
        ipaddress.ip_network(part.strip(), strict=False)
        for part in value.split(",")
        if part.strip()
    )


def address_allowed(host: str | None, networks) -> bool:
    if not host:
        return False  # a unix socket: no address to check
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


def token_matches(scope, token: str) -> bool:
    if not token:
        return False
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, given = value.decode("latin-1").partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), token.encode()
            )
    return False


def allowed(scope) -> bool:
    if not metrics.ENABLED:
        return False
    client = scope.get("client")
    if client and address_allowed(client[0], parse_networks(settings.GATEWAY_METRICS_ALLOW)):
        return True
    return token_matches(scope, settings.GATEWAY_METRICS_TOKEN)


class ScrapeTimeCollector:
    """Values read when scraped, once per host (not per worker): the gauges the apps registered
    in core.metrics (the ledger's spool depths)."""

    def collect(self):
        for name, documentation, read in metrics.gauge_sources():
            family = GaugeMetricFamily(name, documentation)
            try:
                family.add_metric([], read())
            except OSError:
                family.add_metric([], float("nan"))
            yield family


_scrape_time = CollectorRegistry(auto_describe=False)
_scrape_time.register(ScrapeTimeCollector())


def render() -> bytes:
    """The exposition: every worker's files summed (multiprocess), else this process's; this
    process's batch written first (core.metrics, "Batched writes")."""
    metrics.flush()
    if metrics.MULTIPROCESS:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return generate_latest(registry) + generate_latest(_scrape_time)


class MetricsEndpoint:
    """ASGI: answers /metrics for whom it is allowed, passes everything else on."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != PATH:
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD") or not allowed(scope):
            return await self.app(scope, receive, send)
        body = await asyncio.to_thread(render)  # reads the workers' files: not on the loop
        headers = [
            (b"content-type", CONTENT_TYPE_LATEST.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )
