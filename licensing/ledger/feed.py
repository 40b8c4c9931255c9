"""The live feed of ledger rows, its publishing side: the rows to the channel layer (the page
that shows them is licensing's console, `live.py`, and the websocket consumer `consumers.py`).

`publish` is called by the ledger's door (licensing.ledger.actions), on the event loop, once a
batch of rows is committed. It never blocks, never awaits delivery and never raises: it turns
each row into a compact event on a bounded queue of its event loop (a full queue drops and
counts in `stats`), and one background task per loop hands them to the channel layer, one
message per group: the row's institution's group and the superusers' group. A layer that fails
or hangs only costs that task (each send has a time-out; the queue then fills and drops), never
a request.

Nobody watching costs almost nothing (see `publish`): consumers of this process count
themselves in `viewers`; with a shared layer (Redis) consumers anywhere keep a presence key
alive, which the background task reads at most once per PRESENCE_CHECK seconds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC

from channels.layers import get_channel_layer
from django.core.signals import setting_changed
from django.dispatch import receiver

from core import metrics
from core.pgpool import per_loop

from ..models import Transaction
from .record import LEDGER_COLUMNS

logger = logging.getLogger("gateway")

ALL_GROUP = "ledger.all"  # superusers: every institution's rows
QUEUE_MAX = 2000  # events waiting per event loop; more are dropped (and counted)
ROWS_PER_MESSAGE = 50  # rows in one channel-layer message
SEND_TIMEOUT = 5.0  # seconds one group_send may take before its rows are given up
PRESENCE_TTL = 75  # seconds a viewer's presence key outlives its last refresh
PRESENCE_CHECK = 1.0  # seconds a shared layer's "anybody watching?" answer is trusted
LOG_EVERY = 60.0  # seconds between two warnings about lost events


def institution_group(institution_id: int) -> str:
    return f"ledger.institution.{institution_id}"


@dataclass
class Stats:
    """This process's counts of events: sent to the layer, dropped on a full queue, lost to a
    layer that failed or timed out."""

    sent: int = 0
    dropped: int = 0
    failed: int = 0


stats = Stats()
viewers = 0  # consumers connected in this process
_warned_at = -LOG_EVERY


def event_of(row, license_name: str) -> dict:
    """The event of one ledger row (a `LedgerEntry` or a `Transaction`): what the page shows,
    the columns of LEDGER_COLUMNS marked for the feed."""
    event = {key: getattr(row, attname) for key, attname in _FEED}
    event["created_at"] = row.created_at.astimezone(UTC).isoformat(timespec="milliseconds")
    event["license"] = license_name
    event["outcome"] = str(row.outcome)
    return event


_ATTNAMES = {f.name: f.attname for f in Transaction._meta.concrete_fields}
# (event key, attribute) of the feed's columns; the license goes by name (`event_of`'s
# argument: a path through a relation, which an entry does not have).
_FEED = [(c.feed, _ATTNAMES[c.path]) for c in LEDGER_COLUMNS if c.feed and c.path in _ATTNAMES]


def publish(entries) -> None:
    """Queue committed ledger rows (`LedgerEntry`s) for the feed's viewers; returns at once."""
    if not viewers and not _shared_layer():
        return  # the in-memory layer: nobody in this process watches, nobody anywhere does
    try:
        publisher = _publisher()
        if not viewers and publisher.known_unwatched():
            return
        publisher.put(entries)
    except Exception:  # a feed is never worth a failed request
        stats.failed += len(entries)
        metrics.live_feed_lost("failed", len(entries))
        _warn("live feed: events could not be queued", exc_info=True)


def viewer_joined() -> None:
    global viewers
    viewers += 1


def viewer_left() -> None:
    global viewers
    viewers = max(0, viewers - 1)


async def mark_present(layer) -> None:
    """A viewer is connected: tell the publishers of every process sharing the layer."""
    if _is_shared(layer):
        await layer.connection(0).set(_presence_key(layer), b"1", ex=PRESENCE_TTL)


class Publisher:
    """One per event loop: the events waiting, and the task that hands them to the layer."""

    def __init__(self):
        self.queue: deque[tuple[int | None, dict]] = deque()
        self.task: asyncio.Task | None = None
        self.watched = False  # shared layer: the last presence answer, and when it was read
        self.checked_at = -PRESENCE_CHECK

    def known_unwatched(self) -> bool:
        fresh = time.monotonic() - self.checked_at < PRESENCE_CHECK
        return fresh and not self.watched

    def put(self, entries) -> None:
        room = max(0, QUEUE_MAX - len(self.queue))
        if len(entries) > room:
            stats.dropped += len(entries) - room
            metrics.live_feed_lost("queue_full", len(entries) - room)
            _warn("live feed: queue full, events dropped")
            entries = entries[:room]
        for entry in entries:
            self.queue.append((entry.institution_id, event_of(entry, entry.license_name)))
        if self.queue and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        layer = get_channel_layer()
        while self.queue:
            if not viewers and not await self._watched(layer):
                self.queue.clear()
                return
            batch = [self.queue.popleft() for _ in range(len(self.queue))]
            for group, rows in _messages(batch):
                await self._send(layer, group, rows)

    async def _send(self, layer, group: str, rows: list[dict]) -> None:
        try:
            message = {"type": "ledger.rows", "rows": rows}
            await asyncio.wait_for(layer.group_send(group, message), SEND_TIMEOUT)
            stats.sent += len(rows)
        except Exception as exc:
            stats.failed += len(rows)
            metrics.live_feed_lost("failed", len(rows))
            timeout = isinstance(exc, TimeoutError)
            reason = f"timed out after {SEND_TIMEOUT:g} s" if timeout else "failed"
            _warn(f"live feed: {len(rows)} events to {group} {reason}", exc_info=not timeout)

    async def _watched(self, layer) -> bool:
        """Whether anybody watches anywhere (shared layer: the presence key), re-read at most
        once per PRESENCE_CHECK seconds."""
        if not _is_shared(layer):
            return False
        if time.monotonic() - self.checked_at >= PRESENCE_CHECK:
            try:
                found = layer.connection(0).exists(_presence_key(layer))
                self.watched = bool(await asyncio.wait_for(found, SEND_TIMEOUT))
            except Exception:
                self.watched = True  # unknown: send, and let the layer's own errors count
                _warn("live feed: the presence check failed", exc_info=True)
            self.checked_at = time.monotonic()
        return self.watched


_publisher = per_loop(Publisher)


def _messages(batch: list[tuple[int | None, dict]]):
    """(group, rows) pairs: every row to the superusers' group and to its institution's group,
    at most ROWS_PER_MESSAGE rows a message."""
    groups: dict[str, list[dict]] = {ALL_GROUP: []}
    for institution_id, event in batch:
        groups[ALL_GROUP].append(event)
        if institution_id is not None:
            groups.setdefault(institution_group(institution_id), []).append(event)
    for group, rows in groups.items():
        for start in range(0, len(rows), ROWS_PER_MESSAGE):
            yield group, rows[start : start + ROWS_PER_MESSAGE]


@functools.cache
def _shared_layer() -> bool:
    return _is_shared(get_channel_layer())


def _is_shared(layer) -> bool:
    """A layer that reaches other processes (Redis), as opposed to this process's memory."""
    return hasattr(layer, "connection") and hasattr(layer, "prefix")


def _presence_key(layer) -> str:
    return f"{layer.prefix}:viewers"


@receiver(setting_changed)
def _layer_changed(*, setting, **kwargs):
    if setting == "CHANNEL_LAYERS":
        _shared_layer.cache_clear()


def _warn(message: str, exc_info: bool = False) -> None:
    """At most one warning per LOG_EVERY seconds: a broken layer must not flood the log."""
    global _warned_at
    now = time.monotonic()
    if now - _warned_at >= LOG_EVERY:
        _warned_at = now
        logger.warning("%s (so far: %s)", message, stats, exc_info=exc_info)
