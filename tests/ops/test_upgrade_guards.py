"""Upgrade guards: one test per place where the gateway bends a framework (a private attribute,
a subclass of a private class, a setting a library could rename under it). Each fails with a
message naming the workaround and docs/performance.md ("The workarounds"), where what it bends
and when it can go are written down. When one fails after an upgrade: re-read the workaround
against the new version, fix it (or drop it), then update the guard."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import inspect
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = 'docs/performance.md, "The workarounds"'


def guard(ok: object, workaround: str, what: str) -> None:
    if not ok:
        pytest.fail(f"UPGRADE: {workaround}: {what}. Re-read the workaround ({DOC}).", False)


def digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def params(function) -> list[str]:
    return list(inspect.signature(function).parameters)


# --------------------------------------------------------------------- gateway_site/handler.py

# The Django code gateway_site/handler.py mirrors on /v1 (its race with the client's disconnect,
# the response's closers without request_finished), by Django version. A new version with
# another digest: compare the new source with handler.py, then record the digest here.
DJANGO_MIRRORED = {
    "5.2.19": {
        "ASGIHandler.handle": "98faeb5bef800331",
        "ASGIHandler.run_get_response": "0234ea5fe09a5777",
        "ASGIHandler.listen_for_disconnect": "c729aa315c734f98",
        "HttpResponseBase.close": "84589f5b23acbb23",
        "BaseHandler.resolve_request": "ff178c3d63eebcd3",
    }
}


def test_the_asgi_handler_s_django_internals(monkeypatch):
    import django
    from django.core.exceptions import ImproperlyConfigured
    from django.core.handlers import asgi
    from django.core.handlers.asgi import ASGIHandler
    from django.core.handlers.base import BaseHandler
    from django.http.response import HttpResponse, HttpResponseBase

    from gateway_site.handler import GatewayASGIHandler, check_django

    name = "gateway_site/handler.py (GatewayASGIHandler)"
    expected = {
        "read_body": ["self", "receive"],
        "create_request": ["self", "scope", "body_file"],
        "send_response": ["self", "response", "send"],
    }
    for method, wanted in expected.items():
        found = getattr(ASGIHandler, method, None)
        guard(found, name, f"Django's ASGIHandler.{method} is gone")
        guard(params(found) == wanted, name, f"ASGIHandler.{method}{params(found)} changed")
    guard(params(asgi.get_script_prefix) == ["scope"], name, "get_script_prefix(scope) changed")
    handler = GatewayASGIHandler()  # runs check_django: the start-up check
    guard(
        inspect.iscoroutinefunction(handler._middleware_chain),
        name,
        "BaseHandler._middleware_chain is no longer the async chain load_middleware builds",
    )
    response = HttpResponse()
    guard(isinstance(response._resource_closers, list), name, "_resource_closers changed")
    guard(hasattr(response, "_handler_class"), name, "HttpResponseBase._handler_class is gone")

    version = django.get_version()
    recorded = DJANGO_MIRRORED.get(version)
    guard(recorded, name, f"Django {version} is not one whose handler code was compared")
    mirrored = {
        "ASGIHandler.handle": ASGIHandler.handle,
        "ASGIHandler.run_get_response": ASGIHandler.run_get_response,
        "ASGIHandler.listen_for_disconnect": ASGIHandler.listen_for_disconnect,
        "HttpResponseBase.close": HttpResponseBase.close,
        # resolve_request: kept matches of fixed /v1 paths (issue 40), Django's own otherwise.
        "BaseHandler.resolve_request": BaseHandler.resolve_request,
    }
    for label, function in mirrored.items():
        guard(
            digest(function) == recorded[label],
            name,
            f"Django {version} changed {label}, which the handler mirrors (digest "
            f"{digest(function)}); compare, then record it in DJANGO_MIRRORED",
        )

    # The start-up check refuses a Django without them (the server does not start).
    monkeypatch.delattr(ASGIHandler, "send_response")
    with pytest.raises(ImproperlyConfigured, match="ASGIHandler.send_response"):
        check_django(handler)


def test_the_api_key_admin_s_model_state():
    """licensing's API key admin hands the created row's `_state` (adding, db) to the object
    the admin goes on with."""
    from django.db.models.base import ModelState

    state = ModelState()
    guard(
        hasattr(state, "adding") and hasattr(state, "db"),
        "the API key admin's save_model (Model._state.adding / .db)",
        "Django's ModelState has no `adding` or `db` any more",
    )


# ------------------------------------------------------------- gateway_site/gunicorn_conf.py


def test_every_setting_of_gunicorn_conf_is_one_gunicorn_knows():
    from gunicorn.config import KNOWN_SETTINGS

    from gateway_site import gunicorn_conf

    name = "gateway_site/gunicorn_conf.py"
    unknown = gunicorn_conf._unknown_settings(vars(gunicorn_conf))
    guard(not unknown, name, f"gunicorn does not know {unknown} (and would skip them silently)")
    # ...and the start-up check would see a renamed one.
    guard(
        gunicorn_conf._unknown_settings({"reuse_prot": True}) == ["reuse_prot"],
        name,
        "the start-up check no longer reports an unknown setting",
    )
    hooks = {s.name: s.default for s in KNOWN_SETTINGS if inspect.isfunction(s.default)}
    for hook in ("on_starting", "post_worker_init", "child_exit"):
        ours = getattr(gunicorn_conf, hook)
        guard(
            hook in hooks and len(params(ours)) == len(params(hooks[hook])),
            name,
            f"gunicorn's `{hook}` hook is gone or takes other arguments",
        )


def test_gunicorn_s_listener_has_tcp_nodelay_and_reuse_port_and_accepted_sockets_inherit_it():
    """uvicorn#3149 (Nagle: a ~40 ms delayed-ACK stall per answer on a kept-alive connection)
    needs no fix under gunicorn: its listener has TCP_NODELAY, which Linux copies to every
    accepted socket; `reuse_port` (one listener per worker, the balance) sets SO_REUSEPORT."""
    import logging

    from gunicorn import sock
    from gunicorn.config import Config

    name = "gunicorn's listener (gateway_site/gunicorn_conf.py: reuse_port, no Nagle fix)"
    cfg = Config()
    cfg.set("bind", ["127.0.0.1:0"])
    cfg.set("reuse_port", True)
    log = logging.getLogger("test_upgrade_guards")
    (listener,) = sock.create_sockets(cfg, log)
    try:
        raw = listener.sock
        guard(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), name, "no TCP_NODELAY")
        guard(raw.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT), name, "no SO_REUSEPORT")
        raw.setblocking(True)
        with socket.create_connection(raw.getsockname(), timeout=5) as client:
            accepted, _ = raw.accept()
            with accepted:
                guard(
                    accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
                    name,
                    "an accepted socket no longer inherits TCP_NODELAY (uvicorn#3149's stall)",
                )
            del client
    finally:
        sock.close_sockets([listener])


def test_uvloop_turns_nagle_off_on_accepted_connections():
    """The workers' loop (uvloop, uvicorn's `auto`) sets TCP_NODELAY on each connection it
    accepts, whatever the listener's protocol number: uvicorn#3149 does not apply to it."""
    import uvloop

    name = "uvloop in the workers (no Nagle fix needed)"
    seen: list[int] = []

    class Protocol(asyncio.Protocol):
        def connection_made(self, transport):
            seen.append(
                transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY
                )
            )
            transport.close()

    async def main():
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as uvicorn's
        listener.bind(("127.0.0.1", 0))
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Protocol, sock=listener)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        await reader.read()  # the server closes it
        writer.close()
        server.close()
        await server.wait_closed()

    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    with runner:
        runner.run(main())
    guard(seen == [1], name, f"an accepted connection had TCP_NODELAY {seen}")


@pytest.mark.slow  # a gunicorn master and two workers
def test_with_reuse_port_each_gunicorn_worker_listens_on_a_socket_of_its_own(tmp_path):
    """What spreads kept-alive connections over the workers: gunicorn (27 and up) binds no
    listener in the master under `reuse_port`, and each worker binds its own."""
    from tests.kit import wait_until
    from tests.processes import free_port

    name = "gateway_site/gunicorn_conf.py (reuse_port: a listener per worker)"
    port = free_port()
    env = {**os.environ, "GATEWAY_WORKERS": "2", "LOG_FORMAT": "text"}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    cmd = [gunicorn, "-c", "python:gateway_site.gunicorn_conf", "--bind", f"127.0.0.1:{port}"]
    with (tmp_path / "gunicorn.log").open("wb") as log:
        master = subprocess.Popen(
            [*cmd, "gateway_site.asgi:application"], cwd=ROOT, env=env, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        holders: dict[int, set[str]] = {}

        def two_workers_listen() -> bool:
            holders.clear()
            holders.update(_listeners(port))
            return sum(1 for pid in holders if pid != master.pid) == 2

        wait_until(two_workers_listen, timeout=60, what="two gunicorn workers listening")
        guard(master.pid not in holders, name, "the master holds a listener of its own")
        inodes = [inode for pid, found in holders.items() for inode in found]
        guard(len(inodes) == len(set(inodes)) == 2, name, f"the workers share a listener {holders}")
    finally:
        master.terminate()
        master.wait(60)


def _listeners(port: int) -> dict[int, set[str]]:
    """pid -> inodes of the listening sockets on `port` it holds."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                listening.add(f[9])
    out: dict[int, set[str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            targets = {os.readlink(fd.path) for fd in os.scandir(f"{entry.path}/fd")}
        except OSError:
            continue
        found = {t[8:-1] for t in targets if t.startswith("socket:[")} & listening
        if found:
            out[int(entry.name)] = found
    return out


# ----------------------------------------------------------------------- core/outbound.py


def test_the_guarded_transports_replace_httpx_s_private_pool():
    import httpcore
    import httpx

    from core import outbound

    name = "core/outbound.py (GuardedTransport: the address guard on httpx's `_pool`)"
    for transport_class, pool_class, method in (
        (httpx.AsyncHTTPTransport, httpcore.AsyncConnectionPool, "handle_async_request"),
        (httpx.HTTPTransport, httpcore.ConnectionPool, "handle_request"),
    ):
        transport = transport_class()
        guard(
            isinstance(getattr(transport, "_pool", None), pool_class),
            name,
            f"httpx's {transport_class.__name__} keeps no {pool_class.__name__} in `_pool`",
        )
        guard(
            "self._pool" in inspect.getsource(getattr(transport_class, method)),
            name,
            f"{transport_class.__name__}.{method} no longer sends through `self._pool`",
        )
    # The start-up check refuses to build a transport it could not guard.
    with pytest.raises(RuntimeError, match="address guard would not apply"):
        outbound._check_private_pool(object(), httpcore.AsyncConnectionPool)


# ------------------------------------------------------------- inference/providers/pool.py


def test_the_provider_pool_s_httpx_and_aiohttp_interfaces():
    import aiohttp
    import httpx
    from httpx_aiohttp import AiohttpTransport

    from inference.providers.pool import read_answer

    name = "inference/providers/pool.py (aiohttp's pool behind httpx's interface)"
    # Answers are httpx.Response objects built from aiohttp's raw header pairs.
    request = httpx.Request("POST", "http://upstream.test/v1/embeddings")
    answer = httpx.Response(
        200, headers=[(b"Content-Type", b"application/json")], content=b'{"a": 1}', request=request
    )
    guard(
        answer.json() == {"a": 1} and answer.headers["content-type"] == "application/json",
        name,
        "httpx.Response(status, headers=raw pairs, content=bytes) no longer builds an answer",
    )
    # `read_answer` puts the body where httpx's own `read()` does (a private attribute).
    read = read_answer(200, [(b"Content-Type", b"application/json")], b'{"a": 1}')
    guard(
        (read.json(), read.text, read.read(), b"".join(read.iter_bytes()))
        == ({"a": 1}, '{"a": 1}', b'{"a": 1}', b'{"a": 1}')
        and asyncio.run(read.aread()) == b'{"a": 1}'
        and read.headers["content-type"] == "application/json",
        name,
        "httpx.Response keeps a read body in `_content` no longer (read_answer's answers are "
        "unread)",
    )
    for attribute in ("raw_headers", "release", "content", "status", "headers"):
        guard(
            hasattr(aiohttp.ClientResponse, attribute),
            name,
            f"aiohttp's ClientResponse has no `{attribute}`",
        )
    for attribute in ("iter_chunked", "iter_any"):
        guard(hasattr(aiohttp.StreamReader, attribute), name, f"no StreamReader.{attribute}")
    session = inspect.signature(aiohttp.ClientSession).parameters
    guard(
        session["auto_decompress"].default is True,
        name,
        "aiohttp no longer decompresses bodies by default (_decoded_headers assumes it does)",
    )
    guard({"trust_env", "connector", "trace_configs"} <= set(session), name, "ClientSession")
    timeout = set(params(aiohttp.ClientTimeout))
    guard({"connect", "sock_connect", "sock_read"} <= timeout, name, "aiohttp.ClientTimeout")
    guard(
        {"limit", "keepalive_timeout"} <= set(params(aiohttp.TCPConnector)),
        name,
        "aiohttp.TCPConnector(limit, keepalive_timeout)",
    )
    guard("client" in params(AiohttpTransport), name, "httpx-aiohttp's AiohttpTransport(client)")


# ------------------------------------------------------------------ gateway_site/asgi.py


def test_the_collector_tuning_was_measured_on_this_python():
    probe = (
        "import gc, sys, gateway_site.asgi as a; "
        "print(sys.version_info[:2] in a.GC_MEASURED_ON, gc.get_freeze_count() > 0)"
    )
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_GC_THRESHOLD"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    name = "gateway_site/asgi.py (_tune_gc: gc.freeze and GATEWAY_GC_THRESHOLD)"
    guard(
        done.stdout.split("\n")[-2] == "True True",
        name,
        f"Python {sys.version.split()[0]}'s collector is not one the thresholds were measured "
        "on (re-measure, then add it to GC_MEASURED_ON)",
    )
    guard(len(gc.get_threshold()) == 3, name, "gc.get_threshold() is not three generations")


# ---------------------------------------------------------- gateway_site/tracing_django.py


def test_the_async_tracing_middleware_s_private_base():
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.django.middleware import otel_middleware

    from gateway_site.tracing_django import AsyncDjangoInstrumentor, AsyncDjangoMiddleware

    name = "gateway_site/tracing_django.py (a subclass of the instrumentation's _DjangoMiddleware)"
    base = getattr(otel_middleware, "_DjangoMiddleware", None)
    guard(base is not None, name, "_DjangoMiddleware is gone")
    for hook in ("process_request", "process_response", "process_view", "process_exception"):
        guard(callable(getattr(base, hook, None)), name, f"_DjangoMiddleware.{hook} is gone")
    guard(
        "self._opentelemetry_middleware" in inspect.getsource(DjangoInstrumentor._instrument),
        name,
        "DjangoInstrumentor no longer inserts `_opentelemetry_middleware` into MIDDLEWARE",
    )
    guard(
        AsyncDjangoInstrumentor._opentelemetry_middleware.endswith(AsyncDjangoMiddleware.__name__),
        name,
        "the instrumentor no longer names the async middleware",
    )


# -------------------------------------------------------------- gateway_site/staticfiles.py


def test_the_static_files_lookup_through_whitenoise():
    from whitenoise.responders import StaticFile

    from gateway_site.staticfiles import StaticFilesMiddleware

    name = "gateway_site/staticfiles.py (WhiteNoise's lookup without its middleware)"

    async def get_response(request):  # pragma: no cover (never reached here)
        return None

    middleware = StaticFilesMiddleware(get_response)  # runs the start-up check
    guard(isinstance(middleware.prefix, str), name, "WhiteNoiseMiddleware.static_prefix")
    guard(
        params(StaticFile.get_response) == ["self", "method", "request_headers"],
        name,
        f"StaticFile.get_response{params(StaticFile.get_response)} changed",
    )
