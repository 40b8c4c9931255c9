"""gunicorn settings for the gateway with uvicorn workers: the one way it is served
(docs/deployment.md; scripts/run.sh, the Dockerfile and bench/run.py all use it).

    gunicorn -c python:gateway_site.gunicorn_conf --bind 0.0.0.0:8000 gateway_site.asgi:application

Workers come from GATEWAY_WORKERS (default: one per core), proxy trust from gunicorn's own
FORWARDED_ALLOW_IPS (or --forwarded-allow-ips), which here defaults to no proxy at all (gunicorn's
own default trusts 127.0.0.1 and ::1: any local process could pose as any client); anything else
on the command line or in GUNICORN_CMD_ARGS overrides this module. Two things a multi-worker
server must get right, and how they are got here (measured: bench/results/servers.md):

1. Nagle (uvicorn#3149: a ~40 ms delayed-ACK stall per answer on a kept-alive connection when
   TCP_NODELAY is off). gunicorn sets TCP_NODELAY on its listener and Linux copies it to every
   accepted socket; the workers' loop, uvloop, sets it on each connection as well. Nothing to fix.
2. Balance. Workers accepting from one shared listener are unbalanced under load (measured with
   plain `uvicorn --workers 2`: up to 27 of 32 kept-alive connections on one worker). With
   `reuse_port` gunicorn (27 and up) binds no listener in the master; each worker binds a socket
   of its own with SO_REUSEPORT and the kernel spreads connections across them (measured: the
   busier of two workers held 17 or 18 of 32 at the median, 22 at worst).

It also owns the workers' metrics directory (gateway_site.metrics_setup): emptied at start,
inherited by the workers, and a worker that exits is marked dead for prometheus-client.
gunicorn skips a setting it does not know without a word: the module checks its own names at
import (tests/ops/test_upgrade_guards.py checks them and the behaviour above on each upgrade).
"""

from __future__ import annotations

import logging
import os
import sys
import types

import gunicorn
from gunicorn.config import KNOWN_SETTINGS

from core.config import exit_on_bad_environment
from gateway_site import metrics_setup

# Every bad value in the environment, one line each, before gunicorn starts a worker.
CONFIG = exit_on_bad_environment("gunicorn")

worker_class = "uvicorn_worker.UvicornWorker"
# One per core: the gateway's Python is CPU-bound. The cores this process may run on (in a
# container with a CPU quota rather than a cpuset, set GATEWAY_WORKERS to the quota).
workers = CONFIG.GATEWAY_WORKERS or len(os.sched_getaffinity(0))
reuse_port = True  # a listener per worker (see above)
# The addresses (the TLS proxy's) whose X-Forwarded-For and X-Forwarded-Proto uvicorn-worker's
# uvicorn believes; unset: none, so the client is the peer (docs/deployment.md, "TLS at a proxy").
forwarded_allow_ips = CONFIG.FORWARDED_ALLOW_IPS
# gunicorn's run-time control socket (~/.gunicorn/gunicorn.ctl): not used here, one surface less.
control_socket_disable = True
# Idle kept-alive connections stay open longer than a proxy keeps its own (nginx: 60 s), so the
# proxy closes first and never sends a request on a connection the worker is closing. gunicorn's
# default (2 s) also closed the benchmark's idle connections under it (read errors).
keepalive = 75
# A worker's requests (a stream: up to GATEWAY_UPSTREAM_TIMEOUT) may finish after SIGTERM.
graceful_timeout = 30
accesslog = None  # the gateway writes its own access line (gateway.access)

# gunicorn's own lines (master and worker start and exit) in the gateway's format (LOG_FORMAT,
# the same default as the settings); gateway_site.logs imports no Django.
_format = CONFIG.log_format
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "gateway_site.logs.RequestIdFilter"}},
    "formatters": {"gateway": {"()": f"gateway_site.logs.{_format.capitalize()}Formatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "gateway",
            "filters": ["request_id"],
        }
    },
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
    },
}


def on_starting(server) -> None:
    # Before the workers fork (they inherit the variable) and before anything imports
    # prometheus_client, which picks its mode at import.
    metrics_setup.own_multiproc_dir()


def post_worker_init(worker) -> None:
    # uvicorn-worker cut uvicorn.error off from propagation (to hand it gunicorn's handlers);
    # the settings' LOGGING, loaded since, removed those: let its lines (an exception in the
    # application among them) reach the "uvicorn" logger, in the gateway's format.
    logging.getLogger("uvicorn.error").propagate = True
    # What a previous worker left in the ledger spool is written at start, not after the first
    # charged request (docs/reliability.md). Imported here: the master loads no Django. The
    # bench's floor servers share this config without the licensing app: nothing to replay.
    from django.apps import apps

    if not apps.is_installed("licensing"):
        return
    from licensing.ledger.actions import spool_replay
    from licensing.ledger.spool import replay_at_start

    replay_at_start(spool_replay)


def child_exit(server, worker) -> None:
    """In the master: a worker has exited (crashed, restarted); its in-flight gauge stops."""
    metrics_setup.mark_dead(worker.pid)


def _unknown_settings(names: dict) -> list[str]:
    """The settings this module sets that gunicorn does not know. gunicorn skips such a name in
    a config module without a word, so a setting renamed upstream (`reuse_port`, a hook) would
    quietly stop applying (docs/performance.md, "The workarounds")."""
    known = {setting.name for setting in KNOWN_SETTINGS}
    ours = {
        name
        for name, value in names.items()
        if name.islower()
        and not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and getattr(value, "__module__", __name__) == __name__  # not an imported function
        and name != "annotations"  # from __future__
    }
    return sorted(ours - known)


if _unknown := _unknown_settings(globals()):
    sys.exit(
        f"gunicorn: gateway_site/gunicorn_conf.py sets {', '.join(_unknown)}, unknown to "
        f"gunicorn {gunicorn.__version__}, which would skip them silently "
        '(docs/performance.md, "The workarounds")'
    )
