"""The ASGI lifespan of a worker (uvicorn runs it: `lifespan` is `auto` in uvicorn-worker).

At shutdown, after the worker's last request has ended and written its ledger row, the leases
of its busy wallets (licensing.ledger.leases) are closed at once: left open, each would count
on its wallet's `reserved` until it expired (GATEWAY_BUDGET_RESERVATION_SECONDS), held by no
worker alive, after every deploy or scale-down. Then its metrics still in memory are written
(core.metrics, "Batched writes"), for the scrapes of the workers that stay.
"""

from __future__ import annotations

from core import metrics
from licensing.ledger.leases import close_at_exit


async def lifespan(scope, receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close_at_exit()
            metrics.flush()
            await send({"type": "lifespan.shutdown.complete"})
            return
