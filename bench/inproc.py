"""One request after the other through an ASGI application in one process, without a server or
a client: wall and CPU microseconds per request, and a streamed answer's time to its first event.

    .venv/bin/python bench/inproc.py [--rounds 3] [--requests 1500] [--case embeddings|chat-stream]
                                     [--against REF] [--connections N]
                                     [--dead-connection refused] [--profile]

The precise A/B of bench/README ("In one process"): a change of 20-30 µs a request is lost in
the servers' noise (wrk, uvicorn, the scheduler), but shows here, where the only other processes
are the fake upstream and PostgreSQL. Each round runs the gateway's application
(gateway_site.asgi) and the I/O floor's (bench/floor_site) in fresh processes, one after the
other, on a throwaway database set up as bench/run.py sets up its own. `--against REF` adds a
third target, the gateway as it is at the git revision REF (a temporary worktree), in the same
interleaved rounds: the A/B of a change in one command.

`--connections N` gives the `direct` provider N connections to the same fake upstream
(`default`, `c2`, `c3`, ...; weight 1 each), so routing spreads the requests over them (before
issue 24 the gateway used `default` only). `--dead-connection refused` adds a connection `dead`
of the same weight on a closed port, and two more targets to the rounds: `gateway+dead/closed`
(its circuit never opens: `GATEWAY_CIRCUIT_FAILURES=1000000`, so every second request is first
refused there and fails over) and `gateway+dead/open` (default settings: after 5 refusals, in
the warm-up, the circuit is open and the connection skipped); `gateway` is then the same
connections without `dead`. The circuits are each process's own (no REDIS_URL).
`--profile` runs cProfile over the measured requests (bench/README.md, "In one process").
`--course` adds the target `gateway+course`: the same request by a course member's key (issue
26: the student's allowance and the course pool are read and charged beside the license).
`--front-end` adds the target `gateway+front-end` (implies the course of `--course`): the same
request by a front-end key acting for that course's student, named by `X-OpenWebUI-User-Email`
(issue 37: the header read, the person from the cache, the course chosen; then the course
member's path).
`--anthropic` adds the target `gateway+anthropic` (with `--case chat-stream`): the same streamed
chat for `claude-haiku-4-5` through the `anthropic` adapter, on the Anthropic fake (issue 34: the
translation of Anthropic's events into the contract's chunks, beside the OpenAI relay).

`--instructions` counts instructions instead of timing: each target's child runs under
valgrind's callgrind twice, with `--requests` and with twice as many, and the difference of the
two totals divided by the difference of requests is the instructions per request, every thread
of the process included, start-up and warm-up cancelled out (the caches' TTL is raised for these
runs, so that they refill as seldom per request as at native speed). A count does not depend on
how loaded the machine is, but it is not exact either: the gateway's background work (the group
commit's batches, timers) follows the clock, which runs ~50 times slower under valgrind; the
plain target repeated within 1.3%, a course member's within 5-15% (bench/results/courses.md).
It does not see time spent waiting for memory or PostgreSQL. Keep `--requests` at a few hundred.
`GW_KEEP_CALLGRIND=1` keeps callgrind's files (their paths on stderr) for `callgrind_annotate
--inclusive=yes`: the per-function difference of the two runs is a request's cost by function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import run as bench

CHAT_SHORT = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Explain photosynthesis in two short paragraphs."}],
    "stream": True,
}
PATHS = {
    ("gateway", "embeddings"): "/v1/embeddings",
    ("gateway", "chat-stream"): "/v1/chat/completions",
    ("iofloor", "embeddings"): "/v1/io/embeddings",
    ("iofloor", "chat-stream"): "/v1/io/chat/completions",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("embeddings", "chat-stream"), default="embeddings")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1500, help="measured, per round")
    parser.add_argument("--targets", default="gateway,iofloor")
    parser.add_argument("--against", metavar="REF", help="also the gateway at this git revision")
    parser.add_argument(
        "--connections", type=int, default=1, help="direct's connections to the fake upstream"
    )
    parser.add_argument(
        "--dead-connection",
        choices=("refused",),
        help="also a connection on a closed port: targets gateway+dead/closed and /open",
    )
    parser.add_argument(
        "--course",
        action="store_true",
        help="also gateway+course: the same request by a course member (allowance and pool)",
    )
    parser.add_argument(
        "--front-end",
        action="store_true",
        help="also gateway+front-end: the same request by a front-end key for the course's student",
    )
    parser.add_argument(
        "--anthropic",
        action="store_true",
        help="also gateway+anthropic: the chat stream through the anthropic adapter (its fake)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per request under callgrind (deterministic) instead of timing",
    )
    parser.add_argument("--dead", help=argparse.SUPPRESS)  # the child: off | closed | open
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the measured requests; µs per request of the failover path's functions",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: gateway | iofloor
    parser.add_argument("--root", help=argparse.SUPPRESS)  # the child's code (a worktree)
    args = parser.parse_args()
    if args.serve:
        _child(args)
        return 0
    return _parent(args)


def _parent(args) -> int:
    bench.ensure_postgres()
    db = f"gw_inproc_{uuid.uuid4().hex[:10]}"
    db_url = f"{bench.PG}/{db}"
    bench.pg_admin(f'CREATE DATABASE "{db}"')
    procs = bench.Processes(Path(tempfile.mkdtemp(prefix="gw-inproc-")))
    env = {**os.environ, "DATABASE_URL": db_url, "DEBUG": "false"}
    env["GATEWAY_ACCESS_LOG_LEVEL"] = "WARNING"
    worktree = bench.checkout_at(args.against, procs.logdir) if args.against else None
    try:
        key = bench.set_up_gateway(env)
        port = bench.free_port()
        bench.configure_upstream(env, port)
        bench.create_io_floor_tables(db_url)
        fake = ["fake_upstreams", "openai", "--port", str(port), "--api-key", bench.UPSTREAM_KEY]
        procs.start("upstream", [bench.PY, "-m", *fake], env)
        env |= {"INPROC_KEY": key, "INPROC_UPSTREAM": bench._base(port)}
        _wait_for(port)
        if args.connections > 1 or args.dead_connection or args.against:
            dead = ""
            if args.dead_connection:  # bound, never listening: refused, and no one else's port
                closed = socket.socket()
                closed.bind(("127.0.0.1", 0))
                dead = bench._base(closed.getsockname()[1])
            _set_up_connections(args, env, dead)
        targets = _targets(args, procs, env, worktree)
        rows: dict[str, list[dict]] = {t: [] for t in targets}
        for n in range(args.rounds):
            # Each round starts one target further: what a round's position costs (the ledger
            # table grows, the machine's load drifts) falls on every target alike.
            for target in targets[n % len(targets) :] + targets[: n % len(targets)]:
                measure = _instructions_round if args.instructions else _round
                rows[target].append(measure(args, target, env, worktree))
                print(f"round {n + 1}/{args.rounds}, {target}: {rows[target][-1]}", flush=True)
        _report(args, rows)
    finally:
        procs.stop_all()
        if worktree:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=bench.ROOT)
        bench.pg_admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return 0


def _targets(args, procs, env: dict, worktree: Path | None) -> list[str]:
    """The targets of the rounds, the optional ones set up."""
    targets = args.targets.split(",")
    if args.course or args.front_end:
        env["INPROC_COURSE_KEY"], env["INPROC_FRONT_END_KEY"] = _set_up_course(env)
        targets.append("gateway+course")
    if args.front_end:
        targets.append("gateway+front-end")
    if args.anthropic:
        _set_up_anthropic(procs, env)
        targets.append("gateway+anthropic")
    if args.dead_connection:
        targets += [f"gateway+dead/{state}" for state in DEAD_STATES]
    if worktree:
        targets.append(f"gateway@{args.against}")
    return targets


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the fake upstream on {port} did not start")


# --dead-connection's targets: the dead connection's circuit kept closed, or left to open.
DEAD_STATES = {"closed": {"GATEWAY_CIRCUIT_FAILURES": "1000000"}, "open": {}}
EXTRA = "c{}"  # the names of the extra live connections: c2, c3, ...


def _set_up_connections(args, env: dict, dead_url: str) -> None:
    """The extra connections, made once by a child of this tree (the parent has no Django):
    `--connections` live ones and, inactive until a round's child switches it on, `dead`."""
    cmd = [bench.PY, __file__, "--serve", "setup", "--root", str(bench.ROOT)]
    cmd += ["--connections", str(args.connections)] + (["--against", "x"] if args.against else [])
    out = subprocess.run(
        cmd,
        cwd=bench.ROOT,
        env={**env, "INPROC_DEAD": dead_url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"setting up the connections failed:\n{out.stdout}{out.stderr}")


def _set_up_course(env: dict) -> tuple[str, str]:
    """A course on the bench license (allowance and pool per day, both far from spent), a
    student in it (signed in through the institution's identity provider, as a front-end key
    finds them), their course key and a front-end key of the license, made by a child of this
    tree; returns the two keys."""
    cmd = [bench.PY, __file__, "--serve", "course-setup", "--root", str(bench.ROOT)]
    out = subprocess.run(
        cmd, cwd=bench.ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("sk-")]
    if out.returncode or len(lines) < 2:
        raise RuntimeError(f"setting up the course failed:\n{out.stdout}{out.stderr}")
    return lines[-2], lines[-1]


ANTHROPIC_MODEL = "claude-haiku-4-5"


def _set_up_anthropic(procs, env: dict) -> None:
    """The Anthropic fake on a port of its own, `anthropic` connected to it and its rows enabled
    (the README's operator commands)."""
    port = bench.free_port()
    fake = ["fake_upstreams", "anthropic", "--port", str(port), "--api-key", bench.UPSTREAM_KEY]
    procs.start("anthropic", [bench.PY, "-m", *fake], env)
    _wait_for(port)
    url = f"http://127.0.0.1:{port}/v1"
    bench.manage(
        env, "configure_connection", "anthropic", "--base-url", url,
        "--api-key", bench.UPSTREAM_KEY, "--enable-models",
    )  # fmt: skip


FRONT_END_STUDENT = "bench-student@bench.example"


def _child_set_up_course() -> None:
    from django.contrib.auth import get_user_model

    from core.localcache import clear_all
    from licensing.access.credentials import api_key_create
    from licensing.models import (
        ApiKey,
        Course,
        CourseMember,
        EndUser,
        IdentityProvider,
        License,
        SsoIdentity,
    )

    license = License.objects.get(name="bench")
    course = Course.objects.create(
        institution=license.institution,
        license=license,
        name="Bench course",
        code="BENCH",
        allowance=10**15,
        allowance_period="day",
        pool_limit=10**15,
    )
    user = get_user_model().objects.create_user("bench-student", email=FRONT_END_STUDENT)
    provider = IdentityProvider.objects.create(
        institution=license.institution, issuer="https://idp.bench.example", client_id="gw"
    )
    SsoIdentity.objects.create(
        provider=provider, subject="bench-student", user=user, email=FRONT_END_STUDENT
    )
    student = EndUser.objects.create(license=license, subject="bench-student", user=user)
    CourseMember.objects.create(course=course, end_user=student)
    row, key = api_key_create(license=license, end_user=student, name="bench course")
    ApiKey.objects.filter(pk=row.pk).update(course=course)
    front_end = api_key_create(license=license, name="bench", kind=ApiKey.Kind.FRONT_END)[1]
    clear_all()
    print(key, flush=True)
    print(front_end, flush=True)


def _instructions_round(args, target: str, env: dict, worktree: Path | None) -> dict:
    """Instructions per request: callgrind's totals of two runs, `--requests` and twice that."""
    totals = []
    for requests in (args.requests, 2 * args.requests):
        cmd, root, env_t = _child_command(args, target, env, worktree, requests)
        # Under valgrind a request takes ~50 times longer: with the default 5 s TTL the caches
        # would refill every few requests instead of every few thousand, and be counted.
        env_t = {**env_t, "GATEWAY_CACHE_TTL": "100000"}
        out_file = Path(tempfile.gettempdir()) / f"gw-inproc-callgrind-{uuid.uuid4().hex[:8]}"
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"]
        out = subprocess.run(
            valgrind + cmd, cwd=root, env=env_t, capture_output=True, text=True, check=False
        )
        collected = [x for x in out.stderr.splitlines() if "Collected :" in x]
        if out.returncode or not collected:
            raise RuntimeError(f"{target} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
        totals.append(int(collected[-1].split("Collected :")[1].strip()))
        if os.environ.get("GW_KEEP_CALLGRIND"):  # for callgrind_annotate: which function
            print(f"{target}, {requests} requests: {out_file}", file=sys.stderr, flush=True)
        else:
            out_file.unlink(missing_ok=True)
    return {"instructions": round((totals[1] - totals[0]) / args.requests)}


def _child_command(args, target: str, env: dict, worktree: Path | None, requests: int):
    serve, root, dead = target, bench.ROOT, "off"
    if "@" in target:
        serve, root = "gateway", worktree
    if "+dead/" in target:
        serve, dead = target.split("+dead/")
        env = {**env, **DEAD_STATES[dead]}
    if target == "gateway+course":  # the same application, a course member's key
        serve, env = "gateway", {**env, "INPROC_KEY": env["INPROC_COURSE_KEY"]}
    if target == "gateway+front-end":  # the same application, a front-end key for that member
        serve = "gateway"
        env = {**env, "INPROC_KEY": env["INPROC_FRONT_END_KEY"], "INPROC_ACT_FOR": "1"}
    if target == "gateway+anthropic":  # the same application, a Claude model
        serve, env = "gateway", {**env, "INPROC_MODEL": ANTHROPIC_MODEL}
    cmd = [bench.PY, __file__, "--serve", serve, "--case", args.case, "--root", str(root)]
    cmd += ["--requests", str(requests), "--dead", dead]
    if args.profile:
        cmd.append("--profile")
    return cmd, root, env


def _round(args, target: str, env: dict, worktree: Path | None) -> dict:
    cmd, root, env = _child_command(args, target, env, worktree, args.requests)
    out = subprocess.run(
        cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.stderr.strip():  # warnings and error lines: a run that logs per request is no A/B
        log = Path(tempfile.gettempdir()) / f"gw-inproc-{target.replace('/', '-')}.stderr"
        log.write_text(out.stderr)
        print(f"{target}: {len(out.stderr.splitlines())} lines on stderr ({log})", flush=True)
    if out.returncode or not lines:
        raise RuntimeError(f"{target} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def _report(args, rows: dict[str, list[dict]]) -> None:
    print(
        f"\n{args.case}, {args.requests} requests one after the other per round, medians of "
        f"{args.rounds} rounds (min..max), "
        + ("instructions per request" if args.instructions else "µs per request")
    )
    columns = ["wall", "cpu", "main"] + (["ttfb"] if args.case == "chat-stream" else [])
    if args.instructions:
        columns = ["instructions"]
    width = max(10, *(len(t) + 2 for t in rows))
    print(f"{'target':{width}}" + "".join(f"{c:>22}" for c in columns))
    for target, results in rows.items():
        cells = []
        for column in columns:
            values = [r[column] for r in results]
            cells.append(f"{statistics.median(values):8.0f} ({min(values):.0f}..{max(values):.0f})")
        failovers = [r["failovers"] for r in results if "failovers" in r]
        if failovers:  # a check: the share of requests whose ledger row shows a failover
            cells.append(f"  failed over: {statistics.median(failovers):.3f} of the requests")
        print(f"{target:{width}}" + "".join(f"{c:>22}" for c in cells))
    for target, results in rows.items():
        profiles = [r["profile"] for r in results if "profile" in r]
        if not profiles:
            continue
        total = statistics.median(p["total"] for p in profiles)
        print(
            f"\n{target}, cProfile (medians of the rounds): all functions' own time {total:.0f} "
            "µs per request; calls, own µs and cumulative µs per request:"
        )
        for key in sorted({k for p in profiles for k in p if k != "total"}):
            values = [p.get(key, [0, 0, 0]) for p in profiles]
            calls, own, cumulative = (statistics.median(v[i] for v in values) for i in range(3))
            print(f"  {key:34} {calls:6.2f} {own:9.1f} {cumulative:9.1f}")


# --------------------------------------------------------------------------- the child


def _child(args) -> None:
    import uvloop  # the loop the gunicorn workers run on (uvicorn's `auto`)

    target, case = args.serve, args.case
    app = _application("gateway" if "setup" in target else target, args.root)
    if target in ("course-setup", "setup"):
        _child_set_up(target, args)
        return
    if target == "gateway":
        _child_switch_dead(args.dead == "open" or args.dead == "closed")
    chat = {**CHAT_SHORT, "model": os.environ.get("INPROC_MODEL", CHAT_SHORT["model"])}
    body = json.dumps(chat if case == "chat-stream" else json.loads(bench.BODY)).encode()
    path = PATHS[(target, case)]
    scope = _scope(path, os.environ["INPROC_KEY"], body)
    if os.environ.get("INPROC_ACT_FOR"):  # a front-end key's request names its student
        scope["headers"].append((b"x-openwebui-user-email", FRONT_END_STUDENT.encode()))
    profiler = _child_profiler() if args.profile else None
    failed_over = _failed_over() if args.dead in DEAD_STATES else 0
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        result = runner.run(_child_measure(app, scope, body, args, profiler))
    if args.dead in DEAD_STATES:  # the check that the dead connection was tried (or skipped)
        done = 100 + args.requests
        result["failovers"] = round((_failed_over() - failed_over) / done, 3)
    if profiler is not None:
        result["profile"] = _watched(profiler, args.requests)
        name = f"gw-inproc-{target}-{args.dead}-{os.getpid()}.prof"  # for pstats: the whole
        profiler.dump_stats(Path(tempfile.gettempdir()) / name)
    print(json.dumps(result), flush=True)


def _child_set_up(target: str, args) -> None:
    """The set-up children: the course of `--course`, or the connections (and, for an older
    revision, the columns' defaults)."""
    if target == "course-setup":
        _child_set_up_course()
        return
    _child_set_up_connections(args.connections, os.environ["INPROC_DEAD"])
    if args.against:
        _child_column_defaults()


def _child_profiler():
    """A cProfile profiler. The figures measured under it include its own cost: compare rows
    only."""
    import cProfile

    # The thread's own CPU clock: time the process spent waiting for a core (a busy
    # machine) or for I/O is not charged to whatever function it was in.
    return cProfile.Profile(time.thread_time)


async def _child_measure(app, scope: dict, body: bytes, args, profiler) -> dict:
    """Wall, CPU and event-loop-thread µs per request (and the median time to the first event
    of a stream) over `args.requests` requests, after 100 that warm up."""
    for _ in range(100):  # connections, caches, prepared statements
        await _one(app, scope, body)
    if profiler is not None:
        profiler.enable()
    cpu, wall, main = time.process_time(), time.perf_counter(), time.thread_time()
    firsts = [await _one(app, scope, body) for _ in range(args.requests)]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    main = time.thread_time() - main
    if profiler is not None:
        profiler.disable()
    per = 1e6 / args.requests
    # `main`: the event loop's thread alone (cpu less main: the ORM's and other threads)
    result = {"wall": round(wall * per), "cpu": round(cpu * per), "main": round(main * per)}
    if args.case == "chat-stream":
        result["ttfb"] = round(statistics.median(firsts) * 1e6)
    return result


def _child_set_up_connections(count: int, dead_url: str) -> None:
    """`direct`'s extra connections, as bench/run.py sets up `default` (same URL and key), made
    through the ORM before any request reads the catalog. Weights and tags keep their defaults
    (1, none): the revision before issue 24 has no such fields, and reads these rows as well."""
    from catalog.models import Connection, Provider

    direct = Provider.objects.get(slug="direct")
    live = Connection.objects.get(provider=direct, name="default").base_url
    for n in range(2, count + 1):
        Connection.objects.update_or_create(
            provider=direct,
            name=EXTRA.format(n),
            defaults={"base_url": live, "api_key": bench.UPSTREAM_KEY, "active": True},
        )
    if dead_url:
        Connection.objects.update_or_create(
            provider=direct,
            name="dead",
            defaults={"base_url": dead_url, "api_key": bench.UPSTREAM_KEY, "active": False},
        )


def _child_column_defaults() -> None:
    """Database defaults for the columns of this tree's models that have a constant default, so
    that an older revision's INSERT, which does not name the columns added since, still works
    (Django drops the default a migration gave the column). Without them every ledger row of
    the older gateway would fail and be spooled: a slower baseline, and a wrong one."""
    from django.apps import apps
    from django.db import connection
    from psycopg import sql

    with connection.cursor() as cursor:
        for model in apps.get_models():
            if not model._meta.managed or model._meta.proxy:
                continue
            table = model._meta.db_table
            for field in model._meta.concrete_fields:
                default = field.default if field.has_default() else None
                if field.null or not isinstance(default, bool | int | str):
                    continue
                value = field.get_db_prep_save(default, connection)
                cursor.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET DEFAULT {}").format(
                        sql.Identifier(table), sql.Identifier(field.column), sql.Literal(value)
                    )
                )


def _child_switch_dead(active: bool) -> None:
    """The dead connection in this child's catalog or not (an `update()`: no new `updated_at`,
    and each child is a fresh process with circuits of its own)."""
    from catalog.models import Connection

    Connection.objects.filter(provider__slug="direct", name="dead").update(active=active)


# The functions of the request path that issue 24 added or changed (file, function): their
# time per request under cProfile. Coroutines count each resumption as a call.
WATCHED = [
    ("catalog/routing.py", "select_routes"),
    ("catalog/routing.py", "select_route"),
    ("catalog/routing.py", "_first_row"),
    ("catalog/routing.py", "_pick"),
    ("catalog/routing.py", "_usable"),
    ("catalog/routing.py", "_route"),
    ("catalog/circuit.py", "known_open"),
    ("catalog/circuit.py", "circuits"),
    ("catalog/circuit.py", "admit"),
    ("catalog/circuit.py", "succeeded"),
    ("catalog/circuit.py", "failed"),
    ("inference/failover.py", "call_with_failover"),
    ("inference/pipeline.py", "_refined"),
    ("inference/pipeline.py", "invoke"),
    ("inference/pipeline.py", "_timed_call"),
    ("inference/streaming.py", "prime"),
    ("core/metrics.py", "upstream_attempt"),
    ("core/metrics.py", "circuit_state"),
    ("core/metrics.py", "failover"),
]


def _watched(profiler, requests: int) -> dict:
    """{"file:function": [calls, own µs, cumulative µs]} per request, and the whole profile's
    own time per request ("total") to set them against."""
    import pstats

    stats = pstats.Stats(profiler).stats
    found: dict[str, list[float]] = {}
    total = 0.0
    for (filename, _line, name), (_cc, calls, own, cumulative, _callers) in stats.items():
        total += own
        for path, function in WATCHED:
            if name == function and filename.endswith(path):
                row = found.setdefault(f"{path.split('/')[-1]}:{name}", [0, 0.0, 0.0])
                row[0] += calls / requests
                row[1] += own * 1e6 / requests
                row[2] += cumulative * 1e6 / requests
    rows = {key: [round(v, 2) for v in row] for key, row in found.items()}
    return {"total": round(total * 1e6 / requests), **rows}


def _failed_over() -> int:
    """Ledger rows so far of requests that failed over (a stream's row may still be on its way:
    a check, not a measurement)."""
    from licensing.models import Transaction

    return Transaction.objects.filter(attempts__gt=1).count()


def _application(target: str, root: str):
    sys.path.insert(0, root)  # before the editable install's finder, which comes last
    if target == "gateway":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
        from gateway_site.asgi import application

        return application
    os.environ["FLOOR_DATABASE_URL"] = os.environ["DATABASE_URL"]
    os.environ["FLOOR_UPSTREAM"] = os.environ["INPROC_UPSTREAM"]
    os.environ["FLOOR_UPSTREAM_KEY"] = bench.UPSTREAM_KEY
    from floor_site.io_asgi import application

    return application


def _scope(path: str, key: str, body: bytes) -> dict:
    headers = [
        (b"host", b"127.0.0.1"),
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }


async def _one(app, scope: dict, body: bytes) -> float:
    """One request to its last byte; returns the seconds to the first `data:` event (streams)."""
    started = time.perf_counter()
    state = {"sent": False, "first": 0.0, "status": None}
    done = asyncio.Event()

    async def receive():
        if not state["sent"]:
            state["sent"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
            return
        if not state["first"] and b"data:" in message.get("body", b""):
            state["first"] = time.perf_counter() - started
        if not message.get("more_body"):
            done.set()

    await app(dict(scope), receive, send)
    if state["status"] != 200:
        raise RuntimeError(f"{scope['path']} answered {state['status']}")
    return state["first"]


if __name__ == "__main__":
    sys.exit(main())
