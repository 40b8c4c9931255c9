"""The gateway behind a real PgBouncer in transaction mode, with its default settings: N
concurrent charged requests at once (issue 35: 500), counted by status, and the ledger and the
wallet checked against the answers.

    .venv/bin/python bench/pgbouncer_load.py [--requests 500] [--pool-size 4] [--tree PATH]

`--tree` serves the gateway of another checkout (a worktree of an older revision: the "before"
figure), with this checkout's PgBouncer helper (tests/pgbouncer.py). Each run makes and drops its
own database; gunicorn with 2 workers as docs/deployment.md serves it; the upstream is the
shipped simulator. Prints the statuses, the ledger's rows and credits, the wallet's spent, and
the ERROR/WARNING lines of the gateway's log by message.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from run import PG, PY, UPSTREAM_KEY, Processes, ensure_postgres, free_port, pg_admin  # noqa: E402

from tests.pgbouncer import PgBouncer  # noqa: E402

BODY = {"model": "text-embedding-3-small", "input": "a few words", "encoding_format": "float"}


def manage(tree: Path, env: dict, *args: str) -> str:
    import subprocess

    done = subprocess.run(
        [PY, "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


async def fire(url: str, key: str, requests: int) -> list[httpx.Response | str]:
    limits = httpx.Limits(max_connections=requests, max_keepalive_connections=requests)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        for _ in range(20):  # warm-up, one after the other
            await client.post(url, json=BODY, headers=headers)

        async def one():
            try:
                return await client.post(url, json=BODY, headers=headers)
            except httpx.HTTPError as exc:
                return type(exc).__name__

        return await asyncio.gather(*(one() for _ in range(requests)))


def log_lines(path: Path) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("level") in ("ERROR", "WARNING"):
            seen[f"{record['level']} {str(record.get('message'))[:90]}"] += 1
    return seen


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--pool-size", type=int, default=4, help="PgBouncer's server connections")
    parser.add_argument("--tree", type=Path, default=HERE.parent)
    args = parser.parse_args()
    tree = args.tree.resolve()
    ensure_postgres()
    name = f"gw_pgb_{uuid.uuid4().hex[:8]}"
    pg_admin(f"CREATE DATABASE {name}")
    direct = f"{PG}/{name}"
    logdir = Path(tempfile.mkdtemp(prefix="gw-pgb-"))
    procs = Processes(logdir)
    bouncer = PgBouncer(host="127.0.0.1", port=5432, user="postgres", pool_size=args.pool_size)
    try:
        env = {**os.environ, "DATABASE_URL": direct, "PYTHONPATH": str(tree)}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        manage(tree, env, "migrate", "--no-input")
        manage(tree, env, "load_catalog")
        manage(tree, env, "create_license", "bench", "--limit", "1000000000000")
        key = manage(tree, env, "create_api_key", "bench").splitlines()[-1]
        upstream = free_port()
        fake = [PY, "-m", "fake_upstreams", "openai", "--port", str(upstream)]
        procs.start("upstream", [*fake, "--api-key", UPSTREAM_KEY], env, cwd=tree)
        base = f"http://127.0.0.1:{upstream}/v1"
        manage(tree, env, "configure_connection", "direct", "--base-url", base,
               "--api-key", UPSTREAM_KEY)  # fmt: skip
        port = free_port()
        spool = logdir / "spool"
        served = {
            **env,
            "DATABASE_URL": bouncer.url(direct),
            "GATEWAY_ACCESS_LOG_LEVEL": "WARNING",
            "GATEWAY_LEDGER_SPOOL_DIR": str(spool),
        }
        conf = ["-c", "python:gateway_site.gunicorn_conf", "--bind", f"127.0.0.1:{port}"]
        procs.start("gateway", [PY, "-m", "gunicorn", *conf, "--workers", "2",
                                "gateway_site.asgi:application"], served, cwd=tree)  # fmt: skip
        url = f"http://127.0.0.1:{port}/v1/embeddings"
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(procs.log_tail("gateway"))
            time.sleep(0.3)
        answers = asyncio.run(fire(url, key, args.requests))
        statuses = collections.Counter(
            a.status_code if isinstance(a, httpx.Response) else a for a in answers
        )
        answered = sum(
            a.json()["usage"]["credits_used"]
            for a in answers
            if isinstance(a, httpx.Response) and a.status_code == 200
        )
        time.sleep(3)  # the last group commit
        with psycopg.connect(direct) as conn:
            rows, credits = conn.execute(
                "SELECT count(*), coalesce(sum(credits), 0) FROM licensing_transaction"
            ).fetchone()
            spent = conn.execute("SELECT coalesce(sum(spent), 0) FROM licensing_wallet").fetchone()
        print(f"tree {tree} ({args.requests} at once, PgBouncer pool_size {args.pool_size})")
        print("statuses:", dict(sorted(statuses.items(), key=str)))
        print(f"ledger rows {rows} (20 warm-up + {args.requests}), credits {credits}, "
              f"wallet spent {spent[0]}; the 200s of the burst said {answered}")  # fmt: skip
        spooled = list(spool.glob("*")) if spool.exists() else []
        print(f"spool files (batches not written to the database): {len(spooled)}")
        for line, count in log_lines(logdir / "gateway.log").most_common(8):
            print(f"  {count} x {line}")
        return 0
    finally:
        procs.stop_all()
        bouncer.stop()
        pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    raise SystemExit(main())
