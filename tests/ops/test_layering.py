"""The apps import downwards only (core <- catalog <- licensing <- inference): import-linter's
contracts in pyproject.toml, run as part of the suite so a wrong-way import fails CI."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


APPS = ["core", "catalog", "licensing", "inference", "gateway_site"]


def _circles(graph, package: str) -> list[list[str]]:
    """The import circles among `package`'s modules: strongly connected components of more
    than one module (Tarjan), each sorted."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def import_graph():
    import grimp

    return grimp.build_graph(*APPS, cache_dir=None)


@pytest.mark.parametrize("app", APPS)
def test_no_import_circle_within_an_app(import_graph, app):
    """Imports inside an app form no circle (a module-level or a function-level import alike:
    grimp sees both). catalog.registry's dotted paths to inference are strings, not imports."""
    assert _circles(import_graph, app) == []
