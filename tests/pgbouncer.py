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
