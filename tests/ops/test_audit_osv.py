"""scripts/audit_osv.py, the offline audit of the locks against a local copy of OSV advisories
(docs/deployment.md, "Dependencies locked with hashes"): which pins an advisory affects, in the
PyPA database's YAML and OSV's JSON; and the benchmark's LiteLLM pin stays off the poisoned
releases."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "audit_osv.py"


def advisory(package: str, *, events=None, versions=(), withdrawn=None, ident="PYSEC-0000-1"):
    record = {
        "id": ident,
        "aliases": ["CVE-0000-1"],
        "summary": f"something wrong in {package}",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": package},
                "ranges": [{"type": "ECOSYSTEM", "events": events or []}],
                "versions": list(versions),
            }
        ],
    }
    if withdrawn:
        record["withdrawn"] = withdrawn
    return record


def run(directory: Path, lock: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(directory), str(lock)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def lock(tmp_path):
    path = tmp_path / "lock.txt"
    path.write_text(
        "Django==5.2.19 \\\n    --hash=sha256:" + "0" * 64 + "\n"
        "pyyaml==6.0.3 \\\n    --hash=sha256:" + "1" * 64 + "\n"
        "uvloop==0.23.0 ; sys_platform != 'win32' \\\n    --hash=sha256:" + "2" * 64 + "\n"
        "requests==2.34.2 \\\n    --hash=sha256:" + "3" * 64 + "\n"
    )
    return path


@pytest.mark.parametrize(
    "events, versions, affected",
    [
        ([{"introduced": "0"}, {"fixed": "5.2.20"}], (), True),
        ([{"introduced": "0"}, {"fixed": "5.2.19"}], (), False),  # fixed in the pinned release
        ([{"introduced": "5.2"}, {"last_affected": "5.2.19"}], (), True),
        ([{"introduced": "5.2"}, {"last_affected": "5.2.18"}], (), False),
        ([{"introduced": "6.0"}], (), False),  # not yet
        ([{"introduced": "4.0"}, {"fixed": "4.2.1"}, {"introduced": "5.2.10"}], (), True),
        ([{"introduced": "4.0"}, {"fixed": "4.2.1"}, {"introduced": "5.2.20"}], (), False),
        ([], ("5.2.18", "5.2.19"), True),  # listed versions only
    ],
)
def test_a_pin_in_an_affected_range_is_found(tmp_path, lock, events, versions, affected):
    advisories = tmp_path / "vulns" / "django"
    advisories.mkdir(parents=True)
    record = advisory("django", events=events, versions=versions)
    (advisories / "PYSEC-0000-1.yaml").write_text(yaml.safe_dump(record))
    result = run(tmp_path / "vulns", lock)
    assert result.returncode == (1 if affected else 0), result.stdout + result.stderr
    assert ("django==5.2.19: PYSEC-0000-1 (CVE-0000-1)" in result.stdout) is affected
    assert "1 advisories read, 4 pins checked" in result.stdout


def test_osv_json_names_and_markers_and_withdrawn_records(tmp_path, lock):
    """OSV's JSON export (PyPI/all.zip, unzipped), a name spelled otherwise (PyYAML), a pin with
    an environment marker; a withdrawn advisory counts for nothing."""
    (tmp_path / "PYSEC-1.json").write_text(
        json.dumps(advisory("PyYAML", events=[{"introduced": "0"}], ident="PYSEC-1"))
    )
    (tmp_path / "GHSA-2.json").write_text(
        json.dumps(advisory("uvloop", versions=["0.23.0"], ident="GHSA-2"))
    )
    withdrawn = advisory("requests", events=[{"introduced": "0"}], withdrawn="2026-01-01")
    (tmp_path / "GHSA-3.json").write_text(json.dumps({**withdrawn, "id": "GHSA-3"}))
    result = run(tmp_path, lock)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pyyaml==6.0.3: PYSEC-1")
    assert lines[1].startswith("uvloop==0.23.0: GHSA-2")
    assert lines[2] == "3 advisories read, 4 pins checked, 2 affected"


def test_an_empty_directory_is_no_clean_audit(tmp_path, lock):
    result = run(tmp_path, lock)
    assert result.returncode == 2 and "no OSV record" in result.stderr


def test_the_bench_litellm_is_an_exact_pin_off_the_poisoned_releases():
    """LiteLLM 1.82.7 and 1.82.8 (March 2026) were poisoned on PyPI, and 1.107.0 was reported
    compromised (README, Decisions): the benchmark installs one exact release, none of them."""
    tree = ast.parse((ROOT / "bench" / "run.py").read_text())
    (spec,) = [
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", None) == "LITELLM_SPEC" for t in node.targets)
    ]
    name, _, version = spec.partition("==")
    assert name == "litellm[proxy]" and version.count(".") == 2, spec
    assert version not in {"1.82.7", "1.82.8", "1.107.0"}, spec
