"""The pages a person sees on the development identity provider and the LMS simulator: plain
HTML under a banner that says what they are (fake_upstreams/demo.py), readable without
JavaScript, with labels, landmarks and a visible focus."""

from __future__ import annotations

from html import escape

from .server import Response

_STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; margin: 0; color: #1a1a1a; background: #f6f6f4; }
.dev-banner { background: #ffd21f; color: #111; border-bottom: 4px solid #111; padding: 16px 24px;
  font-size: 1.5rem; font-weight: 800; letter-spacing: .02em; margin: 0; }
main { max-width: 52rem; margin: 0 auto; padding: 8px 24px 48px; }
h1 { font-size: 1.6rem; margin: 1.2rem 0 .4rem; }
h2 { font-size: 1.2rem; margin: 1.6rem 0 .4rem; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 8px 10px; border-bottom: 1px solid #ccc; }
button { font: inherit; font-weight: 600; padding: 8px 16px; border: 2px solid #0b4f8a;
  border-radius: 6px; background: #0b4f8a; color: #fff; cursor: pointer; }
button:hover { background: #083a66; }
button:focus-visible, a:focus-visible { outline: 3px solid #b35900; outline-offset: 2px; }
a { color: #0b4f8a; }
.note { color: #444; }
form { margin: 0; }
"""


def page(title: str, banner: str, body: str, status: int = 200) -> Response:
    """A whole page: `body` is HTML already escaped by the caller."""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
        f'<header><p class="dev-banner" role="note">{escape(banner)}</p></header>'
        f"<main>{body}</main></body></html>"
    )
    return Response(status, text.encode(), [("content-type", "text/html; charset=utf-8")])


def hidden_fields(fields: dict[str, str]) -> str:
    return "".join(
        f'<input type="hidden" name="{escape(name)}" value="{escape(value)}">'
        for name, value in fields.items()
    )


def button_form(action: str, fields: dict[str, str], label: str, method: str = "post") -> str:
    return (
        f'<form method="{method}" action="{escape(action)}">{hidden_fields(fields)}'
        f'<button type="submit">{escape(label)}</button></form>'
    )
