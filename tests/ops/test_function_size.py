"""No function of the apps is over 60 lines (docs/decisions/code-shape.md). ruff's C901 bounds
a function's branches and PLR0915 its statements; neither sees a function that is long without
being branched (a view building a page in one go), so this test counts its lines: one AST walk
of the apps, about a second."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ["core", "catalog", "licensing", "inference", "gateway_site"]
MAX_LINES = 60


def _functions(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, node.end_lineno - node.lineno + 1


def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    found = []
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node, lines in _functions(path):
                if lines > limit:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_of_the_apps_is_over_60_lines():
    found = long_functions()
    assert not found, (
        f"over {MAX_LINES} lines (split into named steps, docs/decisions/code-shape.md):\n"
        + "\n".join(found)
    )


def test_the_count_sees_a_long_function(tmp_path):
    app = tmp_path / "core"
    app.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (app / "long.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert long_functions(tmp_path) == [f"core/long.py:1 long ({MAX_LINES + 1} lines)"]
