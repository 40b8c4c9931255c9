"""The privacy pack as a PDF (fpdf2, pure Python): the sections of licensing.privacy.document
as simple HTML, laid out by fpdf2's `write_html`. Text in any script needs a Unicode font: the
DejaVu TTFs (Debian's fonts-dejavu-core: the Dockerfile and CI install it) are embedded when
found; without them the core Helvetica is used and what Latin-1 cannot hold is replaced
(docs/decisions/privacy-pack.md)."""

from __future__ import annotations

from html import escape as html_escape
from pathlib import Path

from .document import Document, Section, Table
from .report import printable

FONT_DIRS = (Path("/usr/share/fonts/truetype/dejavu"),)
FONT_FILES = {"": "DejaVuSans.ttf", "B": "DejaVuSans-Bold.ttf", "I": "DejaVuSans-Oblique.ttf"}
# Latin-1's stand-ins for the punctuation the pack's own words use, the rest as "?".
_LATIN1 = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "–": "-", "—": "-", "…": "..."})


def font_dir() -> Path | None:
    for folder in FONT_DIRS:
        if all((folder / name).is_file() for name in FONT_FILES.values()):
            return folder
    return None


def _text(text: str, unicode: bool) -> str:
    # What no PDF text takes (NUL, lone surrogates) first; then, in Latin-1, the rest.
    clean = printable(text).replace("\ufffd", "?" if not unicode else "\ufffd")
    if unicode:
        return html_escape(clean)
    latin = clean.translate(_LATIN1).encode("latin-1", "replace").decode("latin-1")
    return html_escape(latin)


def to_html(doc: Document, unicode: bool = True) -> str:
    """The document as the HTML subset fpdf2 lays out (headings, paragraphs, lists, tables)."""
    parts = [f"<h1>{_text(doc.title, unicode)}</h1>"]
    for section in doc.sections:
        parts.append(_section(section, unicode))
    return "\n".join(parts)


def _section(section: Section, unicode: bool) -> str:
    tag = f"h{section.level}"
    html = [f"<{tag}>{_text(section.title, unicode)}</{tag}>"]
    html += [f"<p>{_text(p, unicode)}</p>" for p in section.paragraphs]
    if section.items:
        items = "".join(f"<li>{_text(item, unicode)}</li>" for item in section.items)
        html.append(f"<ul>{items}</ul>")
    if section.table is not None:
        html.append(_table(section.table, unicode))
    return "\n".join(html)


def _table(table: Table, unicode: bool) -> str:
    head = "".join(f"<th>{_text(h, unicode)}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f'<td align="left">{_text(c, unicode) or "-"}</td>' for c in row) + "</tr>"
        for row in table.rows
    )
    return f'<table border="1"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def to_pdf(doc: Document, compress: bool = True) -> bytes:
    from fpdf import FPDF  # imported on use: the admin's start-up does not pay for it

    pdf = FPDF(format="A4")
    pdf.set_compression(compress)
    pdf.set_title(printable(doc.title))
    pdf.set_creator("inference gateway: privacy pack")
    folder = font_dir()
    family = "helvetica"
    if folder is not None:
        for style, name in FONT_FILES.items():
            pdf.add_font("dejavu", style, str(folder / name))
        family = "dejavu"
    pdf.add_page()
    pdf.set_font(family, size=10)
    pdf.write_html(to_html(doc, unicode=folder is not None), font_family=family)
    return bytes(pdf.output())
