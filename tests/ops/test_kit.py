"""The test kit and the clock themselves: a wait that does not come fails loudly with what was
left; the frozen clock stands still, moves only when advanced, and is given back."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from core import clock
from tests.kit import WaitTimeout, drain_background_writes, wait_until


def test_wait_until_returns_the_first_truthy_value():
    seen = iter([0, None, "", "found"])
    assert wait_until(lambda: next(seen), every=0) == "found"


def test_wait_until_fails_saying_what_was_left():
    with pytest.raises(WaitTimeout, match=r"not within 0\.05 s: 3 rows left"):
        wait_until(lambda: False, timeout=0.05, every=0.01, what=lambda: "3 rows left")


def test_the_drain_names_the_writes_it_gave_up_on():
    from inference import pipeline

    class Stuck:
        def __repr__(self):
            return "<Task pending name='ledger-write req-1'>"

    stuck = Stuck()
    pipeline._background.add(stuck)
    try:
        with pytest.raises(WaitTimeout, match="ledger-write req-1"):
            drain_background_writes(timeout=0.05)
    finally:
        pipeline._background.discard(stuck)
    drain_background_writes(timeout=0.05)  # nothing left: returns at once


def test_the_frozen_clock_stands_still_until_advanced_and_is_given_back():
    real = clock.now
    with clock.frozen(at=120.5) as frozen:
        assert clock.now() == clock.now() == 120.5
        frozen.advance(59.5)
        assert clock.now() == 180.0
        assert clock.utcnow() == datetime(1970, 1, 1, 0, 3, tzinfo=UTC)
    assert clock.now is real is time.time
