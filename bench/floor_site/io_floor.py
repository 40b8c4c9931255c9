"""The I/O floor: the bare endpoint plus only the I/O the contract itself asks of a request.

A charged request must read its wallet before the provider call (decisions.md: refused before
the call when the wallet has nothing left), call the provider, and commit its charge and ledger
row durably before it answers (issue 12: nothing acknowledged before it is durable). These
endpoints do exactly that and nothing else (no authentication, policy, routing, validation
beyond the schema, or billing): one primary-key read over an async psycopg pool, the upstream
call over one aiohttp session, and one durable statement (a wallet UPDATE and a ledger INSERT).
The held endpoints (/v1/io/held/...) do the same with issue 40's budget hold in place of the
read: a conditional wallet UPDATE and a hold row before the call, released by the commit.
Served behind the gateway's own ASGI handler (io_asgi.py), what the gateway adds beyond them is
its own cost; what they add over the upstream alone is the price of the framework and the
contract's I/O on the machine (bench/README, "The I/O floor").

Set by bench/run.py: FLOOR_DATABASE_URL (its tables made by `create_tables`), FLOOR_UPSTREAM
(the fake upstream's /v1 base URL) and FLOOR_UPSTREAM_KEY.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import aiohttp
import orjson
import psycopg
from django.http import HttpResponse, StreamingHttpResponse
from psycopg_pool import AsyncConnectionPool

from core import pgpool

READ = "SELECT spent FROM floor_io_wallet WHERE id = 1"
# The held variant (issue 40's budgets that hold, done plainly): the read becomes a hold, admitted
# while spend and holds stay under the limit and committed without waiting for the WAL flush (a
# hold lost with the server is a hold released); the commit releases it with the charge.
HOLD = (
    "WITH sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
    "w AS (UPDATE floor_io_wallet SET reserved = reserved + %s WHERE id = 1 "
    "AND spent + reserved < %s AND (SELECT count(*) FROM sc) = 1 RETURNING id) "
    "INSERT INTO floor_io_hold (request_id, amount, expires_at) "
    "SELECT %s, %s, now() + interval '15 minutes' FROM w RETURNING amount"
)
COMMIT_HELD = (
    "WITH h AS (DELETE FROM floor_io_hold WHERE request_id = %s RETURNING amount), "
    "w AS (UPDATE floor_io_wallet SET spent = spent + %s, "
    "reserved = reserved - coalesce((SELECT sum(amount) FROM h), 0) WHERE id = 1 RETURNING spent), "
    "l AS (INSERT INTO floor_io_ledger (request_id, credits) VALUES (%s, %s)) "
    "SELECT spent FROM w"
)
LIMIT = 10**15  # never reached: the statement's check is made, nothing is refused
HOLD_AMOUNT = 5  # what an embeddings request of the bench's body is sure to cost
COMMIT = (
    "WITH w AS (UPDATE floor_io_wallet SET spent = spent + %s WHERE id = 1 RETURNING spent), "
    "l AS (INSERT INTO floor_io_ledger (request_id, credits) VALUES (%s, %s)) "
    "SELECT spent FROM w"
)
TABLES = (
    "CREATE TABLE IF NOT EXISTS floor_io_wallet (id int PRIMARY KEY, spent bigint NOT NULL)",
    "INSERT INTO floor_io_wallet VALUES (1, 0) ON CONFLICT DO NOTHING",
    "CREATE TABLE IF NOT EXISTS floor_io_ledger (id bigserial PRIMARY KEY, "
    "request_id text NOT NULL, credits bigint NOT NULL, created_at timestamptz DEFAULT now())",
    "ALTER TABLE floor_io_wallet ADD COLUMN IF NOT EXISTS reserved bigint NOT NULL DEFAULT 0",
    "CREATE TABLE IF NOT EXISTS floor_io_hold (id bigserial PRIMARY KEY, "
    "request_id text NOT NULL, amount bigint NOT NULL, expires_at timestamptz NOT NULL)",
    "CREATE INDEX IF NOT EXISTS floor_io_hold_request ON floor_io_hold (request_id)",
)


def create_tables(db_url: str) -> None:
    """Run once by the bench before the floor starts (its workers would race to create them)."""
    with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as conn:
        for statement in TABLES:
            conn.execute(statement)


class _Clients:
    """This event loop's pool and session, made on first use (as the gateway makes its own)."""

    def __init__(self):
        self.pool: AsyncConnectionPool | None = None
        self.session: aiohttp.ClientSession | None = None
        self.base = os.environ.get("FLOOR_UPSTREAM", "").rstrip("/")
        self.headers = {
            "Authorization": f"Bearer {os.environ.get('FLOOR_UPSTREAM_KEY', '')}",
            "Content-Type": "application/json",
        }

    async def ready(self) -> _Clients:
        if self.pool is None:
            kwargs = {"autocommit": True, "prepare_threshold": 2}
            url = os.environ["FLOOR_DATABASE_URL"]
            self.pool = AsyncConnectionPool(url, kwargs=kwargs, min_size=1, max_size=8, open=False)
            await self.pool.open(wait=False)
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
        return self

    async def read_wallet(self) -> int:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(READ)
            return (await cursor.fetchone())[0]

    async def commit(self, credits: int) -> int:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(COMMIT, [credits, uuid.uuid4().hex, credits])
            return (await cursor.fetchone())[0]

    async def hold(self, request_id: str) -> bool:
        async with self.pool.connection() as conn:
            params = [HOLD_AMOUNT, LIMIT, request_id, HOLD_AMOUNT]
            cursor = await conn.execute(HOLD, params)
            return await cursor.fetchone() is not None

    async def commit_held(self, request_id: str, credits: int) -> int:
        async with self.pool.connection() as conn:
            params = [request_id, credits, request_id, credits]
            cursor = await conn.execute(COMMIT_HELD, params)
            return (await cursor.fetchone())[0]

    async def admit(self, held: bool) -> str | None:
        """Before the call: the wallet read, or (`held`) the hold and its request id."""
        if not held:
            await self.read_wallet()
            return None
        request_id = uuid.uuid4().hex
        if not await self.hold(request_id):
            raise RuntimeError("the I/O floor's hold was refused (its limit is never reached)")
        return request_id

    async def settle(self, request_id: str | None, credits: int) -> int:
        if request_id is None:
            return await self.commit(credits)
        return await self.commit_held(request_id, credits)


_clients = pgpool.per_loop(_Clients)


async def clients() -> _Clients:
    return await _clients().ready()


async def embeddings(body: dict, held: bool = False) -> HttpResponse:
    io = await clients()
    request_id = await io.admit(held)
    url = f"{io.base}/embeddings"
    async with io.session.post(url, data=orjson.dumps(body), headers=io.headers) as answer:
        data = await answer.read()
    usage = orjson.loads(data).get("usage") or {}
    await io.settle(request_id, int(usage.get("total_tokens") or 0))
    return HttpResponse(data, content_type="application/json")


async def chat_stream(body: dict, held: bool = False) -> StreamingHttpResponse:
    """The upstream's events relayed as they come; the commit after the last one, in a task
    of its own (as the gateway writes a stream's row)."""
    io = await clients()
    request_id = await io.admit(held)
    body = {**body, "stream_options": {"include_usage": True}}
    url = f"{io.base}/chat/completions"
    answer = await io.session.post(url, data=orjson.dumps(body), headers=io.headers)

    async def relay():
        try:
            async for chunk in answer.content.iter_any():
                yield chunk
        finally:
            answer.release()
            task = asyncio.get_running_loop().create_task(io.settle(request_id, 1))
            _background.add(task)
            task.add_done_callback(_background.discard)

    return StreamingHttpResponse(relay(), content_type="text/event-stream")


_background: set[asyncio.Task] = set()
