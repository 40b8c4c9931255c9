"""The configuration docs and core.config.Config agree: every variable the gateway reads is in a
docs table with its default, and every GATEWAY_* variable the docs name is one it reads.

The docs are README.md and every docs/**/*.md read together, so the table may live in either.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.config import BASE_DIR, Config

ROOT = Path(__file__).resolve().parents[2]

# GATEWAY_* names the docs use that are not the server's settings.
NOT_SETTINGS = {
    "GATEWAY_KEY": "the API key the docs' client examples read from their own environment",
    "GATEWAY_SCHEMATHESIS_EXAMPLES": "a knob of the test suite (tests/api/test_schemathesis.py)",
}
# Defaults the docs say in words rather than as the value.
IN_WORDS = {
    "SECRET_KEY": "a development key",
    "DATABASE_URL": "`sqlite:///db.sqlite3`",
    "LOG_FORMAT": "`json`",
    "GATEWAY_WORKERS": "one per core",
    "EMAIL_BACKEND": "console",
}


def docs_text() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return "\n".join(page.read_text() for page in pages if page.is_file())


def table_rows(text: str) -> dict[str, list[str]]:
    """Each variable named (backticked) in the first cell of a table row: that row's cells."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]):
            rows.setdefault(name, cells)
    return rows


def spellings(name: str, default: Any) -> list[str]:
    """How the docs may write `default` in the Default column."""
    if name in IN_WORDS:
        return [IN_WORDS[name]]
    if isinstance(default, bool):
        return ["`true`", "`on`"] if default else ["`false`", "`off`"]
    if default is None or default in ("", [], frozenset()):
        return ["unset", "empty"]
    if isinstance(default, Path):
        return [f"`{default.relative_to(BASE_DIR)}`"]
    if isinstance(default, float) and default.is_integer():
        return [f"`{int(default)}`"]
    if isinstance(default, frozenset):
        return [f"`{','.join(str(item) for item in sorted(default))}`"]
    if isinstance(default, list):
        return [f"`{','.join(default)}`"]
    return [f"`{default}`"]


def test_every_variable_is_documented_with_its_default():
    rows = table_rows(docs_text())
    missing, wrong = [], []
    for name, field in Config.model_fields.items():
        if name not in rows:
            missing.append(name)
            continue
        default_cell = rows[name][1]
        if not any(spelling in default_cell for spelling in spellings(name, field.default)):
            wrong.append(f"{name}: {default_cell!r}, not {spellings(name, field.default)}")
    assert not missing, f"not in a configuration table: {missing}"
    assert not wrong, "documented with another default:\n" + "\n".join(wrong)


def test_every_documented_gateway_variable_is_read():
    fields = set(Config.model_fields)
    unknown = set()
    for name in set(re.findall(r"\bGATEWAY_[A-Z0-9_]*[A-Z0-9](?:_\*)?", docs_text())):
        if name.endswith("_*"):
            if not any(field.startswith(name[:-1]) for field in fields):
                unknown.add(name)
        elif name not in fields and name not in NOT_SETTINGS:
            unknown.add(name)
    assert not unknown, f"documented but not read by core.config.Config: {sorted(unknown)}"


def test_every_field_has_a_description():
    assert [name for name, field in Config.model_fields.items() if not field.description] == []
