"""The hot path's own PostgreSQL access: an async psycopg pool, no thread hop.

The ORM stays for everything else; the few statements every request runs (the budget read, the
group commit of charges and ledger rows) go through this pool from the event loop. On SQLite
(the embedded default) `available()` is False and callers use the ORM on a worker thread.

One pool per event loop (a uvicorn worker has one; tests may run several), built lazily from
Django's own connection settings, so it follows the test database and DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings
from django.db import connections
from psycopg import errors

from core.config import get_config

_pools: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
logger = logging.getLogger("gateway")


def available() -> bool:
    # From the settings, not `connections["default"]`: in a request's context that builds a
    # DatabaseWrapper of its own (asgiref's context-local storage) for one attribute.
    return "postgresql" in settings.DATABASES["default"]["ENGINE"]


def _connect_kwargs() -> dict:
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)  # Django's is a sync cursor class
    # The same few statements run thousands of times a second: the server keeps them prepared
    # (half the backend's CPU of a request, bench/prepare_cost.py), unless a transaction pooler
    # shows it cannot (`fetch`; docs/decisions/database.md).
    params["prepare_threshold"] = None if _pooler_seen else get_config().pg_prepare_threshold
    params["autocommit"] = True
    return params


# Errors of a server connection that does not know a statement psycopg prepared on another one
# (a PgBouncer in transaction mode, older than 1.21 or without max_prepared_statements, lends each
# transaction whichever server connection is free): the statement never ran.
LOST_PREPARED = (errors.InvalidSqlStatementName, errors.DuplicatePreparedStatement)
_pooler_seen = False  # GATEWAY_PG_PREPARE_THRESHOLD=auto, and a pooler lost a statement


# Where the server says this connection arrived: its own address and port (NULL on a Unix
# socket), its port setting and socket folders. A statement of PostgreSQL's, run unprepared.
_ENDPOINT_SQL = (
    "SELECT host(inet_server_addr()), inet_server_port(), current_setting('port'), "
    "current_setting('unix_socket_directories')"
)


async def _configure(conn) -> None:
    """GATEWAY_PG_PREPARE_THRESHOLD=auto: a new connection prepares only if it reaches
    PostgreSQL itself. Behind a pooler in transaction mode a statement prepared on one server
    connection is unknown on the next, or worse, another client's statement of the same name
    (psycopg's `_pg3_0`) runs in its place; so it is decided before the first statement, not
    after an error. One query per new connection (the pool keeps them)."""
    if conn.prepare_threshold is None or not get_config().pg_prepare_auto:
        return
    if not await reaches_the_server(conn):
        conn.prepare_threshold = None


async def reaches_the_server(conn) -> bool:
    """Whether the server's side of this connection is where we connected: the same address
    and port over TCP, the same port and socket folder over a Unix socket. A pooler (or any
    proxy: a NAT'd port, a load balancer) in between is seen as a mismatch, and a mismatch only
    costs the preparing (docs/decisions/database.md)."""
    cursor = await conn.execute(_ENDPOINT_SQL, prepare=False)
    address, port, port_setting, folders = await cursor.fetchone()
    info = conn.info
    if info.host.startswith("/"):
        listed = {folder.strip() for folder in (folders or "").split(",")}
        return address is None and str(info.port) == port_setting and info.host in listed
    return address is not None and address == info.hostaddr and port == info.port


async def fetch(sql: str, params) -> list[tuple]:
    """Run one statement over this loop's pool; its rows. With GATEWAY_PG_PREPARE_THRESHOLD=auto
    (the default) a connection through a pooler never prepares (`_configure`); should a pooler
    still lose a statement (one the check could not see), preparing is turned off for the
    process and the statement, which had not run, runs again unprepared."""
    try:
        return await _fetch(sql, params)
    except LOST_PREPARED as exc:
        if not get_config().pg_prepare_auto:
            raise
        _stop_preparing(exc)
    return await _fetch(sql, params)


async def _fetch(sql: str, params) -> list[tuple]:
    async with (await pool()).connection() as conn:
        if _pooler_seen:
            conn.prepare_threshold = None  # a connection opened before the pooler was seen
        cursor = await conn.execute(sql, params)
        return await cursor.fetchall()


def _stop_preparing(exc: Exception) -> None:
    global _pooler_seen
    if not _pooler_seen:
        _pooler_seen = True
        logger.warning(
            "a prepared statement was lost (%s): behind a transaction pooler, statements are no "
            "longer prepared by this process (set GATEWAY_PG_PREPARE_THRESHOLD=none to skip this)",
            exc,
        )


def pool_size() -> int:
    return get_config().GATEWAY_PG_POOL_SIZE


# Seconds a pool keeps retrying a connection that cannot be made (backing off 1, 2, 4 s...)
# before it gives up; the next checkout then tries at once. psycopg_pool's default (300 s) backs
# off so far that after a 20 s outage the pool came back 9.7 s after the database (1.5 s with 5).
RECONNECT_TIMEOUT = 5.0


def pool_timeout() -> float:
    """Seconds a statement waits for a connection. The batching tasks hold one connection each,
    so a wait only happens when none can be made (the database is down): the request then gets
    its retryable 503 (a charge goes to the spool) instead of hanging until the database is back."""
    return get_config().GATEWAY_PG_POOL_TIMEOUT


async def pool():
    """This loop's pool, opened on first use."""
    from psycopg_pool import AsyncConnectionPool

    loop = asyncio.get_running_loop()
    found = _pools.get(id(loop))
    if found is not None and found[0] is loop:
        return found[1]
    created = AsyncConnectionPool(
        kwargs=_connect_kwargs(),
        min_size=1,
        max_size=pool_size(),
        open=False,
        timeout=pool_timeout(),
        reconnect_timeout=RECONNECT_TIMEOUT,
        configure=_configure,
        # No health check per checkout (a round trip each): a connection that breaks raises
        # OperationalError to its user and the pool discards it when it comes back.
    )
    _pools[id(loop)] = (loop, created)
    await created.open(wait=False)
    return created


async def close_all() -> None:
    """Close this loop's pool (tests, shutdown)."""
    loop = asyncio.get_running_loop()
    found = _pools.pop(id(loop), None)
    if found is not None:
        await found[1].close()


def per_loop(factory):
    """A function returning this event loop's own instance of `factory()` (an object holding
    futures or a pool belongs to one loop)."""
    instances: dict[int, tuple] = {}

    def get():
        loop = asyncio.get_running_loop()
        found = instances.get(id(loop))
        if found is None or found[0] is not loop:
            found = instances[id(loop)] = (loop, factory())
        return found[1]

    return get
