"""Audits the locks' pins against a local copy of OSV advisories, offline.

    python scripts/audit_osv.py ADVISORIES [LOCK ...]     (LOCK: default constraints.txt)

ADVISORIES is a directory of OSV records for PyPI, in YAML or JSON, searched recursively: a
checkout of the PyPA advisory database (github.com/pypa/advisory-database, `vulns/<package>/`)
or the unzipped OSV export of the PyPI ecosystem (osv-vulnerabilities bucket, `PyPI/all.zip`).
It is the fallback for a machine that reaches neither pip-audit's services (PyPI's JSON API, the
OSV API) nor anything else online: docs/deployment.md, "Dependencies locked with hashes".
Prints one line per pinned version an advisory affects and exits 1 if there is any; the
advisories' date is what was copied, so say which copy was used when reporting a clean run.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` entry of a requirements/lock file."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if match:
            pins[normalized(match.group(1))] = match.group(2)
    return pins


def _events_affect(version: Version, events: list[dict]) -> bool:
    """OSV's ECOSYSTEM range: introduced / fixed / last_affected events, walked in version order."""
    points = []
    for event in events:
        for kind in ("introduced", "fixed", "last_affected"):
            if kind in event:
                value = "0" if event[kind] == "0" else event[kind]
                try:
                    points.append((Version(value), kind))
                except InvalidVersion:
                    continue
    affected = False
    for point, kind in sorted(points, key=lambda p: p[0]):
        if kind == "introduced" and point <= version:
            affected = True
        elif kind == "fixed" and point <= version:
            affected = False
        elif kind == "last_affected" and point < version:
            affected = False
    return affected


def affects(record: dict, name: str, version: str) -> bool:
    if record.get("withdrawn"):
        return False
    try:
        parsed = Version(version)
    except InvalidVersion:
        parsed = None
    for entry in record.get("affected", []):
        package = entry.get("package", {})
        if package.get("ecosystem") != "PyPI" or normalized(package.get("name", "")) != name:
            continue
        if version in entry.get("versions", []):
            return True
        for span in entry.get("ranges", []):
            if span.get("type") == "ECOSYSTEM" and parsed is not None:
                if _events_affect(parsed, span.get("events", [])):
                    return True
    return False


def records(directory: Path):
    for path in sorted(directory.rglob("*")):
        if path.suffix in {".yaml", ".yml"}:
            yield path, yaml.safe_load(path.read_text())
        elif path.suffix == ".json":
            yield path, json.loads(path.read_text())


def audit(directory: Path, locks: list[Path]) -> tuple[int, list[str]]:
    """(advisories read, findings)."""
    pins = {}
    for lock in locks:
        pins.update(lock_pins(lock))
    read, findings = 0, []
    for path, record in records(directory):
        if not isinstance(record, dict) or "affected" not in record:
            continue
        read += 1
        names = {normalized(a.get("package", {}).get("name", "")) for a in record["affected"]}
        for name in names & set(pins):
            if affects(record, name, pins[name]):
                aliases = ", ".join(record.get("aliases", []))
                summary = (record.get("summary") or record.get("details") or "").splitlines()
                findings.append(
                    f"{name}=={pins[name]}: {record.get('id', path.stem)}"
                    + (f" ({aliases})" if aliases else "")
                    + (f": {summary[0][:100]}" if summary else "")
                )
    return read, sorted(set(findings))


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[0])
    locks = [Path(a) for a in argv[1:]] or [
        Path(__file__).resolve().parent.parent / "constraints.txt"
    ]
    read, findings = audit(directory, locks)
    pinned = sum(len(lock_pins(lock)) for lock in locks)
    for line in findings:
        print(line)
    print(f"{read} advisories read, {pinned} pins checked, {len(findings)} affected")
    if read == 0:
        print(f"no OSV record under {directory}", file=sys.stderr)
        return 2
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
