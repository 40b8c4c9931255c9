"""docs/architecture.md's "Layout" names every module of the product, where it lives.

The Layout is a code block of folder lines: a folder (`licensing/`) and what is in it, its wings
indented under it (`  console/`), each continued on more-indented lines. What a folder line says
is a list of module names (`+` and `,` separated, each with what it is for in parentheses), and
a sub-folder it does not give a line of its own is named with its modules in the parentheses
that follow it (`admin/ (... keys, licenses, ...)`). A new module that is not named there fails
this test, which says which line it belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ["core", "catalog", "licensing", "inference", "gateway_site"]
# Folders that hold no module of ours to name: Django's migrations and templates.
NOT_MODULES = {"migrations", "templates"}
# Django fixes where commands live (`<app>/management/commands/<name>.py`): the Layout names
# them as the app's `commands`, and docs/commands.md lists them one by one.
AS_A_WHOLE = {"management/commands/": "commands"}
FOLDER_LINE = re.compile(r"(\S+/)(?:\s+|$)")


@dataclass
class Entry:
    """A folder line of the Layout and its continuation lines."""

    path: str  # "licensing/console/", or "" for a line that is not a folder
    indent: int
    column: int  # where its text starts: a line indented less starts another entry
    text: list[str] = field(default_factory=list)


def layout_block() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layout\n", 1)[1]
    match = re.search(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M)
    assert match, 'docs/architecture.md: no code block under "## Layout"'
    return match.group(1).splitlines()


def parse_layout(lines: list[str]) -> dict[str, str]:
    """Each folder the Layout gives a line: its full path -> its text. Folders nest by
    indentation; a line indented less than the current entry's text starts a new entry."""
    entries: list[Entry] = []
    folders: list[Entry] = []  # the open folders, outermost first
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entries and indent >= entries[-1].column:
            entries[-1].text.append(line.strip())
            continue
        while folders and folders[-1].indent >= indent:
            folders.pop()
        match = FOLDER_LINE.match(line.lstrip())
        if match is None:  # e.g. "Dockerfile, docker-compose.yml   the image"
            entries.append(Entry("", indent, indent + 1, [line.strip()]))
            folders.clear()
            continue
        folder = match.group(1)
        rest = line[indent + match.end() :]
        column = len(line) - len(rest.lstrip()) if rest.strip() else indent + len(folder) + 1
        entry = Entry(
            (folders[-1].path if folders else "") + folder, indent, column, [rest.strip()]
        )
        entries.append(entry)
        folders.append(entry)
    return {e.path: " ".join(e.text) for e in entries if e.path}


def named(word: str, text: str) -> bool:
    """`word` as a name of its own: not part of a longer name, a path or a dotted name."""
    return re.search(rf"(?<![\w/.]){re.escape(word)}(?![\w/])", text) is not None


def group_after(folder: str, text: str) -> str:
    """The parenthesised text right after `folder/` (balanced), where its modules are named."""
    match = re.search(rf"(?<![\w/.]){re.escape(folder)}/\s*\(", text)
    if match is None:
        return ""
    depth, start = 0, match.end() - 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i]
    return text[start + 1 :]


def is_named(relative: str, text: str) -> bool:
    """Whether the module at `relative` (from its entry's folder, no `.py`) is named in `text`."""
    for prefix, word in AS_A_WHOLE.items():
        if relative.startswith(prefix):
            return named(word, text)
    *folders, stem = relative.split("/")
    scope = text
    for folder in folders:
        scope = group_after(folder, scope)
    return named(stem, scope)


def product_modules() -> list[str]:
    modules = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if path.name == "__init__.py" or NOT_MODULES & set(relative.parts):
                continue
            modules.append(relative.with_suffix("").as_posix())
    return modules


def missing_from(layout: dict[str, str], modules: list[str]) -> dict[str, list[str]]:
    """The modules the Layout does not name, by the folder line that should name them."""
    missing: dict[str, list[str]] = {}
    for module in modules:
        owners = [path for path in layout if module.startswith(path)]
        owner = max(owners, key=len, default=module.split("/")[0] + "/")
        relative = module[len(owner) :]
        if not is_named(relative, layout.get(owner, "")):
            missing.setdefault(owner, []).append(relative)
    return missing


def test_the_parser_reads_the_block_s_style():
    lines = [
        "core/          config (typed), errors + jsonio (the contract's",
        "               shapes), db",
        "licensing/     models, admin (imports console/admin/), commands,",
        "               and its wings:",
        "  console/       admin/ (the admin pages: keys, licenses; base: scoping), review",
        "                 (the ledger's filters) + review_admin",
        "  ledger/        actions (the door)",
        "Dockerfile     the image",
        "tests/         one folder per area",
    ]
    layout = parse_layout(lines)
    assert sorted(layout) == [
        "core/",
        "licensing/",
        "licensing/console/",
        "licensing/ledger/",
        "tests/",
    ]
    assert "shapes), db" in layout["core/"]
    modules = [
        "core/db",
        "core/errors",
        "core/clock",
        "licensing/admin",
        "licensing/apps",
        "licensing/management/commands/create_license",
        "licensing/console/admin/keys",
        "licensing/console/admin/base",
        "licensing/console/admin/users",
        "licensing/console/review_admin",
        "licensing/console/live",
        "licensing/ledger/actions",
        "licensing/ledger/store",
        "licensing/courses/services",
    ]
    assert missing_from(layout, modules) == {
        "core/": ["clock"],
        "licensing/": ["apps", "courses/services"],
        "licensing/console/": ["admin/users", "live"],
        "licensing/ledger/": ["store"],
    }


def test_every_module_is_named_in_the_layout():
    layout = parse_layout(layout_block())
    for app in APPS:
        assert app + "/" in layout, f"docs/architecture.md's Layout has no `{app}/` line"
    missing = missing_from(layout, product_modules())
    hints = []
    for owner, relatives in sorted(missing.items()):
        line = f"`{'  ' * (owner.count('/') - 1)}{owner.split('/')[-2]}/` line"
        where = f"the {line}" if owner in layout else f"a new `{owner}` line"
        by_folder: dict[str, list[str]] = {}
        for relative in relatives:
            folder, _, stem = relative.rpartition("/")
            by_folder.setdefault(folder, []).append(stem)
        for folder, stems in by_folder.items():
            names = ", ".join(stems)
            if folder:
                hints.append(f"  {owner}{folder}/: {names} -> in `{folder}/ (...)` on {where}")
            else:
                hints.append(f"  {owner}: {names} -> on {where}")
    assert not missing, (
        "modules not named in docs/architecture.md's Layout (name each as `module (what it is "
        "for)`; a sub-folder's modules in the parentheses after `folder/`):\n" + "\n".join(hints)
    )
