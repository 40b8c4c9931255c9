"""Every relative link of the documentation resolves: the README, docs/ and bench/ link each
other by path (`](docs/api.md)`, `](../README.md#figures)`), and a page that moves or a heading
that is renamed must not leave a link pointing nowhere. A link's file must exist; its anchor, when
it names a Markdown file, must be one of that file's headings as GitHub spells them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("bench/**/*.md")],
    key=str,
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> str:
    """The text outside code fences (a `](x)` in a code block is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lower case, punctuation dropped (but `-`
    and `_`), spaces as `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()).splitlines():
        match = re.match(r"^#{1,6} (.*)", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))  # inline code is not a link either
    return [target for target in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def test_the_pages_are_found():
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "docs/README.md", "docs/api.md", "bench/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {os.path.relpath(file, ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(file, ROOT)}")
    assert not broken, "\n".join(broken)


def test_slugs_are_githubs():
    assert slug("Servers: uvicorn (gateway_site.serve), gunicorn + uvicorn-worker, granian") == (
        "servers-uvicorn-gateway_siteserve-gunicorn--uvicorn-worker-granian"
    )
    assert slug("The management API (`/manage/v1/`)") == "the-management-api-managev1"
    assert slug("Run it (fresh machine, only Python 3.11+ needed)") == (
        "run-it-fresh-machine-only-python-311-needed"
    )


CONFLICT = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_no_merge_conflict_markers(page):
    """A merge whose conflict markers were committed leaves a page that reads as two drafts
    (docs/providers.md did, from issue 34 to 37)."""
    found = [match.group(0) for match in CONFLICT.finditer(page.read_text())]
    assert not found, found


def test_the_bench_readme_stays_under_30_kb():
    """Issue 36: the bench's front page says how to run and read it; dated figures go to
    bench/results/ (its `Figures` keeps the latest run only)."""
    assert (ROOT / "bench" / "README.md").stat().st_size < 30_000
