"""mypy is clean on the apps, with the configuration committed in pyproject.toml ([tool.mypy]).

Runs once per CI run: on the PostgreSQL pass (and in a plain local run, DATABASE_URL unset), not
on the SQLite pass (.ci/run sets DATABASE_URL="" there), where it would only repeat itself.
With a warm .mypy_cache it takes about a second, cold about ten.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT

url = os.environ.get("DATABASE_URL")


@pytest.mark.skipif(
    url is not None and not url.startswith("postgres"),
    reason="run on the PostgreSQL pass only (the same code either way)",
)
def test_mypy_is_clean_on_the_apps():
    done = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
