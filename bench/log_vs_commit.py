"""What a local append-only log would save over PostgreSQL's commit (issue 40, item 2).

    .venv/bin/python bench/log_vs_commit.py [--rounds 5] [--ops 2000]

The acknowledgement point of a charged request is its ledger row's durable commit. The local
log of issue 40 would acknowledge once the row is appended to a file and fdatasync'ed instead,
and apply it to PostgreSQL later. This measures, on this machine's disk, in interleaved rounds,
per operation: `log`, a spool-sized line appended and fdatasync'ed (what the log's
acknowledgement waits for); `commit`, a row of the same size inserted and committed over one
psycopg connection (what the acknowledgement waits for today, its round trip included);
`no-flush`, the same insert committed with `synchronous_commit = off` (the round trip and the
work without the WAL flush: the part of `commit` a log cannot save, since the applier still
sends it). Wall time p50 and p99, and the client process's CPU. Needs PostgreSQL on
127.0.0.1:5432 with trust auth; makes and drops a throwaway database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid

import psycopg

PG = "postgres://postgres@127.0.0.1:5432"
LINE = (
    b'{"request_id": "9f0c3c4e6b1d4a7f8e2d5c6b7a8f9e0d", "credits": 100, "wallet": 1, '
    b'"tokens": 350}\n'
)


def _log(ops: int, folder: str) -> tuple[list[float], float]:
    path = os.path.join(folder, "log.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times, cpu = [], time.process_time()
    try:
        for _ in range(ops):
            started = time.perf_counter()
            os.write(fd, LINE)
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return times, time.process_time() - cpu


def _commit(ops: int, conn, flush: bool) -> tuple[list[float], float]:
    sql = "INSERT INTO probe (request_id, body) VALUES (%s, %s)"
    if not flush:  # the hold statement's way: off for this transaction only
        sql = (
            "WITH sc AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)) "
            "INSERT INTO probe (request_id, body) SELECT %s, %s FROM sc"
        )
    times, cpu = [], time.process_time()
    for _ in range(ops):
        started = time.perf_counter()
        conn.execute(sql, [uuid.uuid4().hex, LINE.decode()])
        times.append(time.perf_counter() - started)
    return times, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    name = f"gw_probe_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    results: dict[str, list[tuple[float, float, float]]] = {}
    try:
        with psycopg.connect(f"{PG}/{name}", autocommit=True, prepare_threshold=0) as conn:
            conn.execute(
                "CREATE TABLE probe (id bigserial PRIMARY KEY, request_id text, body text)"
            )
            with tempfile.TemporaryDirectory(dir="var" if os.path.isdir("var") else None) as d:
                for _ in range(args.rounds):
                    for label, run in (
                        ("log", lambda: _log(args.ops, d)),
                        ("commit", lambda: _commit(args.ops, conn, True)),
                        ("no-flush", lambda: _commit(args.ops, conn, False)),
                    ):
                        times, cpu = run()
                        times.sort()
                        results.setdefault(label, []).append(
                            (
                                statistics.median(times) * 1e6,
                                times[int(len(times) * 0.99)] * 1e6,
                                cpu / args.ops * 1e6,
                            )
                        )
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
    print(f"{args.ops} operations per round, medians of {args.rounds} rounds, µs per operation")
    print(f"{'operation':10} {'p50':>8} {'p99':>8} {'client CPU':>11}")
    for label, rows in results.items():
        p50, p99, cpu = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"{label:10} {p50:8.0f} {p99:8.0f} {cpu:11.1f}")


if __name__ == "__main__":
    main()
