"""Node packages a test needs (a certified OpenID Provider, the Codex CLI), installed exactly as
locked: `npm ci` of a folder's package.json and package-lock.json (integrity hashes checked)
into `var/cache/<name>-<digest of the two files>/`, once per lock, in a scratch directory
first so that an interrupted install is never used. Skipped, saying why, when node or npm is
missing or the npm registry is unreachable; any other npm failure fails the test."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from core.config import BASE_DIR

_FILES = ("package.json", "package-lock.json")
_OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH")


def npm_installed(package: Path, name: str) -> Path:
    """The folder whose node_modules holds `package`'s locked dependencies."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip(f"node and npm are needed for {name}")
    digest = hashlib.sha256(b"".join((package / f).read_bytes() for f in _FILES)).hexdigest()
    target = BASE_DIR / "var" / "cache" / f"{name}-{digest[:16]}"
    if (target / "node_modules").is_dir():
        return target
    scratch = target.with_name(f"{target.name}.{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for file in _FILES:
        shutil.copy(package / file, scratch / file)
    done = subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        output = done.stdout + done.stderr
        if any(code in output for code in _OFFLINE):
            pytest.skip(f"the npm registry is unreachable: {output.strip()[-300:]}")
        pytest.fail(f"npm ci of {package} failed: {output[-2000:]}")
    try:
        scratch.rename(target)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
    return target
