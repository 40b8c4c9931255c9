"""Gateway worker processes and a Redis server of their own, for tests that need several
processes (cache invalidation, fair use across workers, the live feed through Redis)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    """The test database, as the worker processes must reach it."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "gateway_site.asgi:application", "--host",
             "127.0.0.1", "--port", str(self.port), "--no-access-log"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        # A bound, not a wait: a worker's first page (templates, the admin) took over 5 s on two
        # cores at load 7 (CI with a third lane), so the bound is generous.
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120  # a deadline: a loaded machine starts slowly
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "worker exited at start"
            try:
                if self.http.get("/v1/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)  # a refused connection costs next to nothing: ask often
        raise RuntimeError("worker did not start")

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
        self.log.close()


class RedisServer:
    def __init__(self, workdir: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def redis_server_or_skip(workdir: Path) -> RedisServer:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs the Debian package)")
    return RedisServer(workdir)


@contextmanager
def running_workers(count: int, tmp_path: Path, env=None):
    """`count` gateway worker processes on the test database, started and ready for the block.
    `env` (a dict, or a function of the worker's number) adds to the environment; REDIS_URL is
    the test's only if it says so, and every worker logs to `worker-<n>.log` in `tmp_path`."""
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    base.update(DATABASE_URL=database_url(), GATEWAY_ACCESS_LOG_LEVEL="WARNING")
    workers = []
    try:
        for n in range(count):
            extra = env(n) if callable(env) else env or {}
            workers.append(Worker({**base, **extra}, tmp_path / f"worker-{n}.log"))
        for worker in workers:
            worker.wait_ready()
        yield workers
    finally:
        for worker in workers:
            worker.stop()
