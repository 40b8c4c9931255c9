"""Money under load: N concurrent charged requests against worker processes on PostgreSQL, then
the books checked to the micro-credit.

    .venv/bin/python bench/money_load.py [--requests 2000] [--concurrency 200] [--workers 2]
        [--redis redis://127.0.0.1:6379/0]

Creates a throwaway PostgreSQL database (127.0.0.1:5432, dropped at the end), sets the gateway
up on it (migrate, the default catalog with `direct` pointed at the fake OpenAI upstream, two
licenses with a budget and a key each), starts `--workers` uvicorn processes with
tests/processes.py's `running_workers`, and sends `--requests` POST /v1/embeddings (inputs of
varied length, so charges differ) from `--concurrency` clients spread over the workers and both
keys. Then: provider calls (what the fake upstream received) = ledger rows = answers; every
answered request's row has the credits its answer reported; each wallet = the sum of its
license's rows; the PostgreSQL connections each worker held stay within the documented bound.
Prints the figures; exits 1 if anything is off.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"
UPSTREAM_KEY = "sk-upstream-test"


class PeakSampler(threading.Thread):
    """The most PostgreSQL connections each worker (by its application_name) held at once."""

    def __init__(self, database: str):
        super().__init__(daemon=True)
        self.database = database
        self.peak: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            while not self.done.is_set():
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity "
                    "WHERE datname = %s AND application_name LIKE %s GROUP BY 1",
                    [self.database, f"{self.database}-w%"],
                ).fetchall()
                for app, n in rows:
                    self.peak[app] = max(self.peak.get(app, 0), n)
                self.done.wait(0.01)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join()
        return dict(sorted(self.peak.items()))


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


async def fire(urls: list[str], keys: list[str], requests: int, concurrency: int) -> list:
    """(status, request id, key index, credits reported) per request."""
    import httpx

    results: list[tuple[int, str, int, int | None]] = []
    queue = iter(range(requests))

    async def client(n: int) -> None:
        async with httpx.AsyncClient(base_url=urls[n % len(urls)], timeout=120) as http:
            for i in queue:
                k = i % len(keys)
                words = 1 + (i % 37) * 40  # 1 to 1,441 tokens: charges that differ
                body = {"model": "text-embedding-3-large", "input": "money " * words}
                r = await http.post(
                    "/v1/embeddings", json=body, headers={"Authorization": f"Bearer {keys[k]}"}
                )
                credits = r.json()["usage"]["credits_used"] if r.status_code == 200 else None
                results.append((r.status_code, r.headers.get("x-request-id", ""), k, credits))

    await asyncio.gather(*(client(n) for n in range(concurrency)))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--redis", metavar="URL", help="REDIS_URL for the workers (cache invalidation, fair use)"
    )
    args = parser.parse_args()

    name = f"bench_money_{uuid.uuid4().hex[:8]}"
    pg_admin(f"CREATE DATABASE {name}")
    os.environ["DATABASE_URL"] = f"{PG}/{name}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    sys.path.insert(0, str(ROOT))
    try:
        return run(args, name)
    finally:
        from django.db import connections

        connections.close_all()
        for conn in connections.all():
            if getattr(conn, "pool", None) is not None:
                conn.close_pool()
        pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run(args, name: str) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    from catalog.services import catalog_load_defaults, connection_configure
    from fake_upstreams import OpenAIFake, serve
    from licensing.access.credentials import api_key_create
    from licensing.access.services import license_create
    from licensing.models import Transaction, Wallet
    from tests.processes import running_workers

    call_command("migrate", verbosity=0)
    catalog_load_defaults()
    licenses = [license_create(name=f"money-{n}", limit=10**12) for n in range(2)]
    keys = [api_key_create(license=lic)[1] for lic in licenses]
    bound = int(os.environ.get("GATEWAY_PG_POOL_SIZE", "8")) + int(
        os.environ.get("GATEWAY_PG_ORM_POOL_SIZE", "6")
    )

    with serve(OpenAIFake(api_key=UPSTREAM_KEY)) as upstream, tempfile.TemporaryDirectory() as tmp:
        connection_configure(
            provider_slug="direct", base_url=upstream.base_url, api_key=UPSTREAM_KEY
        )

        def env(n: int) -> dict:
            redis = {"REDIS_URL": args.redis} if args.redis else {}
            return {
                "PGAPPNAME": f"{name}-w{n}",
                "GATEWAY_LEDGER_SPOOL_DIR": f"{tmp}/spool-{n}",
                **redis,
            }

        with running_workers(args.workers, Path(tmp), env=env) as workers:
            upstream.reset()
            sampler = PeakSampler(name)
            sampler.start()
            started = time.monotonic()
            results = asyncio.run(
                fire([w.url for w in workers], keys, args.requests, args.concurrency)
            )
            seconds = time.monotonic() - started
            held = sampler.stop()

    calls = sum(r.path == "/v1/embeddings" for r in upstream.requests)
    statuses = Counter(status for status, _, _, _ in results)
    answered = {rid: (k, credits) for status, rid, k, credits in results if status == 200}
    rows = {t.request_id: t for t in Transaction.objects.all()}
    wrong = [
        rid
        for rid, (_, credits) in answered.items()
        if rid not in rows or rows[rid].credits != credits or rows[rid].status_code != 200
    ]
    wallets = []
    for k, lic in enumerate(licenses):
        spent = sum(w.spent for w in Wallet.objects.filter(license=lic))
        ledger = sum(t.credits for t in rows.values() if t.license_id == lic.id)
        reported = sum(c for kk, c in answered.values() if kk == k)
        wallets.append((lic.name, spent, ledger, reported))

    print(
        f"{args.requests} requests, {args.concurrency} clients, {args.workers} workers"
        f"{' + Redis' if args.redis else ''}, PostgreSQL: {seconds:.1f} s "
        f"({args.requests / seconds:.0f} req/s)"
    )
    print(f"answers by status: {dict(sorted(statuses.items()))}")
    print(f"provider calls {calls}, ledger rows {len(rows)}, answers 200 {len(answered)}")
    print(f"answers whose row is missing or differs: {len(wrong)}")
    for lic_name, spent, ledger, reported in wallets:
        print(
            f"wallet {lic_name}: spent {spent}, ledger sum {ledger}, answers reported {reported}"
            " (micro-credits)"
        )
    print(f"PostgreSQL connections per worker, peak during the load: {held} (bound {bound})")
    exact = (
        set(statuses) == {200}
        and calls == len(rows) == len(answered) == args.requests
        and not wrong
        and all(spent == ledger == reported for _, spent, ledger, reported in wallets)
        and all(n <= bound for n in held.values())
    )
    print("exact" if exact else "NOT EXACT")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
