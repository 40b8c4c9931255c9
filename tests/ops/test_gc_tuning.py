"""The server process's garbage-collector settings (gateway_site.asgi, GATEWAY_GC_THRESHOLD)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.processes import ROOT

PROBE = "import gc, gateway_site.asgi; print(gc.get_threshold(), gc.get_freeze_count() > 0)"


def probe(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_GC_THRESHOLD"}
    if value is not None:
        env["GATEWAY_GC_THRESHOLD"] = value
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_start_up_objects_are_frozen_and_the_young_generation_raised():
    done = probe(None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "(20000, 20, 50) True"


def test_the_threshold_is_configurable_and_default_keeps_python_s_own():
    assert probe("5000,10,10").stdout.split("\n")[-2] == "(5000, 10, 10) True"
    assert probe("default").stdout.split("\n")[-2] == "(700, 10, 10) False"


def test_a_bad_value_stops_the_server_with_a_clear_message():
    done = probe("lots")
    assert done.returncode != 0
    assert "GATEWAY_GC_THRESHOLD: not 1 to 3 positive integers or 'default': 'lots'" in done.stderr
