"""ruff is clean on the whole repository with the configuration committed in pyproject.toml:
its rules, the import order, the format, and the gate that keeps functions short (C901 and
PLR0915, docs/decisions/code-shape.md). Run here so that CI fails on what a contributor's editor
would have shown; ruff reads the tree in well under a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=" ".join)
def test_ruff_is_clean(args):
    done = subprocess.run(
        [str(RUFF), *args, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
