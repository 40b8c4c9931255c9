"""Where a gateway worker's time goes under load: py-spy samples, sorted into the buckets of
issue 12's profile table (bench/README, "The profile").

`bench/run.py --py-spy` records the running gateway's processes (GIL-held samples) while it
loads them once at 32 connections and once at one, and prints this table: for each bucket its
share of the samples, and that share of the CPU per request read from /proc meanwhile. py-spy
is installed (pinned) into a virtual environment of its own under var/ the first time.

A sample is given to the innermost frame that says what the work is for: the gateway's own
module (a statement sent by the budget read counts as the budget read, however deep in psycopg
it was taken), or a framework that claims its own work (django-ninja, pydantic, Django,
uvicorn, prometheus-client, logging). Driver and client libraries (psycopg, aiohttp, httpx,
asyncio) are see-through: they count for the code that called them, or, called by nobody of
ours (aiohttp's protocol callbacks, the pool's upkeep, the loop itself), for their own bucket.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

PY_SPY_SPEC = "py-spy==0.4.3"  # installed by run.py into var/bench-py-spy (bench/venv_tools.py)

# (what the frame's path contains, bucket), innermost match wins; the gateway's own modules.
OWN = [
    ("licensing/ledger/budget.py", "budget read (statement, psycopg)"),
    ("licensing/ledger/", "ledger: group commit (statement, psycopg)"),
    ("licensing/rules/fairuse.py", "pipeline: steps, render"),
    ("inference/providers/", "provider call (aiohttp, httpx response)"),
    ("inference/streaming.py", "stream relay: reader task, SSE, usage"),
    ("licensing/access/credentials.py", "authentication"),
    ("licensing/rules/policy.py", "policy, guardrails"),
    ("licensing/rules/guardrails.py", "policy, guardrails"),
    ("catalog/", "routing"),
    ("inference/billing.py", "billing"),
    ("inference/tokens.py", "billing"),
    ("core/metrics.py", "metrics (prometheus-client)"),
    ("core/jsonio.py", "validation: JSON, django-ninja, pydantic"),
    ("inference/schemas/", "validation: JSON, django-ninja, pydantic"),
    ("inference/", "pipeline: steps, render"),
    ("core/db.py", "ORM on a worker thread"),
    # The site's infrastructure moved to core in issue 36: same bucket, so runs still compare.
    # (core/pgpool.py is see-through, below: it sends the budget read's and the ledger's
    # statements, which count for them.)
    ("core/localcache.py", "gateway's ASGI handler, middleware, access log"),
    ("gateway_site/", "gateway's ASGI handler, middleware, access log"),
]
# Frameworks that claim their own work before any frame of ours is reached.
CLAIMING = [
    ("ninja/", "validation: JSON, django-ninja, pydantic"),
    ("pydantic", "validation: JSON, django-ninja, pydantic"),
    ("prometheus_client/", "metrics (prometheus-client)"),
    ("django/core/handlers/", "Django's handler (request, response, URL)"),
    ("django/http/", "Django's handler (request, response, URL)"),
    ("django/urls/", "Django's handler (request, response, URL)"),
    ("django/utils/deprecation.py", "Django's handler (request, response, URL)"),
    ("asgiref/", "Django's handler (request, response, URL)"),
    ("uvicorn/", "server: uvicorn, httptools"),
    ("httptools", "server: uvicorn, httptools"),
    ("logging/", "gateway's ASGI handler, middleware, access log"),
    ("pythonjsonlogger/", "gateway's ASGI handler, middleware, access log"),
]
# See-through libraries: their own bucket only when no frame above them is ours (the rest of
# Django, timezone.now() say, counts for its caller).
SEE_THROUGH = [
    ("aiohttp/", "provider call (aiohttp, httpx response)"),
    ("httpx", "provider call (aiohttp, httpx response)"),
    ("psycopg", "psycopg outside a request (the pool's upkeep)"),
    # Until 2026-11-28 the pool counted as the handler's own: the budget read's and the group
    # commit's statements (about a fifth of a request) were in the handler's bucket.
    ("core/pgpool.py", "psycopg outside a request (the pool's upkeep)"),
    ("asyncio/", "event loop (asyncio, uvloop)"),
    ("uvloop/", "event loop (asyncio, uvloop)"),
]
API_FUNCTIONS = [
    ("BearerAuth", "authentication"),
    ("parse", "validation: JSON, django-ninja, pydantic"),
]


def start(exe: Path, pids: list[int], seconds: float, rate: int, outdir: Path):
    """One py-spy per process, GIL-held samples; wait on the returned processes. Each sample
    pauses the process for a moment (~3% fewer requests at 500 Hz): without the pause
    (--nonblocking), a stack read while it changes loses its outer frames, and a statement's
    samples could not be told from the pool's."""
    procs = []
    for pid in pids:
        out = outdir / f"py-spy-{pid}.txt"
        cmd = [str(exe), "record", "--pid", str(pid), "--duration", str(int(seconds))]
        cmd += ["--rate", str(rate), "--format", "raw", "--gil", "-o", str(out)]
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append((spy, out))
    return procs


def collect(procs) -> tuple[Counter, str]:
    """(samples by bucket, errors) once every py-spy has written its file."""
    samples: Counter = Counter()
    errors = []
    for proc, out in procs:
        _, err = proc.communicate(timeout=120)
        if not out.exists():
            errors.append(err.decode(errors="replace")[-300:])
            continue
        for line in out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                samples[bucket(stack.split(";"))] += int(count)
    return samples, "\n".join(errors)


def bucket(frames: list[str]) -> str:
    """The bucket of one sample; frames go from the outermost to the innermost."""
    fallback = ""
    for frame in reversed(frames):
        own = _own(frame)
        if own:
            return own
        claimed = _first(CLAIMING, frame)
        if claimed:
            # A framework around a library's callback (the server's loop around aiohttp's
            # data_received) did not ask for that work: the library's own bucket.
            return fallback or claimed
        fallback = fallback or _first(SEE_THROUGH, frame)
    return fallback or "other"


def _own(frame: str) -> str:
    if "inference/api.py" in frame:
        return _first(API_FUNCTIONS, frame) or "pipeline: steps, render"
    if "site-packages" in frame:
        return ""
    return _first(OWN, frame)


def _first(rules, frame: str) -> str:
    return next((name for part, name in rules if part in frame), "")


def table(samples: Counter, cpu_ms: float, title: str) -> str:
    """Each bucket's share of the samples, and that share of the CPU per request measured from
    /proc: a sample counts wall time with the GIL held, which on a busy machine includes
    time the worker waited for a core, so shares are what the samples are good for."""
    total = sum(samples.values()) or 1
    lines = [title, f"{'bucket':52} {'share':>6} {'CPU ms/req':>10}"]
    for name, count in samples.most_common():
        lines.append(f"{name:52} {count / total:6.1%} {count / total * cpu_ms:10.3f}")
    lines.append(f"{f'all ({total} samples)':52} {1:6.0%} {cpu_ms:10.3f}")
    return "\n".join(lines)
