"""The steps of licensing.courses.usage without a database: one student's row from
what the four queries read (UsageTables), the allowance with a member's top-up, and the order
of the rows. The whole reader against the ledger is tests/console/test_course_usage.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from licensing.courses.usage import StudentUsage, UsageTables, _by_name
from licensing.ledger.budget import course_window_start

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)  # a Tuesday
TZ = "Europe/Berlin"
PERIOD = course_window_start("week", NOW, TZ)


def tables(allowance=1000, **override) -> UsageTables:
    values = {
        "course": SimpleNamespace(allowance=allowance, allowance_period="week"),
        "tz": TZ,
        "period_start": PERIOD,
        "totals": {
            5: {"requests": 3, "refusals": 1, "credits": 700, "first_at": NOW, "last_at": NOW},
            None: {"requests": 2, "refusals": 0, "credits": None, "first_at": NOW},
        },
        "models": {5: [(-1, "gpt-4o"), (-2, "gpt-4o-mini")], None: [(-1, "b"), (-1, "a")]},
        "period_used": {5: 400, 6: 50},
    }
    values.update(override)
    return UsageTables(**values)


def member(**override):
    values = {"paused": False, "top_up": 0, "top_up_window_start": None}
    values.update(override)
    return SimpleNamespace(**values)


def test_a_members_row():
    row = tables().row_of(5, member(paused=True), "Ada L")
    assert row == StudentUsage(
        end_user_id=5,
        student="Ada L",
        member=True,
        paused=True,
        requests=3,
        refusals=1,
        credits=700,
        models=("gpt-4o-mini", "gpt-4o"),  # most used first
        first_at=NOW,
        last_at=NOW,
        period_used=400,
        allowance=1000,
    )
    assert row.period_remaining == 600


def test_an_idle_members_row_has_zeros():
    row = tables().row_of(7, member(), "idle")
    assert (row.requests, row.refusals, row.credits, row.models) == (0, 0, 0, ())
    assert (row.first_at, row.last_at, row.period_used, row.allowance) == (None, None, 0, 1000)


def test_a_former_members_row():
    row = tables().row_of(6, None, "gone")
    assert (row.member, row.paused, row.period_used, row.allowance) == (False, False, 50, 1000)


def test_the_service_keys_row_has_no_allowance():
    row = tables().row_of(None, None, "(course keys)")
    assert (row.credits, row.models, row.period_used, row.allowance) == (0, ("a", "b"), 0, None)
    assert row.period_remaining is None


@pytest.mark.parametrize(
    ("top_up", "window", "allowance"),
    [
        (500, PERIOD, 1500),
        (500, PERIOD + timedelta(days=2), 1500),  # another instant of the same week
        (500, PERIOD - timedelta(days=1), 1000),  # last week's top-up
        (500, None, 1000),
        (0, PERIOD, 1000),
    ],
)
def test_the_allowance_takes_this_periods_top_up(top_up, window, allowance):
    assert tables().allowance_of(member(top_up=top_up, top_up_window_start=window)) == allowance


def test_no_allowance_no_limit():
    assert (
        tables(allowance=None).allowance_of(member(top_up=500, top_up_window_start=PERIOD)) is None
    )
    assert tables().allowance_of(None) == 1000


def test_rows_by_name_then_end_user():
    rows = [
        tables().row_of(3, None, "bob"),
        tables().row_of(2, None, "Ada"),
        tables().row_of(1, None, "bob"),
    ]
    assert [(r.student, r.end_user_id) for r in _by_name(rows)] == [
        ("Ada", 2),
        ("bob", 1),
        ("bob", 3),
    ]
