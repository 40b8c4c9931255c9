"""Behind a PgBouncer in transaction mode with the default settings (issue 35): worker processes
whose every database connection goes through a real pgbouncer take concurrent charged requests
on one wallet; every answer is a 200, every request is in the ledger once and the wallet holds
exactly the ledger's sum. A transaction pooler hands each transaction whichever server
connection is free, so a statement prepared on one is unknown on the next (docs/decisions/
database.md). PostgreSQL only."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.db.models import Sum

from core import pgpool
from licensing.ledger.actions import transaction_record
from licensing.ledger.budget import budget_check_async
from licensing.models import Transaction, Wallet
from tests.ledger_helpers import budget_for, entry_for
from tests.pgbouncer import pgbouncer_or_skip
from tests.processes import database_url, running_workers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]  # pgbouncer, workers

BODY = {"model": "text-embedding-3-small", "input": "a few words", "encoding_format": "float"}
REQUESTS = 48


@pytest.fixture
def bouncer():
    server = pgbouncer_or_skip(pool_size=3)  # fewer server connections than clients: shared
    try:
        yield server
    finally:
        server.stop()


def test_concurrent_charges_behind_pgbouncer(bouncer, catalog, make_license, make_key, tmp_path):
    license = make_license(name="pooled", limit=10**9)
    headers = {"Authorization": f"Bearer {make_key(license)}"}
    # Nothing but the database's address differs from a direct connection: the defaults.
    env = {"DATABASE_URL": bouncer.url(database_url())}
    with running_workers(2, tmp_path, env) as workers:
        clients = [httpx.Client(base_url=w.url, timeout=30) for w in workers]
        try:
            with ThreadPoolExecutor(12) as pool:
                answers = list(
                    pool.map(
                        lambda n: clients[n % 2].post("/v1/embeddings", headers=headers, json=BODY),
                        range(REQUESTS),
                    )
                )
        finally:
            for client in clients:
                client.close()
    statuses = [r.status_code for r in answers]
    assert statuses == [200] * REQUESTS, sorted(set(statuses))
    rows = Transaction.objects.filter(license=license)
    assert rows.count() == REQUESTS
    assert set(rows.values_list("request_id", flat=True)) == {
        r.headers["X-Request-Id"] for r in answers
    }
    billed = sum(r.json()["usage"]["credits_used"] for r in answers)
    assert billed > 0
    assert rows.aggregate(total=Sum("credits"))["total"] == billed
    assert Wallet.objects.get(license=license).spent == billed


def test_budget_reads_and_charges_in_process_behind_pgbouncer(hot_path_via_pgbouncer, make_license):
    """The hot path's two statements, many times over few server connections: with the
    default (auto) the pool's connections through the pooler prepare nothing, never an error."""
    license = make_license(name="pooled", limit=10**9)
    config = budget_for(license).config

    async def one(n: int) -> int | None:
        state = await budget_check_async(license_id=license.id, config=config, holder="key:1")
        return await transaction_record(entry=entry_for(license, f"req-{n}", 3), budget=state)

    async def run() -> list[int | None]:
        try:
            answers = []
            for first in range(0, 60, 12):  # rounds of 12 at once: batches and single reads
                answers += await asyncio.gather(*(one(n) for n in range(first, first + 12)))
            return answers
        finally:
            await pgpool.close_all()

    remaining = asyncio.run(run())
    assert Transaction.objects.filter(license=license).count() == 60
    assert Wallet.objects.get(license=license).spent == 180
    assert min(r for r in remaining if r is not None) == 10**9 - 180


def test_auto_prepares_only_on_a_connection_that_reaches_postgresql(hot_path_via_pgbouncer):
    """GATEWAY_PG_PREPARE_THRESHOLD=auto decides per connection, before its first statement:
    through the pgbouncer none prepares (a lost statement, or another client's statement of
    the same name run in its place, cannot happen), and the pooler is never seen to lose one;
    straight to PostgreSQL the connection prepares (core.pgpool._configure)."""
    import psycopg
    from django.db import connection

    server = connection.settings_dict
    straight = {"host": server["HOST"] or "127.0.0.1", "port": int(server["PORT"] or 5432)}

    async def run() -> tuple[bool, bool, object]:
        try:
            async with (await pgpool.pool()).connection() as conn:
                pooled = conn.prepare_threshold
            kwargs = pgpool._connect_kwargs()
            through = await psycopg.AsyncConnection.connect(**kwargs)
            direct = await psycopg.AsyncConnection.connect(**{**kwargs, **straight})
            try:
                return (
                    await pgpool.reaches_the_server(through),
                    await pgpool.reaches_the_server(direct),
                    pooled,
                )
            finally:
                await through.close()
                await direct.close()
        finally:
            await pgpool.close_all()

    through_pgbouncer, to_postgresql, pooled_threshold = asyncio.run(run())
    assert (through_pgbouncer, to_postgresql) == (False, True)
    assert pooled_threshold is None
    assert pgpool._pooler_seen is False
