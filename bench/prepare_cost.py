"""What server-side prepared statements save on the hot path's SQL (issue 35's default).

    .venv/bin/python bench/prepare_cost.py [--rounds 4] [--requests 3000]

Each measurement runs in a process of its own on a throwaway PostgreSQL database (needs
PostgreSQL on 127.0.0.1:5432, trust auth), with `GATEWAY_PG_PREPARE_THRESHOLD` set to `2` (the
old default) or `none` (the default since issue 35) and one connection in the hot path's pool:
`requests` times, one after the other, what a charged request sends over that pool, the budget
read of a known wallet and the ledger commit of a batch of one (`licensing.ledger.budget`,
`licensing.ledger.store`). It prints, per request, the wall time, the CPU of the Python process
and the CPU of the PostgreSQL backend serving the pool's connection (from /proc), as medians of
interleaved rounds with their ranges."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"
MODES = ("2", "none")


def _backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) of a local PostgreSQL backend."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(requests: int) -> dict:
    import asyncio
    import time

    from bench.ledger_rows import bench_license

    license, config = bench_license()
    from core import pgpool
    from licensing.ledger.budget import budget_check, budget_check_async
    from licensing.ledger.record import LedgerEntry
    from licensing.ledger.store import Pending, commit_batch_async

    budget = budget_check(license_id=license.id, config=config, holder="key:1")

    def entry(n: int) -> LedgerEntry:
        return LedgerEntry(
            request_id=uuid.uuid4().hex,
            license_id=license.id,
            api_key_id=None,
            end_user_id=None,
            service="embeddings",
            requested_model="text-embedding-3-small",
            billed_model="text-embedding-3-small",
            provider="direct",
            connection="default",
            status_code=200,
            credits=1,
            prompt_tokens=5,
            total_tokens=5,
        )

    async def one(n: int) -> None:
        state = await budget_check_async(license_id=license.id, config=config, holder="key:1")
        batch = [Pending(entry=entry(n), budget=state, future=None, wallet_id=budget.wallet_id)]
        await commit_batch_async(batch)

    async def run() -> dict:
        for n in range(200):  # warm-up: the statements prepared (or not), the pool open
            await one(n)
        pool = await pgpool.pool()
        async with pool.connection() as conn:
            backend = conn.info.backend_pid
        wall, cpu, server = time.perf_counter(), time.process_time(), _backend_cpu(backend)
        for n in range(requests):
            await one(n)
        result = {
            "wall": (time.perf_counter() - wall) / requests * 1e6,
            "cpu": (time.process_time() - cpu) / requests * 1e6,
            "backend": (_backend_cpu(backend) - server) / requests * 1e6,
        }
        await pgpool.close_all()
        return result

    return asyncio.run(run())


def _child(mode: str, requests: int) -> dict:
    db = f"gw_bench_prepare_{uuid.uuid4().hex[:8]}"
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", f"CREATE DATABASE {db}"],
                   check=True)  # fmt: skip
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{db}",
        "GATEWAY_PG_PREPARE_THRESHOLD": mode,
        "GATEWAY_PG_POOL_SIZE": "1",
        "PYTHONPATH": str(ROOT),
    }
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(requests)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=600,
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc",
                        f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"], check=False)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--child", type=int)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    rows: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for n in range(args.rounds):
        order = MODES if n % 2 == 0 else MODES[::-1]
        for mode in order:
            rows[mode].append(_child(mode, args.requests))
            print(f"round {n + 1}, threshold {mode}: {rows[mode][-1]}", flush=True)
    print(f"\nbudget read + ledger commit, {args.requests} one after the other, µs per request,")
    print(f"medians of {args.rounds} rounds (min..max)")
    print(f"{'threshold':<10} {'wall':>22} {'python cpu':>22} {'backend cpu':>22}")
    for mode, found in rows.items():
        cells = []
        for what in ("wall", "cpu", "backend"):
            values = [r[what] for r in found]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}..{max(values):.0f})")
        print(f"{mode:<10} " + " ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
