"""Small inline SVG line charts, rendered on the server (pure: numbers in, markup out).

No script draws them: the page carries the SVG, so a chart shows with JavaScript off and
in a screenshot, and the live refresh swaps it like any other markup.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Frame:
    """A chart's size and margins (the axis labels go in the margins)."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_labels: bool


FULL = Frame(width=320, height=96, left=44, right=6, top=8, bottom=18, x_labels=True)
# A sparkline for a table row: the y axis' top value only.
COMPACT = Frame(width=220, height=34, left=44, right=4, top=4, bottom=4, x_labels=False)
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea")


@dataclass(frozen=True, slots=True)
class Series:
    """One line: a name for the legend and one value per step (None: no value there)."""

    name: str
    values: Sequence[float | None]


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def _segments(points: Sequence[tuple[float, float] | None]) -> list[list[tuple[float, float]]]:
    """Runs of consecutive points (a None breaks the line)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for point in points:
        if point is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(point)
    return [run for run in runs if run]


def line_chart(
    series: Sequence[Series],
    *,
    unit: str = "",
    span: str = "",
    label: str = "",
    frame: Frame = FULL,
) -> str:
    """An SVG line chart of ``series`` sharing one x axis (steps) and one y axis from 0.

    Args:
        series: the lines, drawn in :data:`COLOURS` order; all as long as the first.
        unit: appended to the y axis' top value (``s``, ``/s``).
        span: the x axis' left label (e.g. ``-15 min``); the right one is ``now``.
        label: the chart's accessible name.
        frame: its size: :data:`FULL`, or :data:`COMPACT` for a table row.

    Returns:
        The ``<svg>`` element's markup, names escaped.
    """
    f = frame
    steps = max((len(line.values) for line in series), default=0)
    peak = max((v for line in series for v in line.values if v is not None), default=0.0)
    top = peak if peak > 0 else 1.0
    plot_w = f.width - f.left - f.right
    plot_h = f.height - f.top - f.bottom

    def x(i: int) -> float:
        return f.left + (plot_w * i / (steps - 1) if steps > 1 else plot_w / 2)

    def y(v: float) -> float:
        return f.top + plot_h * (1 - v / top)

    base = f.top + plot_h
    parts = [
        f'<svg class="chart" viewBox="0 0 {f.width} {f.height}" width="{f.width}" '
        f'height="{f.height}" role="img" aria-label="{html.escape(label)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{f.left}" y1="{base}" x2="{f.width - f.right}" y2="{base}" class="axis"/>',
        f'<line x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{base}" class="axis"/>',
        f'<text x="{f.left - 4}" y="{f.top + 8}" text-anchor="end">'
        f"{html.escape(_number(peak) + unit)}</text>",
    ]
    if f.x_labels:
        parts += [
            f'<text x="{f.left - 4}" y="{base}" text-anchor="end">0</text>',
            f'<text x="{f.left}" y="{f.height - 4}">{html.escape(span)}</text>',
            f'<text x="{f.width - f.right}" y="{f.height - 4}" text-anchor="end">now</text>',
        ]
    for n, line in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        points = [
            None if v is None else (round(x(i), 1), round(y(v), 1))
            for i, v in enumerate(line.values)
        ]
        for run in _segments(points):
            if len(run) == 1:
                ((cx, cy),) = run
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
                continue
            coords = " ".join(f"{px},{py}" for px, py in run)
            parts.append(
                f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
            )
    parts.append("</svg>")
    return "".join(parts)


def legend(series: Sequence[Series]) -> list[tuple[str, str]]:
    """(colour, name) of each line, in the chart's order."""
    return [(COLOURS[n % len(COLOURS)], line.name) for n, line in enumerate(series)]
