"""Throughput, latency and CPU of the gateway beside its framework's floor, the upstream alone
and the LiteLLM proxy.

    .venv/bin/python bench/run.py [--rounds 3] [--case embeddings|chat-stream|all] [--no-litellm]

Creates a throwaway PostgreSQL database and sets the gateway up on it, installs LiteLLM (pinned)
into a virtual environment of its own under var/ the first time, then runs each case on free
loopback ports with servers of its own:

- embeddings: POST /v1/embeddings at the gateway, the floor app (bench/floor_site), the fake
  OpenAI upstream (`python -m fake_upstreams openai`) and LiteLLM routed to that upstream,
  driven by wrk (or, without wrk, a Python load generator), at 32 connections and at one;
- chat-stream: streamed POST /v1/chat/completions at the gateway, the fake upstream
  (bench/upstream.py, 20 ms between events) and LiteLLM, driven by an asyncio + httpx load
  generator that times each stream's first event and its end.

Rounds interleave the targets (gateway, floor, upstream, litellm, then again); the tables show
medians and ranges over the rounds, then the issue-12 table with its ratios and targets. The
ledger is checked against the 200s the gateway answered. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import profile_buckets
import psycopg
import venv_tools

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PG = "postgres://postgres@127.0.0.1:5432"
UPSTREAM_KEY = "sk-bench"
BODY = json.dumps(
    {
        "model": "text-embedding-3-small",
        "input": "the quick brown fox",
        "dimensions": 64,
        "encoding_format": "float",
    }
)
SPY_RATE = 500  # py-spy samples a second, per process
DRAIN = 2.0  # seconds wrk keeps running after the window so in-flight requests complete
GATEWAY_APP = "gateway_site.asgi:application"
TRACED = "gateway-traced"  # --tracing: the same gateway with OpenTelemetry on
BEFORE = "gateway-before"  # --against REF: the gateway at that revision, beside this one
GATEWAYS = ("gateway", TRACED, BEFORE)  # the targets whose answers are ledger rows
# The floor plus the contract's own I/O: wallet read, upstream call, durable commit.
IO_FLOOR = "iofloor"
IO_FLOOR_TITLE = "I/O floor (floor + read, call, commit)"
# The same with issue 40's budget hold in place of the read (floor_site/io_floor.py, HOLD).
IO_HELD = "iofloor-held"
IO_HELD_TITLE = "I/O floor, held (hold, call, commit)"
CHAT_PROMPT = (
    "Explain in two short paragraphs how photosynthesis turns sunlight, water and carbon "
    "dioxide into sugar and oxygen inside green plant leaves."
)
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": CHAT_PROMPT}]}
CHAT_BODY = json.dumps({**CHAT, "stream": True})
# The gateway asks the upstream for usage (stream_options.include_usage): the direct request
# asks the same, so both sides stream the same events.
CHAT_BODY_DIRECT = json.dumps({**CHAT, "stream": True, "stream_options": {"include_usage": True}})
CHAT_EVENTS = 8  # the fake's stream for it: role, 4 content pieces, finish, usage, [DONE]
CHAT_SERVICE = "chat_completions"  # the ledger's service for /v1/chat/completions

# 1.106.2 installs here; 1.107.0 was reported compromised: never that one.
LITELLM_SPEC = "litellm[proxy]==1.106.2"
LITELLM_VENV = ROOT / "var" / "bench-litellm-venv"
LITELLM_KEY = "sk-litellm-bench"  # its master key

# Each connection stops sending when the window closes; the requests in flight then finish
# during the drain, so every request sent is answered and counted (the ledger check is exact).
WRK_SCRIPT = """
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long sec; long usec; } bench_timeval;
int gettimeofday(bench_timeval *tv, void *tz);
]]
local tv = ffi.new("bench_timeval")
local function now()
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.sec) + tonumber(tv.usec) / 1e6
end

wrk.method = "POST"
wrk.body = [==[%(body)s]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"

local stop_at
function init(args) stop_at = now() + tonumber(args[1]) end
function delay() if now() < stop_at then return 0 end return 3600000 end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH {\\"requests\\": %%d, \\"non2xx\\": %%d, \\"errors\\": %%d, "
    .. "\\"p50\\": %%d, \\"p99\\": %%d}\\n",
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass
class Target:
    name: str  # process label: gateway, floor, upstream, litellm
    title: str
    url: str
    key: str
    body: str = BODY
    stream: bool = False  # an SSE answer that must end with `data: [DONE]`

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"}


@dataclass
class Result:
    requests: int  # answered, any status
    non2xx: int
    errors: int  # socket errors and time-outs
    p50_ms: float
    p99_ms: float
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds in the window, by label

    @property
    def ok(self) -> int:
        return self.requests - self.non2xx

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def cpu_ms(self, label: str) -> float:
        return 1000 * self.cpu.get(label, 0.0) / max(self.requests, 1)


@dataclass
class StreamResult:
    ok: int  # streams answered 200 that ended with `data: [DONE]` and carried no error event
    failures: dict[str, int]  # the others, by kind
    ttfb: list[float]  # seconds to the first `data:` event, ok streams, sorted
    total: list[float]  # seconds to the end of the stream, ok streams, sorted
    bytes: int  # body bytes of the ok streams
    seconds: float  # from the first stream's start to the last one's end
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def bytes_per_stream(self) -> float:
        return self.bytes / max(self.ok, 1)

    def cpu_ms(self, label: str) -> float:
        return 1000 * self.cpu.get(label, 0.0) / max(self.ok, 1)


def percentile_ms(values: list[float], q: float) -> float:
    """The q-quantile of sorted seconds, in ms (nearest rank)."""
    return values[min(len(values) - 1, int(q * len(values)))] * 1e3 if values else 0.0


# --------------------------------------------------------------------------- load generators


def wrk_load(target: Target, seconds: float, connections: int, threads: int) -> Result:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT % {"body": target.body, "key": target.key})
    duration = f"{math.ceil(seconds + DRAIN)}s"  # wrk takes whole seconds; the window need not
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}", "--timeout", "10s"]
    try:
        out = subprocess.run(
            [*cmd, "-s", script.name, target.url, "--", str(seconds)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        ).stdout
    finally:
        os.unlink(script.name)
    line = next((x for x in out.splitlines() if x.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result:\n{out}")
    r = json.loads(line[6:])
    return Result(r["requests"], r["non2xx"], r["errors"], r["p50"] / 1e3, r["p99"] / 1e3, seconds)


async def python_load(target: Target, seconds: float, connections: int) -> Result:
    """The fallback: one task per connection, each stops sending when the window closes."""
    headers = target.headers
    latencies: list[float] = []
    counts = {"non2xx": 0, "errors": 0}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:
        stop_at = time.perf_counter() + seconds

        async def worker():
            while time.perf_counter() < stop_at:
                start = time.perf_counter()
                try:
                    r = await client.post(target.url, content=target.body, headers=headers)
                except httpx.HTTPError:
                    counts["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - start)
                counts["non2xx"] += not 200 <= r.status_code < 300

        await asyncio.gather(*(worker() for _ in range(connections)))
    latencies.sort()
    p50, p99 = percentile_ms(latencies, 0.5), percentile_ms(latencies, 0.99)
    return Result(len(latencies), counts["non2xx"], counts["errors"], p50, p99, seconds)


async def stream_load(
    target: Target, seconds: float, concurrency: int, stagger: float = 0.0
) -> StreamResult:
    """`concurrency` tasks, each opening one stream after the other until the window closes.

    The streams in flight when the window closes run to their end and count, so the elapsed
    time runs to the last stream's end. Task i starts `i * stagger / concurrency` seconds late:
    streams of the same length started together would stay in step and reach the server in
    bursts. (wrk cannot time a first byte: it sees a response only once it is complete.)
    """
    ttfb: list[float] = []
    total: list[float] = []
    failures: dict[str, int] = defaultdict(int)
    received = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one() -> None:
            nonlocal received
            stream = await read_stream(client, target)
            failure = stream.failure()
            if failure is not None:
                failures[failure] += 1
                return
            assert stream.first is not None  # no failure: the first event came
            ttfb.append(stream.first - stream.start)
            total.append(stream.end - stream.start)
            received += stream.size

        began = time.perf_counter()
        stop_at = began + seconds

        async def worker(offset: float) -> None:
            await asyncio.sleep(offset)
            while time.perf_counter() < stop_at:
                try:
                    await one()
                except httpx.HTTPError as exc:
                    failures[type(exc).__name__] += 1

        await asyncio.gather(*(worker(i * stagger / concurrency) for i in range(concurrency)))
        elapsed = time.perf_counter() - began
    ttfb.sort()
    total.sort()
    return StreamResult(len(ttfb), dict(failures), ttfb, total, received, elapsed)


@dataclass
class OneStream:
    """One streamed answer as the client saw it: when it started, when its first `data:`
    event and its last byte came, its size, and the end of it."""

    status: int
    start: float
    first: float | None  # None: no `data:` event
    end: float
    size: int
    error_event: bool  # a `data: {"error"` event came
    tail: bytes  # the last bytes received

    def failure(self) -> str | None:
        """What went wrong, as stream_load counts it; None for a complete stream."""
        if self.status != 200:
            return f"status {self.status}"
        if self.error_event:
            return "error event"
        if self.first is None or not self.tail.rstrip().endswith(b"data: [DONE]"):
            return "no data: [DONE]"
        return None


async def read_stream(client: httpx.AsyncClient, target: Target) -> OneStream:
    """One stream, read to its end."""
    start = time.perf_counter()
    first = None
    head = tail = b""  # head: until the first event; tail: the last bytes seen
    size, error_event = 0, False
    request = client.stream("POST", target.url, content=target.body, headers=target.headers)
    async with request as r:
        async for chunk in r.aiter_raw():
            size += len(chunk)
            if first is None:
                head += chunk
                if b"data:" in head:
                    first = time.perf_counter()
            window = tail + chunk  # events may straddle two chunks
            error_event = error_event or b'data: {"error"' in window
            tail = window[-64:]
    end = time.perf_counter()
    return OneStream(r.status_code, start, first, end, size, error_event, tail)


def find_wrk() -> str | None:
    if not shutil.which("wrk") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk not found: trying apt-get install -y wrk", flush=True)
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
            try:
                subprocess.run(cmd, capture_output=True, timeout=180, check=True)
            except (subprocess.SubprocessError, OSError):
                break
    return shutil.which("wrk")


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profiled_cmd(app: str, port: int) -> list[str]:
    """One uvicorn process for cProfile (which sees only the process it starts, not gunicorn's
    workers): the worker's own server, uvicorn with the workers' settings, without a master."""
    opts = ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"]
    return ["-m", "uvicorn", app, *opts]


SERVERS = ("gunicorn", "granian")


def server_cmd(server: str, app: str, port: int, workers: int) -> list[str]:
    """`app` served by `server` on 127.0.0.1:`port`: gunicorn as docs/deployment.md serves the
    gateway, or granian (measured beside it: bench/results/servers.md)."""
    if server == "granian":
        # Its HTTP and sockets are Rust (TCP_NODELAY set there); the event loop is uvloop, like
        # the uvicorn workers' (uvicorn's `auto` takes it).
        opts = ["--interface", "asgi", "--workers", str(workers), "--loop", "uvloop"]
        opts += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        return [PY, "-m", "granian", *opts, app]
    conf = ["-c", "python:gateway_site.gunicorn_conf", "--log-level", "warning"]
    bind = ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
    return [PY, "-m", "gunicorn", *conf, *bind, app]


class Processes:
    """Servers, each in its own process group (uvicorn's workers included), logs in `logdir`."""

    def __init__(self, logdir: Path):
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: list[str], env: dict, cwd: Path = ROOT) -> None:
        with open(self.logdir / f"{name}.log", "ab") as log:  # a name may be started again
            self.procs[name] = subprocess.Popen(
                cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, target: Target, timeout: float = 60) -> None:
        """Until the target answers the benchmark's request with a 200 (a stream: to its end)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.procs[target.name].poll() is not None:
                raise RuntimeError(f"{target.name} exited:\n{self.log_tail(target.name)}")
            try:
                r = httpx.post(target.url, content=target.body, headers=target.headers, timeout=5)
                if r.status_code == 200:
                    if target.stream and not r.text.rstrip().endswith("data: [DONE]"):
                        raise RuntimeError(f"{target.name}: stream without [DONE]:\n{r.text}")
                    return
                last = f"{r.status_code} {r.text[:300]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target.name} not ready: {last}\n{self.log_tail(target.name)}")
            time.sleep(0.2)

    def cpu(self, db_url: str) -> dict[int, tuple[str, float]]:
        """pid -> (label, CPU seconds so far) for our servers and the benchmark DB's backends."""
        with psycopg.connect(db_url, autocommit=True, connect_timeout=5) as conn:
            backends = {
                pid
                for (pid,) in conn.execute(
                    "SELECT pid FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            }
        groups = {proc.pid: name for name, proc in self.procs.items()}
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry.name)
            label = "postgres" if pid in backends else groups.get(int(fields[2]))
            if label:
                out[pid] = (label, (int(fields[11]) + int(fields[12])) / tick)
        return out


def cpu_delta(before: dict, after: dict) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for pid, (label, seconds) in after.items():
        total[label] += seconds - before.get(pid, (label, 0.0))[1]
    return dict(total)


# --------------------------------------------------------------------------- database


def pg_admin(sql: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def ensure_postgres() -> None:
    try:
        pg_admin("SELECT 1")
    except psycopg.OperationalError:
        print("PostgreSQL is down: trying pg_ctlcluster 15 main start", flush=True)
        cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "start"]
        subprocess.run(cmd, timeout=60, check=False)
        pg_admin("SELECT 1")


def manage(env: dict, *args: str) -> str:
    r = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    if r.returncode:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout.strip()


def set_up_gateway(env: dict) -> str:
    """The README's operator commands (the connection is set per case); returns the API key."""
    manage(env, "migrate", "--no-input")
    manage(env, "load_catalog")
    manage(env, "create_license", "bench", "--limit", "1000000000000")
    return manage(env, "create_api_key", "bench").splitlines()[-1]


def configure_upstream(env: dict, port: int) -> None:
    """Point the `direct` provider's default connection at the fake upstream on `port`."""
    url = f"http://127.0.0.1:{port}/v1"
    manage(env, "configure_connection", "direct", "--base-url", url, "--api-key", UPSTREAM_KEY)


@dataclass
class Ledger:
    rows: dict[tuple[str, int], int]  # (service, status) -> rows
    credits: int  # sum over the rows
    spent: int  # sum over the wallets

    def of(self, service: str) -> dict[int, int]:
        return {status: n for (svc, status), n in self.rows.items() if svc == service}


def read_ledger(db_url: str) -> Ledger:
    with psycopg.connect(db_url, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT service, status_code, count(*) FROM licensing_transaction GROUP BY 1, 2"
        )
        by_status = {(service, status): n for service, status, n in rows.fetchall()}
        credits = conn.execute("SELECT coalesce(sum(credits), 0) FROM licensing_transaction")
        spent = conn.execute("SELECT coalesce(sum(spent), 0) FROM licensing_wallet")
        return Ledger(by_status, int(credits.fetchone()[0]), int(spent.fetchone()[0]))


def wait_for_ledger(db_url: str, service: str, rows: int, timeout: float = 10) -> None:
    """A stream's row is written by a task of its own just after the stream ends: wait until
    `service` has `rows` rows (any status), or `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while sum(read_ledger(db_url).of(service).values()) < rows and time.monotonic() < deadline:
        time.sleep(0.2)


# --------------------------------------------------------------------------- LiteLLM


def install_litellm() -> tuple[Path | None, str]:
    """LiteLLM's CLI in a virtual environment of its own, made once; (None, why) on failure."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if not (LITELLM_VENV / "bench-installed").exists() or not exe.exists():
        print(f"LiteLLM: installing {LITELLM_SPEC} into {LITELLM_VENV} (once, reused afterwards)")
    return venv_tools.install(LITELLM_SPEC, LITELLM_VENV, "litellm", timeout=1500)


def litellm_config(path: Path, embeddings_port: int, chat_port: int) -> None:
    """Both benchmark models routed to the fake upstreams; JSON is YAML, which LiteLLM reads."""

    def route(model: str, port: int) -> dict:
        params = {"model": f"openai/{model}", "api_key": UPSTREAM_KEY}
        return {"model_name": model, "litellm_params": {**params, "api_base": _base(port)}}

    config = {
        "model_list": [
            route("text-embedding-3-small", embeddings_port),
            route(CHAT["model"], chat_port),
        ],
        "general_settings": {"master_key": LITELLM_KEY},
    }
    path.write_text(json.dumps(config, indent=2))


def _base(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1"


def litellm_env(env: dict) -> dict:
    """Offline, no database: without DATABASE_URL LiteLLM runs without Prisma; the rest keeps
    it from fetching its cost map, tokenizers or anything else at start-up."""
    out = {k: v for k, v in env.items() if k != "DATABASE_URL" and not k.startswith("GATEWAY_")}
    out |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_MODE": "PRODUCTION",  # no .env loading
        "DISABLE_ADMIN_UI": "True",
        "NO_DOCS": "True",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return out


def start_litellm(run: Run, exe: Path, port: int) -> None:
    config = run.procs.logdir / "litellm.yaml"
    litellm_config(config, run.upstream_port["embeddings"], run.upstream_port["chat-stream"])
    cmd = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--num_workers", str(run.args.workers), "--timeout_worker_healthcheck", "120"]
    run.procs.start("litellm", cmd, litellm_env(run.env), cwd=run.procs.logdir)


# --------------------------------------------------------------------------- the run


def profile_gateway(procs: Processes, env: dict, key: str, load, seconds: float) -> str:
    """A 1-worker gateway under cProfile (event-loop thread only), loaded for `seconds`."""
    port, out = free_port(), procs.logdir / "gateway.prof"
    cmd = [PY, "-m", "cProfile", "-o", str(out), *profiled_cmd(GATEWAY_APP, port)]
    procs.start("profiled", cmd, env)
    target = Target("profiled", "", f"http://127.0.0.1:{port}/v1/embeddings", key)
    procs.wait_ready(target)
    load(target, seconds)
    procs.stop("profiled")  # SIGINT: uvicorn returns, cProfile writes its file
    text = io.StringIO()
    stats = pstats.Stats(str(out), stream=text)
    totals: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, tottime, _, _) in stats.stats.items():
        totals[_origin(filename, function)] += tottime
    text.write("own time by package (C functions by name):\n")
    for origin, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:20]:
        text.write(f"{seconds:8.3f}s  {origin}\n")
    stats.strip_dirs().sort_stats("tottime").print_stats(25)
    return text.getvalue()


def spy_profile(run: Run, loads: list[tuple[str, Callable, list]]) -> tuple[str, int, int]:
    """py-spy on the measured gateway's processes under each (title, load, the rounds' results)
    in turn (bench/profile_buckets.py); (the tables, its 200s, its failed streams meanwhile).
    The shares are scaled to the CPU per request of the rounds: each sample pauses the process,
    which costs CPU of its own (at one connection, nearly half again)."""
    exe, why = venv_tools.install(
        profile_buckets.PY_SPY_SPEC, ROOT / "var" / "bench-py-spy", "py-spy", timeout=600
    )
    if exe is None:
        return f"py-spy profile skipped: {why}", 0, 0
    pids = group_pids(run.procs.procs["gateway"].pid)
    texts, ok, failed = [], 0, 0
    for title, load, rounds in loads:
        spies = profile_buckets.start(exe, pids, run.args.seconds + 1, SPY_RATE, run.procs.logdir)
        time.sleep(0.5)  # attached before the load starts
        result = run.measure(load)
        samples, errors = profile_buckets.collect(spies)
        ok += result.ok
        failed += getattr(result, "failed", 0)
        cpu = statistics.median(r.cpu_ms("gateway") for r in rounds)
        title = (
            f"py-spy, gateway ({len(pids)} processes), {title}: {result.ok} answered in "
            f"{run.args.seconds:g}s, {SPY_RATE} Hz GIL-held samples; CPU ms per answer: "
            f"{cpu:.3f} in the rounds (the column's scale), {result.cpu_ms('gateway'):.3f} "
            "while profiled"
        )
        texts.append(profile_buckets.table(samples, cpu, title))
        if errors:
            texts.append(f"py-spy errors: {errors}")
    return "\n\n".join(texts), ok, failed


def group_pids(pgid: int) -> list[int]:
    """The processes of one server's process group (its supervisor and workers)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry.name))
    return sorted(pids)


def _origin(filename: str, function: str) -> str:
    if filename == "~":
        return function
    parts = Path(filename).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    if Path(filename).is_relative_to(ROOT):
        return Path(filename).relative_to(ROOT).parts[0]
    return f"stdlib {Path(filename).stem}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("embeddings", "chat-stream", "all"), default="all")
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds over the targets (medians)"
    )
    parser.add_argument("--seconds", type=float, default=10, help="measured window per target")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of load before each")
    parser.add_argument(
        "--workers", type=int, default=2, help="workers of each server (gateway, floor, LiteLLM)"
    )
    parser.add_argument(
        "--litellm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also measure the LiteLLM proxy ({LITELLM_SPEC}, installed into {LITELLM_VENV} "
        "on first use); --no-litellm: skip it",
    )
    parser.add_argument(
        "--server",
        choices=SERVERS,
        default="gunicorn",
        help="what serves gateway and floor: gunicorn with uvicorn workers "
        "(gateway_site.gunicorn_conf, the way the gateway is served: docs/deployment.md) or "
        "granian, for comparison",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="gateway with GATEWAY_ACCESS_LOG_LEVEL=INFO"
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also the gateway at this git revision (a temporary worktree, the same database), "
        "interleaved in the same rounds: the before and after of a change in one run",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="embeddings: also a second gateway with OpenTelemetry tracing on, exporting to a "
        "sink collector (bench/otlp_sink.py), interleaved with the first",
    )
    embeddings = parser.add_argument_group("embeddings")
    embeddings.add_argument("--connections", type=int, default=32)
    embeddings.add_argument(
        "--seconds-one", type=float, default=5, help="window of the one-connection run"
    )
    embeddings.add_argument("--wrk-threads", type=int, default=1)
    embeddings.add_argument("--python-load", action="store_true", help="do not use wrk")
    embeddings.add_argument(
        "--profile", action="store_true", help="then profile a 1-worker gateway (cProfile)"
    )
    embeddings.add_argument(
        "--py-spy",
        action="store_true",
        help="after the rounds, py-spy the measured gateway's workers under load, at "
        "--connections and at one, samples in issue 12's buckets (bench/profile_buckets.py)",
    )
    chat = parser.add_argument_group("chat-stream")
    chat.add_argument("--streams", type=int, default=16, help="concurrent streams")
    chat.add_argument(
        "--chunk-delay", type=float, default=0.02, help="upstream seconds between two events"
    )
    chat.add_argument(
        "--stagger",
        type=float,
        help="spread the streams' first starts over this many seconds "
        "(default: one upstream stream's length, 7 x chunk delay)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


@dataclass
class Run:
    args: argparse.Namespace
    procs: Processes
    env: dict
    db_url: str
    key: str
    wrk: str | None
    upstream_port: dict[str, int]  # by case: each case's fake upstream
    litellm_port: int | None = None  # None: LiteLLM is not measured
    litellm_note: str = ""  # why not
    sink_port: int | None = None  # --tracing: the stand-in collector
    sink_stats: dict = field(default_factory=dict)  # what it received
    before: Path | None = None  # --against: the worktree of that revision

    def server(self, name: str, app: str, port: int, app_dir: str = "", env=None) -> None:
        args = self.args
        cmd = server_cmd(args.server, app, port, args.workers)
        env = env or self.env
        if app_dir:  # the floor's package (every server imports from sys.path)
            env = {
                **env,
                "PYTHONPATH": os.pathsep.join(filter(None, [app_dir, env.get("PYTHONPATH")])),
            }
        self.procs.start(name, cmd, env, cwd=Path(app_dir) if name == BEFORE else ROOT)

    def gateway_before(self, port: int) -> None:
        """`--against`: the gateway of the worktree, its code first on the path (its var/ too)."""
        assert self.before is not None
        self.server(BEFORE, GATEWAY_APP, port, str(self.before))

    def load(self, target: Target, seconds: float, connections: int | None = None) -> Result:
        connections = connections or self.args.connections
        if self.wrk:
            threads = min(self.args.wrk_threads, connections)
            return wrk_load(target, seconds, connections, threads)
        return asyncio.run(python_load(target, seconds, connections))

    def measure(self, load):
        """`load()`'s result with the CPU each server spent meanwhile."""
        before = self.procs.cpu(self.db_url)
        result = load()
        result.cpu = cpu_delta(before, self.procs.cpu(self.db_url))
        return result

    def wait_litellm(self, target: Target) -> bool:
        """LiteLLM answers, or is dropped from the run (its log tail printed); never fatal."""
        try:
            self.procs.wait_ready(target, timeout=300)  # 2 workers import LiteLLM: slow
            return True
        except RuntimeError as exc:
            self.litellm_note = f"did not answer: {str(exc)[:2000]}"
            print(f"LiteLLM {self.litellm_note}\nthe LiteLLM rows are skipped", flush=True)
            self.litellm_port = None
            if "litellm" in self.procs.procs:
                self.procs.stop("litellm")
            return False


@dataclass
class Embeddings:
    targets: list[Target]
    c32: dict[str, list[Result]]  # by target, one per round, `--connections` connections
    c1: dict[str, list[Result]]  # the same, one connection
    gateway_ok: int  # the gateway's 200s: readiness, warm-up, measured
    ledger: Ledger  # read before the profiled gateway adds rows of its own
    profile: str


@dataclass
class ChatStream:
    targets: list[Target]
    results: dict[str, list[StreamResult]]  # by target, one per round
    gateway_ok: int  # the gateway's complete streams: readiness, warm-up, measured
    stagger: float
    profile: str = ""  # --py-spy


def run_embeddings(run: Run) -> Embeddings:
    args, procs = run.args, run.procs
    targets = start_embeddings(run)
    c32, c1, gateway_ok = embeddings_rounds(run, targets)
    if args.py_spy:
        profile_text, ok = spy_embeddings(run, targets[0], c32, c1)
        gateway_ok += ok
    procs.stop("gateway")  # every ledger write has finished
    if BEFORE in procs.procs:
        procs.stop(BEFORE)
    if args.tracing:
        procs.stop(TRACED)  # its last spans exported on the way out
        run.sink_stats = sink_stats(run.sink_port)
        procs.stop("collector")
    procs.stop("floor")
    procs.stop(IO_FLOOR)
    procs.stop(IO_HELD)
    ledger = read_ledger(run.db_url)
    profile = (
        profile_gateway(procs, run.env, run.key, run.load, args.seconds) if args.profile else ""
    )
    if args.py_spy:
        cprofile = "cProfile, 1-worker gateway (event-loop thread):\n" + profile if profile else ""
        profile = "\n" + profile_text + ("\n\n" + cprofile if cprofile else "")
    procs.stop("upstream")
    return Embeddings(targets, dict(c32), dict(c1), gateway_ok, ledger, profile)


def start_embeddings(run: Run) -> list[Target]:
    """The embeddings case's fake upstream, gateway and floors, answering: its targets."""
    args, procs = run.args, run.procs
    names = ("gateway", "floor", IO_FLOOR, IO_HELD, TRACED, BEFORE)
    port = {name: free_port() for name in names}
    port["upstream"] = run.upstream_port["embeddings"]
    url = {name: f"http://127.0.0.1:{p}/v1/embeddings" for name, p in port.items()}
    url[IO_FLOOR] = f"http://127.0.0.1:{port[IO_FLOOR]}/v1/io/embeddings"
    url[IO_HELD] = f"http://127.0.0.1:{port[IO_HELD]}/v1/io/held/embeddings"
    configure_upstream(run.env, port["upstream"])
    targets = [
        Target("gateway", "gateway (auth, budget, policy, ledger)", url["gateway"], run.key),
        Target("floor", "floor (bare django-ninja)", url["floor"], "unused"),
        Target(IO_FLOOR, IO_FLOOR_TITLE, url[IO_FLOOR], "unused"),
        Target(IO_HELD, IO_HELD_TITLE, url[IO_HELD], "unused"),
        Target("upstream", "upstream (fake, direct)", url["upstream"], UPSTREAM_KEY),
    ]
    fake = ["fake_upstreams", "openai", "--port", str(port["upstream"]), "--api-key", UPSTREAM_KEY]
    procs.start("upstream", [PY, "-m", *fake], run.env)
    run.server("gateway", GATEWAY_APP, port["gateway"])
    if run.before is not None:
        title = f"gateway at {args.against}"
        targets.insert(1, Target(BEFORE, title, url[BEFORE], run.key))
        run.gateway_before(port[BEFORE])
    if args.tracing:
        title = "gateway, tracing on (OTLP to a sink)"
        targets.insert(1, Target(TRACED, title, url[TRACED], run.key))
        start_traced_gateway(run, port[TRACED])
    run.server("floor", "floor_site.asgi:application", port["floor"], str(ROOT / "bench"))
    start_io_floor(run, port[IO_FLOOR], port["upstream"])
    start_io_floor(run, port[IO_HELD], port["upstream"], IO_HELD)
    for target in targets:
        procs.wait_ready(target)
    if run.litellm_port:
        litellm_url = f"http://127.0.0.1:{run.litellm_port}/v1/embeddings"
        target = Target("litellm", "LiteLLM proxy (no DB)", litellm_url, LITELLM_KEY)
        if run.wait_litellm(target):
            targets.append(target)
    return targets


def embeddings_rounds(
    run: Run, targets: list[Target]
) -> tuple[defaultdict[str, list[Result]], defaultdict[str, list[Result]], int]:
    """The interleaved rounds: by target, the results at `--connections` connections and at
    one; and the gateway's 200s so far (readiness, warm-up, measured)."""
    args = run.args
    c32: defaultdict[str, list[Result]] = defaultdict(list)
    c1: defaultdict[str, list[Result]] = defaultdict(list)
    # The readiness requests: one per gateway.
    gateway_ok = sum(t.name in GATEWAYS for t in targets)
    for n in range(1, args.rounds + 1):
        for target in targets:
            print(
                f"embeddings, round {n}/{args.rounds}, {target.name}: warm-up {args.warmup:g}s, "
                f"{args.seconds:g}s at {args.connections} connections, "
                f"{args.seconds_one:g}s at one",
                flush=True,
            )
            warm = run.load(target, args.warmup)
            many = run.measure(lambda t=target: run.load(t, args.seconds))
            one = run.measure(lambda t=target: run.load(t, args.seconds_one, 1))
            c32[target.name].append(many)
            c1[target.name].append(one)
            if target.name in GATEWAYS:
                gateway_ok += warm.ok + many.ok + one.ok
    return c32, c1, gateway_ok


def spy_embeddings(
    run: Run, gateway: Target, c32: dict[str, list[Result]], c1: dict[str, list[Result]]
) -> tuple[str, int]:
    """`--py-spy`: the gateway sampled under both loads; the profile and the gateway's 200s."""
    args = run.args
    loads = [
        (
            f"embeddings at {args.connections} connections",
            lambda: run.load(gateway, args.seconds),
            c32["gateway"],
        ),
        (
            "embeddings at one connection",
            lambda: run.load(gateway, args.seconds, 1),
            c1["gateway"],
        ),
    ]
    profile_text, ok, _ = spy_profile(run, loads)
    return profile_text, ok


def create_io_floor_tables(db_url: str) -> None:
    if str(ROOT / "bench") not in sys.path:  # run as a script it is sys.path[0] already
        sys.path.insert(0, str(ROOT / "bench"))
    from floor_site.io_floor import create_tables

    create_tables(db_url)


def start_io_floor(run: Run, port: int, upstream_port: int, name: str = IO_FLOOR) -> None:
    """The floor's app again, for its I/O floor endpoints (floor_site/io_floor.py), behind the
    gateway's own ASGI handler (floor_site/io_asgi.py), on the benchmark's database and the
    case's upstream: a process of its own (`name`: IO_FLOOR or IO_HELD), for its CPU figure."""
    create_io_floor_tables(run.db_url)
    env = {**run.env, "FLOOR_DATABASE_URL": run.db_url, "FLOOR_UPSTREAM_KEY": UPSTREAM_KEY}
    env["FLOOR_UPSTREAM"] = _base(upstream_port)
    run.server(name, "floor_site.io_asgi:application", port, str(ROOT / "bench"), env=env)


def start_traced_gateway(run: Run, port: int) -> None:
    """The gateway with OTEL_EXPORTER_OTLP_ENDPOINT set, exporting to bench/otlp_sink.py."""
    run.sink_port = free_port()
    sink = [PY, str(ROOT / "bench" / "otlp_sink.py"), str(run.sink_port)]
    run.procs.start("collector", sink, run.env)
    env = {**run.env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{run.sink_port}"}
    run.server(TRACED, GATEWAY_APP, port, env=env)


def sink_stats(port: int) -> dict:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()
    except httpx.HTTPError as exc:
        return {"error": repr(exc)}


def run_chat_stream(run: Run) -> ChatStream:
    args, procs = run.args, run.procs
    port = {"gateway": free_port(), "upstream": run.upstream_port["chat-stream"]}
    port[IO_FLOOR], port[IO_HELD], port[BEFORE] = free_port(), free_port(), free_port()
    url = {name: f"http://127.0.0.1:{p}/v1/chat/completions" for name, p in port.items()}
    url[IO_FLOOR] = f"http://127.0.0.1:{port[IO_FLOOR]}/v1/io/chat/completions"
    url[IO_HELD] = f"http://127.0.0.1:{port[IO_HELD]}/v1/io/held/chat/completions"
    configure_upstream(run.env, port["upstream"])  # the new gateway process reads it afresh
    targets = [
        Target("gateway", "gateway", url["gateway"], run.key, CHAT_BODY, stream=True),
        Target(IO_FLOOR, "I/O floor", url[IO_FLOOR], "unused", CHAT_BODY, stream=True),
        Target(IO_HELD, "I/O floor, held", url[IO_HELD], "unused", CHAT_BODY, stream=True),
        Target(
            "upstream",
            "upstream (fake, direct)",
            url["upstream"],
            UPSTREAM_KEY,
            body=CHAT_BODY_DIRECT,
            stream=True,
        ),
    ]
    fake = ["bench.upstream", "--port", str(port["upstream"]), "--api-key", UPSTREAM_KEY]
    procs.start("upstream", [PY, "-m", *fake, "--chunk-delay", str(args.chunk_delay)], run.env)
    run.server("gateway", GATEWAY_APP, port["gateway"])
    if run.before is not None:
        title = f"gateway at {args.against}"
        targets.insert(1, Target(BEFORE, title, url[BEFORE], run.key, CHAT_BODY, stream=True))
        run.gateway_before(port[BEFORE])
    start_io_floor(run, port[IO_FLOOR], port["upstream"])
    start_io_floor(run, port[IO_HELD], port["upstream"], IO_HELD)
    for target in targets:
        procs.wait_ready(target)
    if run.litellm_port:
        # The body asks for the usage chunk, as the gateway does upstream: the same events.
        litellm_url = f"http://127.0.0.1:{run.litellm_port}/v1/chat/completions"
        target = Target(
            "litellm", "LiteLLM proxy", litellm_url, LITELLM_KEY, CHAT_BODY_DIRECT, stream=True
        )
        if run.wait_litellm(target):
            targets.append(target)
    results: dict[str, list[StreamResult]] = defaultdict(list)
    gateway_ok = sum(t.name in GATEWAYS for t in targets)  # the readiness requests
    gateway_failed = 0
    stagger = (CHAT_EVENTS - 1) * args.chunk_delay if args.stagger is None else args.stagger
    for n in range(1, args.rounds + 1):
        for target in targets:
            print(
                f"chat-stream, round {n}/{args.rounds}, {target.name}: warm-up {args.warmup:g}s, "
                f"then {args.seconds:g}s",
                flush=True,
            )
            warm = asyncio.run(stream_load(target, args.warmup, args.streams, stagger))
            result = run.measure(
                lambda t=target: asyncio.run(stream_load(t, args.seconds, args.streams, stagger))
            )
            results[target.name].append(result)
            if target.name in GATEWAYS:
                gateway_ok += warm.ok + result.ok
                gateway_failed += warm.failed + result.failed
    profile = ""
    if args.py_spy:
        gateway = targets[0]
        title = f"chat streams, {args.streams} at a time"
        load = lambda: asyncio.run(stream_load(gateway, args.seconds, args.streams, stagger))  # noqa: E731
        profile, ok, failed = spy_profile(run, [(title, load, results["gateway"])])
        gateway_ok, gateway_failed = gateway_ok + ok, gateway_failed + failed
    wait_for_ledger(run.db_url, CHAT_SERVICE, gateway_ok + gateway_failed)
    procs.stop("gateway")
    if BEFORE in procs.procs:
        procs.stop(BEFORE)
    procs.stop(IO_FLOOR)
    procs.stop(IO_HELD)
    procs.stop("upstream")
    return ChatStream(targets, dict(results), gateway_ok, stagger, profile)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks run
    cases = ("embeddings", "chat-stream") if args.case == "all" else (args.case,)
    wrk = None if args.python_load or "embeddings" not in cases else find_wrk()
    exe, litellm_note = install_litellm() if args.litellm else (None, "--no-litellm")
    if args.litellm and exe is None:
        print(f"LiteLLM: {litellm_note}\nthe LiteLLM rows are skipped", flush=True)
    ensure_postgres()
    db = f"gw_bench_{uuid.uuid4().hex[:10]}"
    db_url = f"{PG}/{db}"
    pg_admin(f'CREATE DATABASE "{db}"')
    procs = Processes(Path(tempfile.mkdtemp(prefix="gw-bench-")))
    try:
        log_level = "INFO" if args.access_log else "WARNING"
        env = {**os.environ, "DATABASE_URL": db_url, "GATEWAY_ACCESS_LOG_LEVEL": log_level}
        env["DEBUG"] = "false"
        ports = {case: free_port() for case in ("embeddings", "chat-stream")}
        run = Run(args, procs, env, db_url, "", wrk, ports, litellm_note=litellm_note)
        if args.against:
            run.before = checkout_at(args.against, procs.logdir)
        embeddings, chat = run_cases(run, cases, exe)
        ledger = read_ledger(db_url)  # every gateway has stopped
    except Exception:
        for name in list(procs.procs):
            print(f"--- {name} log (tail)\n{procs.log_tail(name)}", file=sys.stderr)
        raise
    finally:
        procs.stop_all()
        if args.against and (procs.logdir / "worktree").exists():
            git = ["git", "worktree", "remove", "--force", str(procs.logdir / "worktree")]
            subprocess.run(git, cwd=ROOT, check=False)
        shutil.rmtree(procs.logdir, ignore_errors=True)
        pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return 0 if report_run(run, embeddings, chat, ledger) else 1


def checkout_at(ref: str, parent: Path) -> Path:
    """REF checked out beside the tree (a detached worktree), with this tree's secrets key (the
    database's secrets were encrypted with it). bench/inproc.py's `--against` uses it too."""
    path = parent / "worktree"
    cmd = ["git", "worktree", "add", "--quiet", "--detach", str(path), ref]
    subprocess.run(cmd, cwd=ROOT, check=True)
    key = ROOT / "var" / "encryption.key"
    if not key.exists():  # a fresh clone: made now, or each gateway would make its own
        from cryptography.fernet import Fernet

        key.parent.mkdir(exist_ok=True)
        key.touch(mode=0o600)
        key.write_bytes(Fernet.generate_key() + b"\n")
    (path / "var").mkdir(exist_ok=True)
    (path / "var" / "encryption.key").write_bytes(key.read_bytes())
    return path


def run_cases(
    run: Run, cases: tuple[str, ...], litellm_exe: Path | None
) -> tuple[Embeddings | None, ChatStream | None]:
    """LiteLLM (when installed) and the gateway set up, then each case asked for, in turn."""
    if litellm_exe:
        run.litellm_port = free_port()
        start_litellm(run, litellm_exe, run.litellm_port)  # starts while the gateway is set up
    run.key = set_up_gateway(run.env)
    embeddings = run_embeddings(run) if "embeddings" in cases else None
    chat = run_chat_stream(run) if "chat-stream" in cases else None
    return embeddings, chat


def report_run(
    run: Run, embeddings: Embeddings | None, chat: ChatStream | None, ledger: Ledger
) -> bool:
    """Every table and check; False when a check failed."""
    args = run.args
    report_header(run)
    ok = True
    if embeddings:
        report_embeddings(args, "wrk" if run.wrk else "python/httpx", embeddings)
        if args.tracing:
            report_tracing(args, embeddings, run.sink_stats)
        ok &= check_ledger(embeddings.ledger, "embeddings", embeddings.gateway_ok)
    if chat:
        ok &= report_chat(args, chat)
        ok &= check_ledger(ledger, CHAT_SERVICE, chat.gateway_ok)
    ok &= check_wallets(ledger)
    report_issue(args, embeddings, chat, run.litellm_note)
    if chat and chat.profile:
        print("\n" + chat.profile)
    if embeddings and embeddings.profile:
        if not args.py_spy:
            print("\ncProfile, 1-worker gateway, embeddings load (event-loop thread):")
        print(embeddings.profile)
    return ok


def report_header(run: Run) -> None:
    """When, on what, and how the servers ran."""
    args = run.args
    server = {
        "gunicorn": "gunicorn + uvicorn-worker (gateway_site.gunicorn_conf)",
        "granian": "granian (asgi, uvloop)",
    }[args.server]
    litellm = (
        f"{LITELLM_SPEC.split('[')[0]} {LITELLM_SPEC.split('==')[1]}, {args.workers} workers, "
        "offline, no DB"
        if not run.litellm_note
        else f"skipped ({run.litellm_note.splitlines()[0]})"
    )
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, {args.rounds} "
        f"interleaved round(s); gateway (and floor): {args.workers} workers, {server}, access "
        f"log {'on' if args.access_log else 'off'}; LiteLLM: {litellm}\ncells: median of the "
        "rounds (min..max)"
    )


# --------------------------------------------------------------------------- reports


def cell(values: list[float], fmt: str = ".1f", sign: str = "") -> str:
    """The median, and with more than one round the range: `12.3 (11.0..14.1)`."""
    m = statistics.median(values)
    if len(values) == 1:
        return f"{m:{sign}{fmt}}"
    return f"{m:{sign}{fmt}} ({min(values):{sign}{fmt}}..{max(values):{sign}{fmt}})"


def table_row(first: str, width: int, values: list[str], columns: list[tuple[str, int]]) -> str:
    cells = (v.rjust(w) for v, (_, w) in zip(values, columns, strict=True))
    return first.ljust(width) + "".join(f"  {c}" for c in cells)


def report_embeddings(args, generator: str, case: Embeddings) -> None:
    print(
        f"\nembeddings: POST /v1/embeddings, load: {generator}, {args.connections} connections "
        f"for {args.seconds:g}s and one connection for {args.seconds_one:g}s per target and "
        "round;\nupstream: python -m fake_upstreams openai; CPU ms/req: the target's own process "
        f"tree, at {args.connections} connections; CPU @1: the same at one connection\n(p50 @1 "
        "less CPU @1 is time spent waiting: for the other processes, and for a core on a busy "
        "machine)"
    )
    columns = [("req/s", 17), ("p50 ms", 20), ("p99 ms", 22), ("p50 @1 ms", 20)]
    columns += [("CPU ms/req", 18), ("CPU @1", 18), ("answers", 7), ("non-2xx", 7), ("errors", 6)]
    print(table_row("target", 40, [name for name, _ in columns], columns))
    for t in case.targets:
        many, one = case.c32[t.name], case.c1[t.name]
        values = [cell([r.rps for r in many], ".0f"), cell([r.p50_ms for r in many])]
        values += [cell([r.p99_ms for r in many]), cell([r.p50_ms for r in one], ".2f")]
        values += [cell([r.cpu_ms(t.name) for r in many], ".2f")]
        values += [cell([r.cpu_ms(t.name) for r in one], ".2f")]
        values += [str(sum(r.requests for r in many + one))]
        values += [str(sum(r.non2xx for r in many + one)), str(sum(r.errors for r in many + one))]
        print(table_row(t.title, 40, values, columns))
    for name, title in (("gateway", "gateway"), (IO_FLOOR, "I/O floor"), (IO_HELD, "held floor")):
        if name in case.c32:  # the I/O floor's PostgreSQL work beside the gateway's
            print(f"CPU per {title} request: {cpu_split(case.c32[name], name)}")


def cpu_split(results: list, name: str) -> str:
    """The target's own CPU, the upstream's and PostgreSQL's per request (or stream): where the
    machine's two cores went, which is what bounds req/s at 32 connections."""
    parts = [
        f"{label} {cell([r.cpu_ms(key) for r in results], '.2f')} ms"
        for label, key in ((name, name), ("upstream", "upstream"), ("postgres", "postgres"))
    ]
    return f"{', '.join(parts)} (load generator, others: not counted)"


def report_chat(args, case: ChatStream) -> bool:
    """The table; False when a stream failed."""
    print(
        f"\nchat-stream: POST /v1/chat/completions, stream: true; load: python/httpx, "
        f"{args.streams} concurrent streams\n(first starts spread over {case.stagger * 1e3:.0f} "
        f"ms), {args.seconds:g}s per target and round; upstream: bench.upstream, chunk_delay "
        f"{args.chunk_delay:g}s\n({CHAT_EVENTS} events per stream); times in ms; TTFB: to the "
        "first `data:` event; total: to the stream's end"
    )
    columns = [("streams/s", 20), ("TTFB p50", 20), ("TTFB p99", 20), ("total p50", 20)]
    columns += [("total p99", 22), ("streams", 7), ("failed", 6), ("CPU ms/str", 20)]
    print(table_row("target", 24, [name for name, _ in columns], columns))
    for t in case.targets:
        rs = case.results[t.name]
        values = [cell([r.rate for r in rs])]
        values += [cell([percentile_ms(r.ttfb, q) for r in rs]) for q in (0.5, 0.99)]
        values += [cell([percentile_ms(r.total, q) for r in rs]) for q in (0.5, 0.99)]
        values += [str(sum(r.ok for r in rs)), str(sum(r.failed for r in rs))]
        values += [cell([r.cpu_ms(t.name) for r in rs], ".2f")]
        print(table_row(t.title, 24, values, columns))
    gw, up = case.results["gateway"], case.results["upstream"]
    total = [
        percentile_ms(g.total, 0.5) - percentile_ms(u.total, 0.5)
        for g, u in zip(gw, up, strict=True)
    ]
    print(f"gateway total time overhead (p50 gateway - p50 upstream): {cell(total, sign='+')} ms")
    for name, title in (("gateway", "gateway"), (IO_FLOOR, "I/O floor"), (IO_HELD, "held floor")):
        if name in case.results:
            print(f"CPU per {title} stream: {cpu_split(case.results[name], name)}")
    sizes = ", ".join(
        f"{t.name} {case.results[t.name][0].bytes_per_stream:.0f}" for t in case.targets
    )
    print(f"bytes per stream: {sizes}")
    ok = True
    for t in case.targets:
        rs = case.results[t.name]
        failures: dict[str, int] = defaultdict(int)
        for r in rs:
            for kind, n in r.failures.items():
                failures[kind] += n
        answered, failed = sum(r.ok for r in rs), sum(failures.values())
        kinds = "".join(f", {kind}: {n}" for kind, n in sorted(failures.items()))
        verdict = "OK" if not failed else "FAILED"
        print(
            f"streams, {t.name}: {answered} of {answered + failed} answered 200 and ended with "
            f"data: [DONE]{kinds}: {verdict}"
        )
        # LiteLLM's failures are its own: reported, but not the gateway's test.
        ok &= not failed or t.name == "litellm"
    return ok


@dataclass
class Goal:
    what: str
    values: list[float] | None  # per round; None: not measured
    fmt: str
    goal: str
    met: object  # median -> bool; None: informative
    note: str = ""


def report_tracing(args, case: Embeddings, sink: dict) -> None:
    """Tracing's CPU per request: the traced gateway's less the untraced one's, per round."""
    off, on = case.c32["gateway"], case.c32[TRACED]
    extra = [b.cpu_ms(TRACED) - a.cpu_ms("gateway") for a, b in zip(off, on, strict=True)]
    share = [
        100 * (b.cpu_ms(TRACED) / a.cpu_ms("gateway") - 1) for a, b in zip(off, on, strict=True)
    ]
    print(
        f"\ntracing: gateway CPU ms/req at {args.connections} connections, off "
        f"{cell([r.cpu_ms('gateway') for r in off], '.3f')}, on "
        f"{cell([r.cpu_ms(TRACED) for r in on], '.3f')}: {cell(extra, '.3f', '+')} ms/req "
        f"({cell(share, '.0f', '+')}%); the sink collector received {sink}"
    )


def report_issue(args, emb: Embeddings | None, chat: ChatStream | None, litellm_note: str):
    """Issue 12's table (one row per server), its ratios, and each target: met or not."""
    print(
        f"\nissue 12: median of {args.rounds} interleaved round(s) (min..max); req/s and p99 at "
        f"{args.connections} connections, p50 at one;\nCPU ms/req: the server's own process tree"
    )
    rows = [("upstream", "upstream alone"), ("floor", "bare django-ninja floor")]
    rows += [(IO_FLOOR, "I/O floor: floor + read, call, commit")]
    rows += [("gateway", "gateway, full pipeline")]
    rows += [("litellm", f"LiteLLM {LITELLM_SPEC.split('==')[1]} proxy, offline, no DB")]
    columns = [("req/s @32", 17), ("p99 @32 ms", 22), ("p50 @1 ms", 20), ("CPU ms/req", 18)]
    print(table_row("target", 38, [name for name, _ in columns], columns))
    for name, title in rows:
        if emb is None or name not in emb.c32:
            why = "--case" if emb is None else f"skipped: {litellm_note.splitlines()[0]}"
            print(title.ljust(38) + f"  not measured ({why})")
            continue
        many, one = emb.c32[name], emb.c1[name]
        values = [cell([r.rps for r in many], ".0f"), cell([r.p99_ms for r in many])]
        values += [
            cell([r.p50_ms for r in one], ".2f"),
            cell([r.cpu_ms(name) for r in many], ".2f"),
        ]
        print(table_row(title, 38, values, columns))

    per_round = _per_round
    c32, c1 = (emb.c32, emb.c1) if emb else (None, None)
    streams = chat.results if chat else None

    ttfb = _ttfb_over
    quiet = "quiet box only"
    goals = [
        Goal(
            "gateway CPU ms/req / floor's",
            per_round(
                "gateway", "floor", lambda a, b: a.cpu_ms("gateway") / b.cpu_ms("floor"), c32
            ),
            ".2f",
            "<= 1.45",
            lambda m: m <= 1.45,
        ),
        Goal(
            "gateway req/s / floor's",
            per_round("gateway", "floor", lambda a, b: a.rps / b.rps, c32),
            ".2f",
            ">= 0.70",
            lambda m: m >= 0.7,
            quiet,
        ),
        Goal(
            "added p50 @1 connection over upstream alone, ms",
            per_round("gateway", "upstream", lambda a, b: a.p50_ms - b.p50_ms, c1),
            "+.2f",
            "< 2 ms",
            lambda m: m < 2,
        ),
        Goal(
            "stream TTFB overhead at p50 (gateway - upstream), ms",
            per_round("gateway", "upstream", ttfb, streams),
            "+.1f",
            "< 2 ms",
            lambda m: m < 2,
        ),
        Goal(
            "I/O floor: added p50 @1 over upstream alone, ms",
            per_round(IO_FLOOR, "upstream", lambda a, b: a.p50_ms - b.p50_ms, c1),
            "+.2f",
            "",
            None,
        ),
        Goal(
            "gateway's own: gateway p50 @1 - I/O floor's, ms",
            per_round("gateway", IO_FLOOR, lambda a, b: a.p50_ms - b.p50_ms, c1),
            "+.2f",
            "",
            None,
        ),
        Goal(
            "I/O floor: stream TTFB overhead at p50, ms",
            per_round(IO_FLOOR, "upstream", ttfb, streams),
            "+.1f",
            "",
            None,
        ),
        Goal(
            "gateway's own: gateway TTFB p50 - I/O floor's, ms",
            per_round("gateway", IO_FLOOR, ttfb, streams),
            "+.1f",
            "",
            None,
        ),
        Goal(
            "gateway req/s @32 / LiteLLM's",
            per_round("gateway", "litellm", lambda a, b: a.rps / b.rps, c32),
            ".2f",
            ">= 2",
            lambda m: m >= 2,
        ),
        Goal(
            "gateway p99 @32 / LiteLLM's",
            per_round("gateway", "litellm", lambda a, b: a.p99_ms / b.p99_ms, c32),
            ".2f",
            "<= 0.5",
            lambda m: m <= 0.5,
        ),
        Goal(
            "gateway CPU ms/req / LiteLLM's",
            per_round(
                "gateway", "litellm", lambda a, b: a.cpu_ms("gateway") / b.cpu_ms("litellm"), c32
            ),
            ".2f",
            "",
            None,
        ),
        Goal(
            "LiteLLM stream TTFB overhead at p50, ms",
            per_round("litellm", "upstream", ttfb, streams),
            "+.1f",
            "",
            None,
        ),
    ]
    print_goals(goals)
    print("\nissue 40: the gateway against its own floors (the same rounds; docs/performance.md)")
    print_goals(issue40_goals(c32, c1, streams))
    if (c32 and BEFORE in c32) or (streams and BEFORE in streams):
        print(f"\nthe same, gateway at {args.against}:")
        print_goals(issue40_goals(c32, c1, streams, gateway=BEFORE))
        print(f"\nthis head against {args.against}, per round:")
        print_goals(against_goals(c32, c1, streams))


def against_goals(c32, c1, streams) -> list[Goal]:
    """`--against`: this head's gateway beside the revision's, per round (informative)."""

    def cpu(a, b):
        return a.cpu_ms("gateway") / b.cpu_ms(BEFORE)

    rows = [
        ("gateway CPU ms/req / the revision's", cpu, c32, ".3f"),
        ("gateway req/s @32 / the revision's", lambda a, b: a.rps / b.rps, c32, ".3f"),
        ("gateway p50 @1 - the revision's, ms", lambda a, b: a.p50_ms - b.p50_ms, c1, "+.2f"),
        ("gateway stream TTFB p50 - the revision's, ms", _ttfb_over, streams, "+.1f"),
        ("gateway CPU ms/stream / the revision's", cpu, streams, ".3f"),
    ]
    return [
        Goal(what, _per_round("gateway", BEFORE, value, results), fmt, "", None)
        for what, value, results, fmt in rows
    ]


def _per_round(name: str, other: str, value, results) -> list[float] | None:
    """`value(a, b)` of each round's results of targets `name` and `other`; None when either
    was not measured."""
    if results is None or name not in results or other not in results:
        return None
    return [value(a, b) for a, b in zip(results[name], results[other], strict=True)]


def _ttfb_over(a, b) -> float:
    return percentile_ms(a.ttfb, 0.5) - percentile_ms(b.ttfb, 0.5)


def issue40_goals(c32, c1, streams, gateway: str = "gateway") -> list[Goal]:
    """Issue 40's targets: the gateway ahead of the I/O floor (the contract's own reads and
    writes done plainly), its CPU near the bare framework's, its own latency over the I/O floor
    within 1 ms at one connection and at a stream's first byte, and the I/O floor's own cost
    over the upstream (what a local log would lower) within 2 ms. `gateway`: the target
    measured (BEFORE: the `--against` revision's)."""

    def cpu(a, b):
        return a.cpu_ms(gateway) / b.cpu_ms("floor")

    def p50(a, b):
        return a.p50_ms - b.p50_ms

    def rps(a, b):
        return a.rps / b.rps

    def pg(a, b):  # the database's CPU in each target's run, per request
        return a.cpu_ms("postgres") / b.cpu_ms("postgres")

    # (what, target, against, per round, results, format, shown target, bound; at most unless >=)
    rows = [
        ("gateway req/s @32 / I/O floor's", gateway, IO_FLOOR, rps, c32, ".2f", ">= 1.0", 1.0),
        ("gateway CPU ms/req / bare floor's", gateway, "floor", cpu, c32, ".2f", "<= 1.3", 1.3),
        (
            "gateway's own p50 @1 over the I/O floor, ms",
            gateway,
            IO_FLOOR,
            p50,
            c1,
            "+.2f",
            "<= 1 ms",
            1,
        ),
        (
            "gateway's own stream TTFB p50 over the I/O floor, ms",
            gateway,
            IO_FLOOR,
            _ttfb_over,
            streams,
            "+.1f",
            "<= 1 ms",
            1,
        ),
        (
            "I/O floor: added p50 @1 over upstream alone, ms",
            IO_FLOOR,
            "upstream",
            p50,
            c1,
            "+.2f",
            "<= 2 ms",
            2,
        ),
        (
            "gateway: added p50 @1 over upstream alone, ms",
            gateway,
            "upstream",
            p50,
            c1,
            "+.2f",
            "<= 3 ms",
            3,
        ),
    ]
    # Beside the floor that holds (issue 40's budgets that hold, done plainly): what the gateway
    # costs over the contract's I/O now that a hold replaced the read (docs/performance.md).
    rows += [
        ("gateway req/s @32 / held I/O floor's", gateway, IO_HELD, rps, c32, ".2f", "", None),
        (
            "gateway's own p50 @1 over the held I/O floor, ms",
            gateway,
            IO_HELD,
            p50,
            c1,
            "+.2f",
            "",
            None,
        ),
        (
            "own stream TTFB p50 over the held I/O floor, ms",
            gateway,
            IO_HELD,
            _ttfb_over,
            streams,
            "+.1f",
            "",
            None,
        ),
        (
            "PostgreSQL CPU per request: gateway / I/O floor",
            gateway,
            IO_FLOOR,
            pg,
            c32,
            ".2f",
            "",
            None,
        ),
    ]
    return [
        Goal(what, _per_round(name, other, value, results), fmt, shown, _bound(shown, bound))
        for what, name, other, value, results, fmt, shown, bound in rows
    ]


def _bound(shown: str, bound: float | None):
    if bound is None:  # for comparison
        return None
    if shown.startswith(">="):
        return lambda m: m >= bound
    return lambda m: m <= bound


def print_goals(goals: list[Goal]) -> None:
    print(f"\n{'ratio':<54}{'measured':>24}  {'target':<9} verdict")
    for g in goals:
        if g.values is None:
            print(f"{g.what:<54}{'not measured':>24}")
            continue
        fmt, sign = (g.fmt[1:], "+") if g.fmt.startswith("+") else (g.fmt, "")
        measured = cell(g.values, fmt, sign)
        if g.met is None:
            verdict = "(for comparison)"
        else:
            verdict = "met" if g.met(statistics.median(g.values)) else "not met"
            verdict += f" ({g.note})" if g.note else ""
        print(f"{g.what:<54}{measured:>24}  {g.goal:<9} {verdict}")


def check_ledger(ledger: Ledger, service: str, gateway_ok: int) -> bool:
    by_status = ledger.of(service)
    rows = by_status.pop(200, 0)
    verdict = "OK" if rows == gateway_ok else "MISMATCH"
    print(
        f"ledger, {service}: {rows} rows with status 200 for {gateway_ok} gateway 200s "
        f"(readiness, warm-up, measured): {verdict}"
        + (f"; other rows by status: {by_status}" if by_status else "")
    )
    return rows == gateway_ok and not by_status


def check_wallets(ledger: Ledger) -> bool:
    verdict = "OK" if ledger.spent == ledger.credits else "MISMATCH"
    print(
        f"wallets: spent {ledger.spent} micro-credits, ledger rows sum {ledger.credits}: {verdict}"
    )
    return ledger.spent == ledger.credits


if __name__ == "__main__":
    sys.exit(main())
