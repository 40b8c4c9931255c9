"""The privacy pack as Markdown (licensing.privacy.document's sections): GitHub-flavoured tables
that any editor opens, for the officer to complete. Pure."""

from __future__ import annotations

import re

from .document import Document, Section, Table
from .report import printable

# What would end a table cell, a line or an inline element early; escaped, never dropped.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")
_BREAKS = re.compile(r"\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]")


def escape(text: str) -> str:
    """One line of Markdown text: NUL and lone surrogates as U+FFFD, line breaks as spaces,
    Markdown's and HTML's special characters (`|` among them) backslash-escaped."""
    flat = _BREAKS.sub(" ", printable(text))
    return _SPECIAL.sub(r"\\\1", flat)


def to_markdown(doc: Document) -> str:
    lines = [f"# {escape(doc.title)}", ""]
    for section in doc.sections:
        lines += _section(section)
    return "\n".join(lines).rstrip("\n") + "\n"


def _section(section: Section) -> list[str]:
    lines = ["#" * section.level + " " + escape(section.title), ""]
    for paragraph in section.paragraphs:
        lines += [escape(paragraph), ""]
    if section.items:
        lines += [f"- {escape(item)}" for item in section.items] + [""]
    if section.table is not None:
        lines += _table(section.table) + [""]
    return lines


def _table(table: Table) -> list[str]:
    def row(cells) -> str:
        return "| " + " | ".join(escape(cell) or " " for cell in cells) + " |"

    return [row(table.headers), "|" + "---|" * len(table.headers), *map(row, table.rows)]
