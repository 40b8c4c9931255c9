"""How server commands spread kept-alive connections over their workers, and what they cost.

    .venv/bin/python bench/servers_ab.py [--rounds 4] [--servers gunicorn,uvicorn] [--seconds 10]

Each server (2 workers by default) serves the gateway on PostgreSQL against the fake upstream,
in interleaved rounds (the order turns each round: the machine may be shared). Under wrk at
`--connections` kept-alive connections it reports, per server: the share of the requests each
worker answered (from the workers' own metrics files, `gateway_http_responses` by pid), the
kept-alive connections each worker holds (from /proc, mid-window), the server's CPU per request
(master and workers), and the p50 at one connection (a delayed-ACK stall shows as ~40 ms).
`gunicorn` is the shipped path (`-c python:gateway_site.gunicorn_conf`); `uvicorn` is plain
`uvicorn --workers N`, for comparison; any other name is taken as a module run with uvicorn's
command line (`python -m MODULE app --workers N ...`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import run as bench
from prometheus_client.mmap_dict import MmapedDict


def command(server: str, port: int, workers: int) -> list[str]:
    if server == "gunicorn":
        return bench.server_cmd("gunicorn", bench.GATEWAY_APP, port, workers)
    module = "uvicorn" if server == "uvicorn" else server
    opts = ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    opts += ["--no-access-log", "--log-level", "warning"]
    return [bench.PY, "-m", module, bench.GATEWAY_APP, *opts]


def group(pgid: int) -> dict[int, float]:
    """pid -> CPU seconds of every process in the group."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            out[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def connections(pids: list[int], port: int) -> dict[int, int]:
    """pid -> established connections on `port` whose socket the process holds."""
    established = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[1].rsplit(":", 1)[1], 16) == port:
                established.add(f[9])
    out = {}
    for pid in pids:
        inodes = set()
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                target = os.readlink(fd.path)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
        out[pid] = len(inodes & established)
    return out


def answered(metrics_dir: Path) -> dict[int, float]:
    """pid -> /v1 answers counted by that worker so far."""
    out: dict[int, float] = {}
    for path in metrics_dir.glob("counter_*.db"):
        pid = int(path.stem.split("_")[1])
        for key, value, _ts, _pos in MmapedDict.read_all_values_from_file(str(path)):
            if key.startswith('["gateway_http_responses"') and "_created" not in key:
                out[pid] = out.get(pid, 0.0) + value
    return out


def measure(run: bench.Run, server: str, args, metrics_dir: Path) -> dict:
    port = bench.free_port()
    shutil.rmtree(metrics_dir, ignore_errors=True)
    env = {**run.env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    run.procs.start(server, command(server, port, args.workers), env)
    target = bench.Target(server, server, f"http://127.0.0.1:{port}/v1/embeddings", run.key)
    try:
        run.procs.wait_ready(target)
        bench.wrk_load(target, args.warmup, args.connections, 1)
        pgid = run.procs.procs[server].pid
        cpu0, count0 = group(pgid), answered(metrics_dir)
        held: dict[int, int] = {}

        def sample() -> None:
            time.sleep(args.seconds / 2)
            held.update(connections(list(group(pgid)), port))

        sampler = threading.Thread(target=sample)
        sampler.start()
        result = bench.wrk_load(target, args.seconds, args.connections, 1)
        sampler.join()
        cpu1, count1 = group(pgid), answered(metrics_dir)
        one = bench.wrk_load(target, args.seconds_one, 1, 1)
    finally:
        run.procs.stop(server)
    per_worker = {pid: count1[pid] - count0.get(pid, 0.0) for pid in count1}
    total = sum(per_worker.values()) or 1
    shares = sorted((100 * n / total for n in per_worker.values()), reverse=True)
    cpu = sum(cpu1[p] - cpu0.get(p, 0.0) for p in cpu1)
    return {
        "rps": result.rps,
        "cpu_ms": 1000 * cpu / max(result.ok, 1),
        "shares": shares + [0.0] * (args.workers - len(shares)),
        "held": sorted((n for n in held.values() if n), reverse=True),
        "p50_one": one.p50_ms,
        "p99": result.p99_ms,
        "errors": result.errors + result.non2xx + one.errors + one.non2xx,
    }


def spread(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}..{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="gunicorn,uvicorn")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--seconds-one", type=float, default=4)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--database", default=f"gw_servers_{uuid.uuid4().hex[:8]}")
    args = parser.parse_args()
    servers = args.servers.split(",")
    if not bench.find_wrk():
        parser.error("wrk is needed")
    bench.ensure_postgres()
    db_url = f"{bench.PG}/{args.database}"
    bench.pg_admin(f'CREATE DATABASE "{args.database}"')
    procs = bench.Processes(Path(tempfile.mkdtemp(prefix="gw-servers-")))
    results: dict[str, list[dict]] = {s: [] for s in servers}
    try:
        env = {**os.environ, "DATABASE_URL": db_url, "DEBUG": "false"}
        env["GATEWAY_ACCESS_LOG_LEVEL"] = "WARNING"
        upstream = bench.free_port()
        run = bench.Run(args, procs, env, db_url, "", "wrk", {"embeddings": upstream})
        fake = ["fake_upstreams", "openai", "--port", str(upstream)]
        procs.start("upstream", [bench.PY, "-m", *fake, "--api-key", bench.UPSTREAM_KEY], env)
        run.key = bench.set_up_gateway(env)
        bench.configure_upstream(env, upstream)
        for r in range(args.rounds):
            order = servers[r % len(servers) :] + servers[: r % len(servers)]
            for server in order:
                m = measure(run, server, args, procs.logdir / f"metrics-{server}")
                results[server].append(m)
                print(
                    f"round {r + 1} {server}: {m['rps']:.0f} req/s, {m['cpu_ms']:.2f} ms CPU/req,"
                    f" worker shares {[round(s) for s in m['shares']]} %, connections held "
                    f"{m['held']}, p50@1 {m['p50_one']:.2f} ms, errors {m['errors']}",
                    flush=True,
                )
    finally:
        procs.stop_all()
        shutil.rmtree(procs.logdir, ignore_errors=True)
        bench.pg_admin(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    load = os.getloadavg()
    print(
        f"\n{args.rounds} interleaved rounds, {args.workers} workers, {args.connections} "
        f"kept-alive connections (wrk), load average {load[0]:.2f}; median (min..max)"
    )
    print("| server | req/s | CPU ms/req | busiest worker's share % | p99 ms | p50 @1 ms |")
    print("|---|---|---|---|---|---|")
    for server, ms in results.items():
        print(
            f"| {server} | {spread([m['rps'] for m in ms], '.0f')} | "
            f"{spread([m['cpu_ms'] for m in ms])} | "
            f"{spread([m['shares'][0] for m in ms], '.0f')} | "
            f"{spread([m['p99'] for m in ms], '.1f')} | {spread([m['p50_one'] for m in ms])} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
