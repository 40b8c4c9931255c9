"""A page of the docs shown in the admin (docs/policy.md, linked from the policy's help):
Markdown rendered to HTML by markdown-it-py (CommonMark and its tables; raw HTML is escaped, not
passed through), each heading with the id GitHub gives it so that the page's own `#anchors` work,
and links to the other docs shown as plain text (they are files of the repository, not pages of
the admin)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_NOT_IN_A_SLUG = re.compile(r"[^\w\- ]")


def slug(text: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to
    hyphens (`## The policy form` -> `the-policy-form`)."""
    return _NOT_IN_A_SLUG.sub("", text.strip().lower()).replace(" ", "-")


def _anchored(tokens: list[Token]) -> None:
    """An id on each heading; a link that leaves the page (another doc) becomes a plain span."""
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            token.attrSet("id", slug(tokens[i + 1].content))
        removed = False  # links do not nest: the next close is the removed link's
        for child in token.children or ():
            if child.type == "link_open" and not _stays(str(child.attrGet("href") or "")):
                child.type, child.tag, child.attrs, removed = "removed_open", "span", {}, True
            elif child.type == "link_close" and removed:
                child.type, child.tag, removed = "removed_close", "span", False


def _stays(href: str) -> bool:
    return href.startswith(("#", "https://", "http://"))


def render(text: str) -> str:
    tokens = _MARKDOWN.parse(text)
    _anchored(tokens)
    return _scrollable(_MARKDOWN.renderer.render(tokens, _MARKDOWN.options, {}))


def _scrollable(html: str) -> str:
    """Code blocks and tables scroll sideways in a box of their own on a narrow screen (WCAG
    1.4.10), and such a box takes the keyboard's focus so that it can be scrolled without a
    mouse (2.1.1). markdown-it writes both tags without attributes."""
    html = html.replace("<pre>", '<pre tabindex="0">')
    html = html.replace("<table>", '<div class="docs-scroll" tabindex="0"><table>')
    return html.replace("</table>", "</table></div>")


@cache
def rendered(path: Path) -> str:
    """A doc of the repository rendered once per process (the docs change with a release)."""
    return render(path.read_text(encoding="utf-8"))
