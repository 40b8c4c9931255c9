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
    return _Tarjan(edges).circles()


class _Tarjan:
    """Tarjan's strongly connected components of a directed graph, found depth first."""

    def __init__(self, edges: dict[str, set[str]]):
        self.edges = edges
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[list[str]] = []

    def circles(self) -> list[list[str]]:
        """The components of more than one node, each sorted."""
        for node in sorted(self.edges):
            if node not in self.index:
                self.visit(node)
        return self.found

    def visit(self, v: str) -> None:
        self.index[v] = self.low[v] = len(self.index)
        self.stack.append(v)
        self.on_stack.add(v)
        for w in self.edges[v]:
            if w not in self.index:
                self.visit(w)
                self.low[v] = min(self.low[v], self.low[w])
            elif w in self.on_stack:
                self.low[v] = min(self.low[v], self.index[w])
        if self.low[v] == self.index[v]:
            self.pop_component(v)

    def pop_component(self, root: str) -> None:
        """Take `root`'s component off the stack, and keep it when it is a circle."""
        component = []
        while True:
            w = self.stack.pop()
            self.on_stack.discard(w)
            component.append(w)
            if w == root:
                break
        if len(component) > 1:
            self.found.append(sorted(component))


@pytest.fixture(scope="module")
def import_graph():
    import grimp

    return grimp.build_graph(*APPS, cache_dir=None)


@pytest.mark.parametrize("app", APPS)
def test_no_import_circle_within_an_app(import_graph, app):
    """Imports inside an app form no circle (a module-level or a function-level import alike:
    grimp sees both). catalog.registry's dotted paths to inference are strings, not imports."""
    assert _circles(import_graph, app) == []
