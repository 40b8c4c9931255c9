"""Small server-side SVG charts for the usage page: stacked bars per day (one band per series),
and horizontal bars for top lists. No JavaScript and nothing loaded at run time.

The output is deterministic (same input, same bytes) and every label is escaped: series names
and license names come from users. Text and axes use `currentColor`, so the charts follow the
admin's light and dark themes; bands keep fixed colours that stay apart (Tableau 10).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from html import escape

from django.utils import dateformat
from django.utils.translation import gettext

from core.languages import grouped

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
OTHER_COLOUR = "#bab0ac"
OUTCOME_COLOURS = {
    "success": "#4e79a7",
    "client_error": "#f28e2b",
    "denied": "#e15759",
    "failure": "#b07aa1",
}
FONT = 11
CHAR_W = 6.5  # a generous average glyph width at FONT px: labels never collide
LINE = 16
PLOT_H = 170
WIDTH = 500  # about the width a chart gets in a half of the admin's content at 1440 px
MAX_BAR = 40
DAY_STEPS = (1, 2, 3, 7, 14, 28, 56)
# Characters XML 1.0 cannot hold (an SVG with them is not well-formed).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Band:
    """One series of a stacked bar chart: a value per day."""

    label: str
    values: Sequence[int]
    colour: str


@dataclass(frozen=True)
class HBar:
    """One row of a horizontal bar chart; `href` makes its label a link."""

    label: str
    value: int
    href: str | None = None
    note: str = ""


def esc(text) -> str:
    """Text or an attribute value, safe inside SVG and HTML."""
    return escape(_NOT_XML.sub("\ufffd", str(text)), quote=True)


def num(value: float) -> str:
    """A coordinate: at most one decimal, no trailing zeros."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def palette(names: Sequence[str], fixed: dict[str, str] | None = None) -> list[str]:
    """A colour per name: the fixed ones first, the palette in order for the others."""
    fixed = fixed or {}
    colours, i = [], 0
    for name in names:
        if name in fixed:
            colours.append(fixed[name])
        else:
            colours.append(PALETTE[i % len(PALETTE)])
            i += 1
    return colours


def nice_ticks(maximum: int, count: int = 4) -> list[int]:
    """Round, evenly spaced axis values from 0 to at least `maximum` (integers)."""
    if maximum <= 0:
        return [0, 1]
    raw = maximum / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(
        m * magnitude
        for m in (1, 2, 2.5, 5, 10)
        if m * magnitude >= raw and float(m * magnitude).is_integer()
    )
    step = max(1, int(step))
    return [i * step for i in range(math.ceil(maximum / step) + 1)]


def day_label(day: date) -> str:
    # The month's short name in the page's language (Django's own catalogue: Mär, Okt...).
    return gettext("%(month)s %(day)s") % {"month": dateformat.format(day, "M"), "day": day.day}


def _svg(width: float, height: float, label: str, body: list[str], role: str = "img") -> str:
    """A chart named by `label`: an image, or a group when it holds links (an image's insides
    are hidden from assistive technology, so its links could not be reached)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="usage-chart" role="{role}" '
        f'viewBox="0 0 {num(width)} {num(height)}" width="100%" aria-label="{esc(label)}" '
        f'font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="{FONT}" '
        f'fill="currentColor">' + "".join(body) + "</svg>"
    )


def _legend(bands: Sequence[Band], left: float, top: float, room: float, unit: str):
    """Swatches and names flowing over as many lines as needed; returns (parts, height)."""
    parts, x, y = [], left, top
    for band in bands:
        name = short(band.label, 34)
        item = 14 + len(name) * CHAR_W + 14
        if x > left and x + item > left + room:
            x, y = left, y + LINE
        total = sum(band.values)
        parts.append(
            f'<g class="legend-item"><title>{esc(band.label)}: {grouped(total)} {esc(unit)}</title>'
            f'<rect x="{num(x)}" y="{num(y)}" width="10" height="10" fill="{band.colour}"/>'
            f'<text x="{num(x + 14)}" y="{num(y + 9)}">{esc(name)}</text></g>'
        )
        x += item
    return parts, (y - top + LINE) if bands else 0


def stacked_bars(
    days: Sequence[date],
    bands: Sequence[Band],
    *,
    title: str,
    unit: str,
    width: int = WIDTH,
) -> str:
    """Bars per day, one band per series stacked in the given order (first at the bottom)."""
    totals = [sum(band.values[i] for band in bands) for i in range(len(days))]
    ticks = nice_ticks(max(totals, default=0))
    left = max(len(grouped(t)) for t in ticks) * CHAR_W + 10
    room = width - left - 8
    legend, legend_h = _legend(bands, left, 4, room, unit)
    top = 4 + legend_h + 8
    height = top + PLOT_H + 24
    plot = _Plot(left=left, top=top, width=room, height=PLOT_H, ymax=ticks[-1], n=len(days))
    body = [*legend, *plot.y_axis(ticks), *plot.x_axis(days)]
    body += [plot.day_columns(days, totals, unit), *plot.bands(days, bands, unit)]
    if not any(totals):
        body.append(plot.note(gettext("No usage in this range")))
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class _Plot:
    left: float
    top: float
    width: float
    height: float
    ymax: int
    n: int

    @property
    def slot(self) -> float:
        return self.width / max(self.n, 1)

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def y(self, value: float) -> float:
        return self.bottom - value / self.ymax * self.height

    def y_axis(self, ticks: list[int]) -> list[str]:
        parts = []
        for tick in ticks:
            y = num(self.y(tick))
            parts.append(
                f'<line x1="{num(self.left)}" x2="{num(self.left + self.width)}" y1="{y}" '
                f'y2="{y}" stroke="currentColor" stroke-opacity="{0.5 if tick == 0 else 0.15}"/>'
                f'<text x="{num(self.left - 6)}" y="{num(self.y(tick) + 4)}" '
                f'text-anchor="end">{grouped(tick)}</text>'
            )
        return parts

    def x_axis(self, days: Sequence[date]) -> list[str]:
        every = max(1, math.ceil(len(days) / max(1, int(self.width // 52))))
        # Round steps (a week, a fortnight...) keep the labels of side-by-side charts aligned.
        every = next((step for step in DAY_STEPS if step >= every), every)
        parts = []
        for i in range(0, len(days), every):
            x = num(self.left + (i + 0.5) * self.slot)
            parts.append(
                f'<text x="{x}" y="{num(self.bottom + 15)}" text-anchor="middle">'
                f"{day_label(days[i])}</text>"
            )
        return parts

    def day_columns(self, days: Sequence[date], totals: list[int], unit: str) -> str:
        """An invisible column per day whose tooltip gives the day's total."""
        in_total = gettext("%(n)s %(unit)s in total")
        columns = "".join(
            f'<rect x="{num(self.left + i * self.slot)}" y="{num(self.top)}" '
            f'width="{num(self.slot)}" height="{num(self.height)}">'
            f"<title>{day.isoformat()}: {esc(in_total % {'n': grouped(totals[i]), 'unit': unit})}"
            "</title></rect>"
            for i, day in enumerate(days)
        )
        return f'<g class="days" fill="transparent">{columns}</g>'

    def bands(self, days: Sequence[date], bands: Sequence[Band], unit: str) -> list[str]:
        """A group of bars per band (series), each bar on top of the bands before it."""
        bar_w = min(MAX_BAR, max(1.0, self.slot * 0.8))  # one day is not a wall of colour
        xs = [num(self.left + i * self.slot + (self.slot - bar_w) / 2) for i in range(self.n)]
        base = [0] * self.n
        groups = []
        for band in bands:
            label, rects = esc(band.label), []
            for i, value in enumerate(band.values):
                if value <= 0:
                    continue
                y_top, y_base = self.y(base[i] + value), self.y(base[i])
                base[i] += value
                rects.append(
                    f'<rect x="{xs[i]}" y="{num(y_top)}" width="{num(bar_w)}" '
                    f'height="{num(max(0.5, y_base - y_top))}">'
                    f"<title>{days[i].isoformat()} · {label}: {grouped(value)} {esc(unit)}"
                    "</title></rect>"
                )
            if rects:
                groups.append(
                    f'<g class="bars" data-series="{label}" fill="{band.colour}">'
                    + "".join(rects)
                    + "</g>"
                )
        return groups

    def note(self, text: str) -> str:
        return (
            f'<text x="{num(self.left + self.width / 2)}" y="{num(self.top + self.height / 2)}" '
            f'text-anchor="middle" fill-opacity="0.7">{esc(text)}</text>'
        )


def hbars(rows: Sequence[HBar], *, title: str, unit: str, width: int = WIDTH) -> str:
    """One bar per row, longest first as given, the value at its end."""
    row_h, label_chars = 22, 30
    if not rows:
        nothing = gettext("Nothing in this range")
        return _svg(
            width,
            30,
            title,
            [f'<text x="0" y="18" fill-opacity="0.7">{esc(nothing)}</text>'],
        )
    label_w = max(len(short(r.label, label_chars)) for r in rows) * CHAR_W + 12
    value_w = max(len(grouped(r.value)) for r in rows) * CHAR_W + 8
    room = max(40.0, width - label_w - value_w)
    top = max((r.value for r in rows), default=0) or 1
    body = []
    for i, row in enumerate(rows):
        y = i * row_h + 4
        bar = row.value / top * room
        tip = f"{row.label}: {grouped(row.value)} {unit}" + (f", {row.note}" if row.note else "")
        text = f'<text x="0" y="{num(y + 11)}">{esc(short(row.label, label_chars))}</text>'
        if row.href:
            text = f'<a class="link" href="{esc(row.href)}">{text}</a>'
        body.append(
            f'<g class="hbar"><title>{esc(tip)}</title>{text}'
            f'<rect x="{num(label_w)}" y="{num(y)}" width="{num(max(bar, 1.0))}" height="15" '
            f'fill="{PALETTE[0]}"/>'
            f'<text x="{num(label_w + bar + 6)}" y="{num(y + 11)}">{grouped(row.value)}</text></g>'
        )
    role = "group" if any(row.href for row in rows) else "img"
    return _svg(width, len(rows) * row_h + 6, title, body, role)
