"""bench/run.py's issue-40 table: each target computed from the rounds, met or not."""

from __future__ import annotations

import importlib
import statistics
import sys
from dataclasses import dataclass, field

# bench/run.py is a script that imports its two sibling modules by their own names; they are
# given those names here rather than putting bench/ (run, review, upstream, ...) on sys.path.
for _name in ("profile_buckets", "venv_tools"):
    sys.modules.setdefault(_name, importlib.import_module(f"bench.{_name}"))
run = importlib.import_module("bench.run")


@dataclass
class Measured:
    rps: float = 0.0
    p50_ms: float = 0.0
    cpu: dict = field(default_factory=dict)
    ttfb: list[float] = field(default_factory=list)

    def cpu_ms(self, label: str) -> float:
        return self.cpu[label]


def _goals(gateway_cpu: float):
    c32 = {
        "gateway": [Measured(rps=910, cpu={"gateway": gateway_cpu})],
        run.IO_FLOOR: [Measured(rps=819)],
        "floor": [Measured(rps=2106, cpu={"floor": 0.64})],
    }
    c1 = {
        "gateway": [Measured(p50_ms=3.57)],
        run.IO_FLOOR: [Measured(p50_ms=2.81)],
        "upstream": [Measured(p50_ms=1.01)],
    }
    return {g.what: g for g in run.issue40_goals(c32, c1, None)}


def _verdict(goal) -> bool:
    return goal.met(statistics.median(goal.values))


def test_the_issue_40_targets_from_one_round():
    goals = _goals(gateway_cpu=0.90)
    assert goals["gateway req/s @32 / I/O floor's"].values == [910 / 819]
    assert _verdict(goals["gateway req/s @32 / I/O floor's"])
    cpu = goals["gateway CPU ms/req / bare floor's"]
    assert cpu.values == [0.90 / 0.64] and not _verdict(cpu)
    assert _verdict(goals["gateway's own p50 @1 over the I/O floor, ms"])
    assert _verdict(goals["I/O floor: added p50 @1 over upstream alone, ms"])
    assert _verdict(goals["gateway: added p50 @1 over upstream alone, ms"])
    # No stream case in this run: not measured, never "met".
    assert goals["gateway's own stream TTFB p50 over the I/O floor, ms"].values is None
    assert _verdict(_goals(gateway_cpu=0.83)["gateway CPU ms/req / bare floor's"])
