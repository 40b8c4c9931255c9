"""A small in-process cache for what every request reads (keys, licenses, catalog).

Entries expire after settings.GATEWAY["CACHE_TTL"] seconds; any save or delete of a catalog or
licensing row in this process clears every cache at once (see the apps' signals). Other worker
processes pick a change up when their entry expires.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from threading import Lock
from typing import Any

_MISSING = object()
_registry: list[TTLCache] = []


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
        entry = self._data.get(key, _MISSING)
        if entry is _MISSING:
            return default
        expires, value = entry
        if expires < time.monotonic():
            with self._lock:
                self._data.pop(key, None)
            return default
        return value

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


def clear_all() -> None:
    for cache in _registry:
        cache.clear()
