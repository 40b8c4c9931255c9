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


def test_the_sqlite_pass_skips_only_modules_that_cannot_hold_its_tests(pytestconfig):
    """`--sqlite-differences` does not import a module outside SQLITE_AREAS whose text never
    names `both_databases`: sound only while the marker is written in the test modules
    themselves, never handed out by a helper module (as tests/browser.py hands out `slow`)."""
    from tests import conftest

    handing_out = [
        path.relative_to(conftest.TESTS).as_posix()
        for path in conftest.TESTS.rglob("*.py")
        if not path.name.startswith("test_")
        and path.name != "conftest.py"
        and "both_databases" in path.read_text(encoding="utf-8")
    ]
    assert handing_out == []

    class Config:
        def __init__(self, sqlite):
            self.sqlite = sqlite

        def getoption(self, name):
            assert name == "--sqlite-differences"
            return self.sqlite

    ignore = conftest.pytest_ignore_collect
    marked = conftest.TESTS / "console" / "test_admin.py"  # marked both_databases
    plain = conftest.TESTS / "ops" / "test_lint.py"
    money = conftest.TESTS / "money" / "test_leases.py"
    assert "both_databases" in marked.read_text(encoding="utf-8")
    assert "both_databases" not in money.read_text(encoding="utf-8")
    assert [ignore(p, Config(True)) for p in (marked, plain, money)] == [None, True, None]
    assert [ignore(p, Config(False)) for p in (marked, plain, money)] == [None, None, None]
