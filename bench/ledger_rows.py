"""Ledger rows per second through the group commit, now and at an earlier commit.

    .venv/bin/python bench/ledger_rows.py [--compare REF] [--rounds 3] [--seconds 5]
                                          [--concurrency 64]

Each measurement runs in a process of its own on a throwaway PostgreSQL database: `concurrency`
coroutines on one event loop each write ledger entries (a charge to a limited pooled wallet, the
way the pipeline writes a 200) through `licensing.ledger.actions.transaction_record` for
`seconds`, after a warm-up. It prints rows per second and checks the ledger (rows written = rows
counted, wallet = sum of credits). With `--compare REF` the tree at REF (e.g. the commit before
the ledger gained its review columns and the live feed) is extracted to a temporary folder and
measured the same way, in interleaved rounds; medians and ranges are shown. Needs PostgreSQL on
127.0.0.1:5432."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG = "postgres://postgres@127.0.0.1:5432"


def bench_license():
    """Django set up on the (throwaway) database, migrated, and a license with a limited
    daily budget: (the license, its BudgetConfig). Also bench/prepare_cost.py's start; kept in
    this file, which is copied alone into the trees it measures."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from licensing.access.services import license_create
    from licensing.ledger.budget import BudgetConfig

    license = license_create(name="bench", limit=10**15, period="daily")
    config = BudgetConfig(
        unit=license.budget_unit,
        strategy=license.budget_strategy,
        period=license.budget_period,
        limit=license.budget_limit,
    )
    return license, config


def measure(seconds: float, concurrency: int) -> dict:
    """Runs inside the measured tree (its modules first on sys.path)."""
    import asyncio
    import time

    license, config = bench_license()
    from django.db import connection

    from licensing.ledger.actions import transaction_record
    from licensing.ledger.budget import budget_check
    from licensing.ledger.record import LedgerEntry
    from licensing.models import Transaction, Wallet

    fields = LedgerEntry.__dataclass_fields__
    extra = {}
    if "upstream_id" in fields:  # the review columns, as the pipeline fills them for a 200
        extra = {"upstream_id": "chatcmpl-" + "x" * 29, "license_name": "bench"}
        extra["institution_id"] = license.institution_id
    connection.close()

    def entry() -> LedgerEntry:
        return LedgerEntry(
            request_id=uuid.uuid4().hex,
            license_id=license.id,
            api_key_id=None,
            end_user_id=None,
            service="chat_completions",
            requested_model="gpt-4o-mini",
            billed_model="gpt-4o-mini",
            provider="direct",
            connection="default",
            status_code=200,
            credits=7,
            prompt_tokens=12,
            completion_tokens=30,
            total_tokens=42,
            metadata={"course": "CS101"},
            latency_ms=3,
            **extra,
        )

    async def run() -> dict:
        from core.db import run_db

        budget = await run_db(budget_check, license_id=license.id, config=config, holder="key:1")
        count = 0
        stop = False

        async def worker():
            nonlocal count
            while not stop:
                await transaction_record(entry=entry(), budget=budget)
                count += 1

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await asyncio.sleep(1.0)  # warm-up: pools open, statements prepared
        start_count, start = count, time.perf_counter()
        cpu = time.process_time()
        await asyncio.sleep(seconds)
        rows, elapsed = count - start_count, time.perf_counter() - start
        cpu = time.process_time() - cpu
        stop = True
        await asyncio.gather(*tasks)
        return {"rows_per_s": rows / elapsed, "cpu_us_per_row": cpu / rows * 1e6, "total": count}

    result = asyncio.run(run())
    written = Transaction.objects.count()
    spent = Wallet.objects.get(license=license).spent
    result["ledger_exact"] = written == result["total"] and spent == 7 * written
    return result


def _child(tree: Path, seconds: float, concurrency: int) -> dict:
    """One measurement in a fresh process and database, with `tree` first on sys.path."""
    import psycopg

    name = f"bench_ledger_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{name}",
        "PYTHONPATH": str(tree),
        "GATEWAY_LEDGER_SPOOL_DIR": tempfile.mkdtemp(prefix="bench-spool-"),
    }
    code = (
        f"import json, sys; sys.path.insert(0, {str(tree)!r}); "
        "from bench_ledger_measure import measure; "
        f"print(json.dumps(measure({seconds!r}, {concurrency!r})))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        with psycopg.connect(PG + "/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _extract(ref: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench-ledger-ref-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def _with_measure(tree: Path) -> Path:
    """The measuring function as a module of its own in the tree (the same code for both)."""
    source = Path(__file__).read_text()
    (tree / "bench_ledger_measure.py").write_text(source)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", metavar="REF", help="also measure the tree at this git ref")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()

    trees = {"now": _with_measure(Path(tempfile.mkdtemp(prefix="bench-ledger-now-")))}
    subprocess.run(["cp", "-r", *map(str, _sources()), str(trees["now"])], check=True)
    _with_measure(trees["now"])
    if args.compare:
        trees[args.compare] = _with_measure(_extract(args.compare))
    results: dict[str, list[dict]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        for name, tree in trees.items():
            result = _child(tree, args.seconds, args.concurrency)
            results[name].append(result)
            print(
                f"round {round_ + 1} {name:>10}: {result['rows_per_s']:8.0f} rows/s, "
                f"{result['cpu_us_per_row']:6.0f} µs CPU/row, exact={result['ledger_exact']}",
                flush=True,
            )
    print(f"\nledger rows/s, {args.concurrency} writers, {args.seconds:g} s x {args.rounds}:")
    for name, runs in results.items():
        rates = [r["rows_per_s"] for r in runs]
        cpu = [r["cpu_us_per_row"] for r in runs]
        print(
            f"  {name:>10}: median {statistics.median(rates):8.0f} rows/s "
            f"(range {min(rates):.0f}-{max(rates):.0f}), "
            f"CPU {statistics.median(cpu):.0f} µs/row, "
            f"ledger exact: {all(r['ledger_exact'] for r in runs)}"
        )


def _sources() -> list[Path]:
    names = ("core", "gateway_site", "catalog", "licensing", "inference", "fake_upstreams")
    return [ROOT / name for name in (*names, "manage.py", "docs")]


if __name__ == "__main__":
    main()
