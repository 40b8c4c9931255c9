"""Crash points: where the crash tests kill a process on the money path (SIGKILL: no clean-up,
no `finally`, as a power cut or the kernel's OOM killer would), to show that nothing
acknowledged is lost and nothing is charged twice (tests/money/test_crashes.py).

`GATEWAY_CRASH_POINTS` (tests only) names the points armed; `reached(name)` kills the process at
an armed one. Unarmed, a point costs the truth test of one module global.
"""

from __future__ import annotations

import os
import signal

from core.config import get_config

# The points, in the order a request meets them (each named where it is reached).
POINTS = (
    "budget.held",  # inference.pipeline: the hold is committed, the provider not yet called
    "ledger.called",  # licensing.ledger.actions: the provider answered, its row not yet written
    "ledger.committed",  # licensing.ledger.actions: the row is committed, the client not answered
    "spool.appended",  # licensing.ledger.actions: the row is in the spool, not answered
    "spool.replayed",  # licensing.ledger.spool: a replayed line is committed, its file kept
    "lease.closing",  # licensing.ledger.leases: a lease's rows are written, its close not sent
    "lease.closed",  # licensing.ledger.leases: the close is committed (holds for what is left)
)

_armed: frozenset[str] | None = None


def reached(name: str) -> None:
    global _armed
    if _armed is None:
        _armed = frozenset(get_config().GATEWAY_CRASH_POINTS)
        unknown = _armed - set(POINTS)
        assert not unknown, f"GATEWAY_CRASH_POINTS names no point: {sorted(unknown)}"
    if _armed and name in _armed:
        os.kill(os.getpid(), signal.SIGKILL)
