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
        "gateway": [Measured(rps=910, cpu={"gateway": gateway_cpu, "postgres": 0.40})],
        run.IO_FLOOR: [Measured(rps=819, cpu={"postgres": 0.20})],
        run.IO_HELD: [Measured(rps=780)],
        "floor": [Measured(rps=2106, cpu={"floor": 0.64})],
    }
    c1 = {
        "gateway": [Measured(p50_ms=3.57)],
        run.IO_FLOOR: [Measured(p50_ms=2.81)],
        run.IO_HELD: [Measured(p50_ms=3.01)],
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
    # Beside the floor that holds, and the database's share: shown, never a verdict.
    held = goals["gateway req/s @32 / held I/O floor's"]
    assert held.values == [910 / 780] and held.met is None
    assert goals["gateway's own p50 @1 over the held I/O floor, ms"].values == [3.57 - 3.01]
    assert goals["PostgreSQL CPU per request: gateway / I/O floor"].values == [0.40 / 0.20]


def test_against_a_revision_the_same_targets_and_this_head_s_ratios_to_it():
    """`run.py --against REF`: issue 40's table for the revision's gateway too, and this head's
    figures over the revision's, per round."""
    c32 = {
        "gateway": [
            Measured(rps=900, cpu={"gateway": 0.90}),
            Measured(rps=880, cpu={"gateway": 0.92}),
        ],
        run.BEFORE: [
            Measured(rps=800, cpu={run.BEFORE: 1.0, "postgres": 0.4}),
            Measured(rps=800, cpu={run.BEFORE: 1.0, "postgres": 0.4}),
        ],
        run.IO_FLOOR: [Measured(rps=850, cpu={"postgres": 0.2})] * 2,
        "floor": [Measured(cpu={"floor": 0.64}), Measured(cpu={"floor": 0.64})],
    }
    before = {g.what: g for g in run.issue40_goals(c32, None, None, gateway=run.BEFORE)}
    assert before["gateway req/s @32 / I/O floor's"].values == [800 / 850, 800 / 850]
    assert before["gateway CPU ms/req / bare floor's"].values == [1.0 / 0.64, 1.0 / 0.64]
    against = {g.what: g for g in run.against_goals(c32, None, None)}
    assert against["gateway CPU ms/req / the revision's"].values == [0.90, 0.92]
    assert against["gateway req/s @32 / the revision's"].values == [900 / 800, 880 / 800]
    assert against["gateway p50 @1 - the revision's, ms"].values is None


def test_against_a_revision_on_a_fresh_clone_shares_one_secrets_key(tmp_path, monkeypatch):
    """`--against` on a clone that never ran the gateway: the key is made before the checkout,
    so both gateways decrypt the connection the run configures (each used to make its own)."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "README").write_text("x\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    monkeypatch.setattr(run, "ROOT", repo)
    before = run.checkout_at("HEAD", tmp_path)
    key = repo / "var" / "encryption.key"
    assert key.read_bytes() == (before / "var" / "encryption.key").read_bytes()
    assert len(key.read_bytes().strip()) == 44  # a Fernet key
    assert key.stat().st_mode & 0o077 == 0
