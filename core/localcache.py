"""A small in-process cache for what every request reads (keys, licenses, catalog), and its
invalidation across worker processes.

Entries expire after settings.GATEWAY["CACHE_TTL"] seconds; an expired one is still answered
while the database is unreachable (`stale`). A save or delete of a catalog or
licensing row (the apps' signals) calls `clear_all()`: this process's caches are cleared at
once, and when the transaction commits every other process is told:

- with `REDIS_URL`: a message on a Redis pub/sub channel; each process has a listener thread
  that clears its caches on receipt (any host);
- without it: a random token written to `GATEWAY_INVALIDATION_FILE` (var/cache-generation);
  each process reads the file at most every POLL_INTERVAL seconds, from a cache lookup, and
  clears its caches when the token changed (one host only).

A request never waits on Redis; the file poll costs one small read per POLL_INTERVAL.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from threading import Lock
from typing import Any

from django.core.signals import setting_changed

log = logging.getLogger("gateway")

POLL_INTERVAL = 0.25  # seconds between two looks at the shared generation
REDIS_CHANNEL = "gateway:cache-invalidate"

_registry: list[TTLCache] = []
_next_poll = 0.0


class TTLCache:
    def __init__(self, name: str, max_entries: int = 10_000):
        self.name = name
        self.max_entries = max_entries
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = Lock()
        self.generation = 0
        _registry.append(self)

    @staticmethod
    def _ttl() -> float:
        from django.conf import settings

        return settings.GATEWAY["CACHE_TTL"]

    def get(self, key, default=None):
        now = time.monotonic()
        if now >= _next_poll:
            _poll(now)
        entry = self._data.get(key)
        if entry is None:
            return default
        expires, value = entry
        if expires < now:  # kept (max_entries bounds them) for `stale`
            return default
        return value

    def stale(self, key):
        """The entry even if it expired (None when there is none, e.g. since a clear), kept for
        another TTL: what a lookup answers when the database does not (docs/reliability.md).
        A change made before the outage cleared it; none can be made during one."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            self._data[key] = (time.monotonic() + self._ttl(), entry[1])
            return entry[1]

    def set(self, key, value, generation: int | None = None) -> None:
        """Store `value`; skipped if a clear happened since `generation` was read (stale)."""
        with self._lock:
            if generation is not None and generation != self.generation:
                return
            self._data[key] = (time.monotonic() + self._ttl(), value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.generation += 1


def clear_local() -> None:
    """Clear this process's caches only."""
    for cache in _registry:
        cache.clear()


def clear_all() -> None:
    """Clear this process's caches now, and every process's once the transaction commits."""
    from django.db import connection, transaction

    clear_local()
    if connection.in_atomic_block:
        # Before the commit other processes would re-read (and cache) the old rows.
        transaction.on_commit(_publish)
    else:
        _publish()


def _publish() -> None:
    clear_local()
    try:
        _transport().publish()
    except Exception:  # never fail the save that asked for it
        log.exception("cache invalidation not published; other workers catch up within the TTL")


def _poll(now: float) -> None:
    global _next_poll
    _next_poll = now + POLL_INTERVAL
    try:
        _transport().poll()
    except Exception:  # pragma: no cover - the TTL still bounds staleness
        log.exception("cache invalidation poll failed")


# --- transports ----------------------------------------------------------------------------


class FileTransport:
    """A token in a file: writers replace it atomically, readers compare it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.seen = self._read()

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def poll(self) -> None:
        current = self._read()
        if current != self.seen:
            self.seen = current
            clear_local()

    def publish(self) -> None:
        token = os.urandom(16).hex().encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(token)
        os.replace(tmp, self.path)
        self.seen = token

    def close(self) -> None:
        pass


class RedisTransport:
    """Redis pub/sub: PUBLISH on a change, a listener thread per process."""

    def __init__(self, url: str):
        import redis

        self.url = url
        self.sender = f"{os.getpid()}:{os.urandom(4).hex()}".encode()
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = Lock()

    def poll(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._listen, name="cache-invalidation", daemon=True
                    )
                    self._thread.start()

    def publish(self) -> None:
        self.client.publish(REDIS_CHANNEL, self.sender)

    def close(self) -> None:
        self._stop.set()

    def _listen(self) -> None:
        import redis

        failing = False
        while not self._stop.is_set():
            try:
                pubsub = self.client.pubsub()
                pubsub.subscribe(REDIS_CHANNEL)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        # (Re)connected: whatever was published meanwhile was missed.
                        clear_local()
                        if failing:
                            log.warning("cache invalidation: Redis is back")
                            failing = False
                    elif message["type"] == "message" and message["data"] != self.sender:
                        clear_local()
                pubsub.close()
            except (redis.RedisError, OSError) as exc:
                if not failing:
                    log.warning(
                        "cache invalidation: Redis unreachable (%s); caches expire after the "
                        "TTL until it is back",
                        exc.__class__.__name__,
                    )
                    failing = True
                self._stop.wait(1.0)


_transport_lock = Lock()
_current: FileTransport | RedisTransport | None = None


def _transport() -> FileTransport | RedisTransport:
    global _current
    current = _current
    if current is not None:
        return current
    from django.conf import settings

    with _transport_lock:
        if _current is None:
            if settings.REDIS_URL:
                _current = RedisTransport(settings.REDIS_URL)
            else:
                _current = FileTransport(settings.GATEWAY_INVALIDATION_FILE)
        return _current


def reset_transport() -> None:
    global _current, _next_poll
    with _transport_lock:
        if _current is not None:
            _current.close()
        _current = None
        _next_poll = 0.0


def _on_setting_changed(setting, **kwargs):
    if setting in {"REDIS_URL", "GATEWAY_INVALIDATION_FILE"}:
        reset_transport()


setting_changed.connect(_on_setting_changed, dispatch_uid="localcache-transport")
