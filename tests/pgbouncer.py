"""A real PgBouncer (Debian's package) in transaction pooling mode in front of the test database,
for the tests that check the gateway works behind a transaction pooler (docs/deployment.md,
"PgBouncer"; docs/decisions/database.md).

`PgBouncer(host=, port=, user=)` starts one on a free loopback port with its own configuration,
auth file, log and socket directory in a temporary directory; `url(database_url)` rewrites a
database URL to go through it; `stop()` ends it. `pgbouncer_or_skip` skips the test when the
binary is missing (.ci/run installs it) or the database is not PostgreSQL.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.processes import free_port

# Debian's package puts the binary in /usr/sbin, not on every user's PATH.
CANDIDATES = ("pgbouncer", "/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer")


def pgbouncer_binary() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class PgBouncer:
    """One pgbouncer process, `pool_mode = transaction`, trust auth (the test server's own)."""

    def __init__(self, *, host: str, port: int, user: str, pool_size: int = 20):
        binary = pgbouncer_binary()
        assert binary, "pgbouncer is not installed"
        # Its own directory in the system's temporary one, not pytest's (which, as root, is
        # closed to the unprivileged user pgbouncer runs as).
        self.workdir = workdir = Path(tempfile.mkdtemp(prefix="gw-pgbouncer-"))
        self.port = free_port()
        self.log = workdir / "pgbouncer.log"
        (workdir / "users.txt").write_text(f'"{user}" ""\n')
        config = workdir / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir = {workdir}\n"
            "auth_type = trust\n"
            f"auth_file = {workdir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 2000\n"
            # Django and psycopg set these at connect: let them through.
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.log}\n"
            "log_connections = 0\nlog_disconnections = 0\n"
        )
        command = [binary, str(config)]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root
            user_name = _unprivileged_user()
            for path in (workdir, *workdir.iterdir()):
                shutil.chown(path, user=user_name)
            command = [binary, "-u", user_name, str(config)]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                _, err = self.proc.communicate()
                log = self.log.read_text() if self.log.exists() else ""
                raise RuntimeError(f"pgbouncer exited: {err.decode()} {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def url(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by this pgbouncer's."""
        parts = urlsplit(database_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("no unprivileged user to run pgbouncer as")


def pgbouncer_or_skip(pool_size: int = 20) -> PgBouncer:
    """A pgbouncer in front of the test database, or the test skipped (with its reason)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections: nothing to pool on SQLite")
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (.ci/run installs Debian's package)")
    s = connection.settings_dict
    return PgBouncer(
        host=s["HOST"] or "127.0.0.1",
        port=int(s["PORT"] or 5432),
        user=s["USER"],
        pool_size=pool_size,
    )


# --- fixtures (a plugin of tests/conftest.py) ---------------------------------------------------


@pytest.fixture(scope="session")
def pgbouncer_server(django_db_setup, django_db_blocker):
    """One pgbouncer for the session (started by the first test that asks), few server
    connections so that the hot path's client connections share them."""
    with django_db_blocker.unblock():
        server = pgbouncer_or_skip(pool_size=2)
    yield server
    server.stop()


@pytest.fixture
def hot_path_via_pgbouncer(pgbouncer_server, monkeypatch):
    """The hot path's pool (the budget read, the group commit: core.pgpool) of the
    pools opened during the test connects through the pgbouncer, with the default settings."""
    from core import pgpool

    connect_kwargs = pgpool._connect_kwargs

    def through_pgbouncer() -> dict:
        return {**connect_kwargs(), "host": "127.0.0.1", "port": pgbouncer_server.port}

    monkeypatch.setattr(pgpool, "_connect_kwargs", through_pgbouncer)
    monkeypatch.setattr(pgpool, "_pooler_seen", False)  # restored after the test
    return pgbouncer_server


@pytest.fixture(params=["direct", pytest.param("pgbouncer", marks=pytest.mark.slow)])
def db_route(request):
    """Parametrize a test of the hot path's SQL: straight to PostgreSQL, then through a
    PgBouncer in transaction mode (skipped on SQLite)."""
    if request.param == "pgbouncer":
        request.getfixturevalue("hot_path_via_pgbouncer")
    return request.param
