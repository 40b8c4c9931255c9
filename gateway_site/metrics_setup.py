"""PROMETHEUS_MULTIPROC_DIR: where the worker processes of one server write their metrics.

prometheus-client chooses its multiprocess mode once, when it is first imported, from this
variable; so the server's entry points (gateway_site.asgi, gateway_site.gunicorn_conf) call in
here before anything imports it. Management commands never do: they count in memory, unscraped.

Who owns (creates and empties) the directory:
- gunicorn with `gateway_site.gunicorn_conf` (the master): it empties the directory at start
  (`on_starting`), before its workers, which inherit the variable, and marks each worker that
  ends as dead (`child_exit`).
- otherwise, with the variable set by the operator: the operator (empty it before start).
- otherwise: a default directory `var/prometheus-multiproc/<pid>`, keyed by the process that
  started the server (a worker's multiprocessing parent, or the process itself), so a new run
  never sees an old run's files; the directories of processes no longer alive are removed.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
from pathlib import Path

from core.config import get_config

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_BASE = Path(__file__).resolve().parent.parent / "var" / "prometheus-multiproc"


def metrics_enabled() -> bool:
    return get_config().GATEWAY_METRICS


def ensure_multiproc_dir() -> Path | None:
    """In a serving process: the directory this process writes to (None: single-process)."""
    if not metrics_enabled():
        return None
    if os.environ.get(VARIABLE):
        path = Path(os.environ[VARIABLE])
        path.mkdir(parents=True, exist_ok=True)
        return path
    if "prometheus_client.values" in sys.modules:
        return None  # imported already (an embedding process, the tests): in memory
    parent = multiprocessing.parent_process()
    owner = parent.pid if parent is not None else os.getpid()
    path = DEFAULT_BASE / str(owner)
    if parent is None:
        _empty(path)  # a recycled pid's leftovers
    path.mkdir(parents=True, exist_ok=True)
    _remove_dead(DEFAULT_BASE)
    os.environ[VARIABLE] = str(path)
    return path


def own_multiproc_dir() -> Path | None:
    """In a supervisor, before its workers start: the directory, emptied, in the environment
    they inherit."""
    if not metrics_enabled():
        return None
    path = Path(os.environ.get(VARIABLE) or DEFAULT_BASE / str(os.getpid()))
    _empty(path)
    path.mkdir(parents=True, exist_ok=True)
    _remove_dead(DEFAULT_BASE)
    os.environ[VARIABLE] = str(path)
    return path


def mark_dead(pid: int | None) -> None:
    """A worker ended: its live gauges (in-flight requests) stop counting."""
    if pid is None or not os.environ.get(VARIABLE) or not metrics_enabled():
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)


def _empty(path: Path) -> None:
    if path.is_dir():
        for item in path.glob("*.db"):
            item.unlink(missing_ok=True)


def _remove_dead(base: Path) -> None:
    if not base.is_dir():
        return
    for item in base.iterdir():
        if item.name.isdigit() and not _alive(int(item.name)):
            shutil.rmtree(item, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
