"""The one clock that fair-use windows and budget periods are counted on.

`now()` is wall-clock seconds (the epoch) and `utcnow()` the same instant as an aware UTC
datetime. Callers read them through the module (`clock.now()`), never `from core.clock import
now`: that attribute lookup is what lets a test swap the clock. The default is `time.time` itself,
so the hot path pays for no indirection and no check of whether a test has set something.

Tests stand the clock still with `frozen()` and move it with `advance()`, so nothing waits for a
minute or a day to turn. The frozen clock is this process's: a gateway served in a thread of the
test process sees it, worker subprocesses do not (their tests read the window from the answers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

now = time.time


def utcnow() -> datetime:
    return datetime.fromtimestamp(now(), UTC)


class FrozenClock:
    """A clock that stands still until advanced (seconds since the epoch)."""

    def __init__(self, at: float):
        self.at = float(at)

    def __call__(self) -> float:
        return self.at

    def advance(self, seconds: float) -> float:
        self.at += seconds
        return self.at


@contextmanager
def frozen(at: float | None = None) -> Iterator[FrozenClock]:
    """Stand the clock still at `at` (default: the real now) for the block; tests only."""
    global now
    clock = FrozenClock(time.time() if at is None else at)
    saved, now = now, clock
    try:
        yield clock
    finally:
        now = saved
