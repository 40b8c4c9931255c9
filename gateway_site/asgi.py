"""ASGI entry point: `gateway_site.asgi:application`, served by gunicorn with uvicorn workers
(`gateway_site/gunicorn_conf.py`, docs/deployment.md)."""

import gc
import logging
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")

from core.config import exit_on_bad_environment  # noqa: E402

# Every bad value in the environment, one line each, and exit: not a traceback per worker.
CONFIG = exit_on_bad_environment("gateway_site.asgi")

from gateway_site.metrics_setup import ensure_multiproc_dir  # noqa: E402

# Before anything imports prometheus_client (django.setup does): it picks its mode at import.
ensure_multiproc_dir()

import django  # noqa: E402

django.setup(set_prefix=False)

from gateway_site.tracing_setup import setup_from_environment  # noqa: E402

# With OTEL_EXPORTER_OTLP_ENDPOINT: before the handler builds its middleware chain (the Django
# instrumentation adds one) and before any database connection (psycopg's) is opened.
setup_from_environment()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from licensing.console.consumers import websocket_application  # noqa: E402

from .bodylimit import BodyLimit  # noqa: E402
from .handler import GatewayASGIHandler  # noqa: E402
from .lifespan import lifespan  # noqa: E402
from .metrics import MetricsEndpoint  # noqa: E402

django_application = GatewayASGIHandler()
# Import the URL conf (and with it every endpoint and provider module) now, not in the first
# request, which would otherwise wait for it.
get_resolver().resolve("/v1/health")

# /v1 bodies over the limit are refused before they are read (gateway_site.bodylimit).
# /metrics is answered before Django (gateway_site.metrics).
# Websockets: the admin's live feed of ledger rows (licensing.console.consumers).
# Lifespan: a worker's shutdown closes its budget leases (gateway_site.lifespan).
application = ProtocolTypeRouter(
    {
        "lifespan": lifespan,
        "http": MetricsEndpoint(
            BodyLimit(django_application, max_bytes=settings.GATEWAY_MAX_BODY_BYTES)
        ),
        "websocket": websocket_application(),
    }
)

# The collectors the thresholds were measured for: generational, three generations, a young
# collection that does not scan the old heap (3.12 and 3.13 collect as 3.11 does). Python 3.14's
# incremental collector reads the thresholds differently.
GC_MEASURED_ON = frozenset({(3, 11), (3, 12), (3, 13)})


def _tune_gc() -> None:
    """The cyclic collector, for a long-lived server with a large heap: the objects built at
    start-up (Django, the URL conf, every provider module: ~170,000) are frozen out of its scans,
    and a young generation of 700 objects (Python's default) is raised to
    GATEWAY_GC_THRESHOLD's first number. Requests free nearly everything by reference counting,
    but 32 requests in flight keep enough alive to trigger a collection every few requests,
    each scanning them all: 0.3 ms of CPU per request at 32 connections (docs/performance.md,
    "The workarounds")."""
    thresholds = CONFIG.gc_thresholds  # checked at start (core.config)
    if thresholds is None:
        return
    if sys.version_info[:2] not in GC_MEASURED_ON:
        # Still applied (harmless at worst: collections come later), but worth re-measuring.
        logging.getLogger("gateway").warning(
            "GATEWAY_GC_THRESHOLD was measured on Python %s's collector, not this one's (%s): "
            're-measure it (docs/performance.md, "The workarounds")',
            " / ".join(f"{major}.{minor}" for major, minor in sorted(GC_MEASURED_ON)),
            sys.version.split()[0],
        )
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)


_tune_gc()
