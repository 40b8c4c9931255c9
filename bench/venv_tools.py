"""A benchmark tool (LiteLLM, py-spy) pinned in a virtual environment of its own under var/,
made once and reused while its pin is unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def install(spec: str, venv: Path, exe_name: str, timeout: float) -> tuple[Path | None, str]:
    """The tool's executable; (None, why) when it cannot be installed."""
    exe, marker = venv / "bin" / exe_name, venv / "bench-installed"
    if exe.exists() and marker.exists() and marker.read_text().strip() == spec:
        return exe, ""
    base = getattr(sys, "_base_executable", sys.executable)  # not a venv of our .venv
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    try:
        subprocess.run([base, "-m", "venv", str(venv)], capture_output=True, check=True)
        r = subprocess.run([*pip, spec], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not make {venv}: {exc}"
    if r.returncode or not exe.exists():
        lines = [x[:300] for x in (r.stdout + r.stderr).splitlines() if "is ignored:" not in x]
        return None, f"pip install {spec} failed:\n" + "\n".join(lines[-15:])
    marker.write_text(spec + "\n")
    return exe, ""
