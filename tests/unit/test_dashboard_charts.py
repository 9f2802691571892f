"""The dashboard's server-side SVG charts and its number formats (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from lockgate.dashboard.charts import COLOURS, COMPACT, Series, legend, line_chart
from lockgate.dashboard.views import duration, rate, when


def _lines(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(map(float, point.split(","))) for point in points.split()]  # type: ignore[misc]
        for points in re.findall(r'<polyline points="([^"]+)"', svg)
    ]


def test_a_chart_draws_one_line_per_series_scaled_to_the_peak() -> None:
    svg = line_chart([Series("a", [0, 1, 2]), Series("b", [2, 2, 2])], unit=" s", label="x")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    first, second = _lines(svg)
    assert [x for x, _ in first] == [x for x, _ in second]
    assert first[0][1] > first[1][1] > first[2][1]  # rising values, falling y
    assert first[2][1] == second[0][1]  # both at the peak
    assert ">2 s<" in svg
    assert COLOURS[0] in svg and COLOURS[1] in svg


def test_gaps_break_the_line_and_a_lone_point_is_a_dot() -> None:
    svg = line_chart([Series("a", [1, None, 2, 3, None])])
    assert len(_lines(svg)) == 1
    assert svg.count("<circle") == 1


def test_an_empty_or_all_zero_chart_renders() -> None:
    assert "<polyline" not in line_chart([])
    assert "<polyline" in line_chart([Series("a", [0, 0])])
    assert "<polyline" not in line_chart([Series("a", [None, None])])


def test_names_are_escaped() -> None:
    svg = line_chart([Series("a", [1, 2])], label='<script>"', span="<b>")
    assert "<script>" not in svg and "<b>" not in svg


def test_legend_follows_the_colours() -> None:
    assert legend([Series("a", []), Series("b", [])]) == [(COLOURS[0], "a"), (COLOURS[1], "b")]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.0123, "12 ms"),
        (3.25, "3.2 s"),
        (42, "42 s"),
        (60, "1 min"),
        (243, "4 min 3 s"),
        (7500, "2 h 5 min"),
        (3 * 86400 + 4 * 3600, "3 d 4 h"),
    ],
)
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_when() -> None:
    assert when(None) == "-"
    assert when(0.0) == "1970-01-01 00:00:00"
    assert when(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02 03:04:05"


@pytest.mark.parametrize(
    ("per_second", "text"),
    [
        (None, "-"),
        (0.0, "0"),
        (0.00667, "0.0067"),
        (0.42, "0.42"),
        (3.14159, "3.14"),
        (12.54, "12.5"),
    ],
)
def test_rate(per_second: float | None, text: str) -> None:
    assert rate(per_second) == text


def test_a_compact_chart_keeps_its_top_value_and_drops_the_x_labels() -> None:
    svg = line_chart([Series("a", [1, 3])], unit=" s", span="-15 min", frame=COMPACT)
    assert f'height="{COMPACT.height}"' in svg
    assert ">3 s<" in svg
    assert "-15 min" not in svg and ">now<" not in svg
