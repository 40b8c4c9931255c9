"""Micro-benchmark of `licensing.ledger.feed.publish`, the call the group commit makes after each
committed batch: what it costs the event loop per call, with nobody watching and with a viewer.

    .venv/bin/python bench/live_publish.py [--calls 200000]

Cases (in-memory layer unless named): nobody watching; one viewer (the call itself, then the
whole cost per row once the background task has handed everything to the layer and the
viewer's channel has been read); a batch of 10 rows per call; and, when `redis-server` is on
the PATH, the Redis layer with nobody watching (the presence answer cached) and with a viewer
in another process (the presence key set). No database is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_site.settings")
os.environ.pop("REDIS_URL", None)

import django  # noqa: E402

django.setup()

from channels.layers import get_channel_layer  # noqa: E402
from django.test import override_settings  # noqa: E402

from licensing.ledger import feed  # noqa: E402
from licensing.ledger.record import LedgerEntry  # noqa: E402


def entry(n: int) -> LedgerEntry:
    return LedgerEntry(
        request_id=f"{n:032x}",
        license_id=1,
        api_key_id=1,
        end_user_id=None,
        service="embeddings",
        requested_model="text-embedding-3-small",
        billed_model="text-embedding-3-small",
        provider="direct",
        connection="default",
        status_code=200,
        credits=12,
        total_tokens=5,
        institution_id=1,
        license_name="demo",
    )


async def per_call(calls: int, batch: list) -> float:
    """Seconds per publish() call alone; the queue is drained (untimed) before it is half
    full, so no call is a cheap drop."""
    spent = 0.0
    done = 0
    while done < calls:
        started = time.perf_counter()
        for _ in range(min(1000, calls - done)):
            feed.publish(batch)
        spent += time.perf_counter() - started
        done += 1000
        await _drain()
    return spent / calls


async def _drain() -> None:
    task = feed._publisher().task
    if task is not None:
        await task


async def watched_call_and_row(calls: int, batch: list) -> tuple[float, float]:
    """(the call alone, the call plus sending plus the viewer's channel read), per row."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(feed.ALL_GROUP, channel)
    feed.viewer_joined()
    try:
        call_time = 0.0
        started = time.perf_counter()
        rows = 0
        for _ in range(calls // len(batch)):
            t = time.perf_counter()
            feed.publish(batch)
            call_time += time.perf_counter() - t
            rows += len(batch)
            if len(feed._publisher().queue) >= feed.QUEUE_MAX // 2:
                await _drain_and_read(layer, channel)
        await _drain_and_read(layer, channel)
        total = time.perf_counter() - started
    finally:
        feed.viewer_left()
        await layer.group_discard(feed.ALL_GROUP, channel)
    return call_time / (rows / len(batch)), total / rows


async def _drain_and_read(layer, channel) -> None:
    await _drain()
    queue = getattr(layer, "channels", {}).get(channel)
    while queue is not None and not queue.empty():
        await layer.receive(channel)


def redis_server():
    if shutil.which("redis-server") is None:
        return None, None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


async def redis_cases(calls: int, url: str) -> dict[str, float]:
    layer = get_channel_layer()
    one = [entry(0)]
    results = {}
    feed.publish(one)  # the first call reads the presence key (absent): nobody watches
    await _drain()
    results["Redis layer, nobody watching"] = await per_call(calls, one)
    await feed.mark_present(layer)  # a viewer in another process
    feed._publisher().checked_at = -feed.PRESENCE_CHECK
    feed.publish(one)
    await _drain()
    results["Redis layer, a viewer elsewhere: the call"] = await per_call(calls // 10, one)
    await _drain()
    await layer.flush()
    await layer.close_pools()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    calls = parser.parse_args().calls
    one, ten = [entry(0)], [entry(n) for n in range(10)]
    results: dict[str, float] = {}

    async def in_memory():
        results["nobody watching"] = await per_call(calls, one)
        call, row = await watched_call_and_row(calls // 10, one)
        results["one viewer: the call (1 row)"] = call
        results["one viewer: call + send + read, per row"] = row
        call, row = await watched_call_and_row(calls // 10, ten)
        results["one viewer: the call (10 rows)"] = call
        results["one viewer, 10-row batches: per row in all"] = row

    asyncio.run(in_memory())
    proc, url = redis_server()
    if proc is not None:
        layer_config = {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], "prefix": "bench:live", "capacity": 100, "expiry": 10},
        }
        try:
            with override_settings(CHANNEL_LAYERS={"default": layer_config}):
                results.update(asyncio.run(redis_cases(calls, url)))
        finally:
            proc.terminate()
            proc.wait(10)
    width = max(map(len, results))
    for name, seconds in results.items():
        print(f"{name:<{width}}  {seconds * 1e9:>9,.0f} ns")
    print(f"(stats: {feed.stats})")


if __name__ == "__main__":
    main()
