"""Plain text tables for the CLI and the demo: rows in, lines out, no I/O.

Columns are separated by two spaces, a header line comes first, and no line carries
trailing spaces. Given a total width, the columns marked as shrinkable give up width
(those of the lowest priority first, among them the widest first) until every line
fits: a ``truncate`` column cuts its text with "…", a ``wrap`` column breaks it over
several lines. Widths are display widths (an East Asian wide character takes two cells,
a combining mark none), so a line that fits is one a terminal shows on one row.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Align = Literal["left", "right"]
Overflow = Literal["truncate", "wrap"]
ELLIPSIS = "…"
GAP = 2


@dataclass(frozen=True)
class Column:
    """One column of a table.

    Attributes:
        header: the column's title.
        align: ``left`` or ``right`` (numbers).
        shrink: how the column gives up width when the table is too wide: ``truncate``
            (one line, cut with "…"), ``wrap`` (several lines), or None (never).
        min_width: the narrowest a shrinkable column becomes; None means its header's
            width.
        priority: shrinkable columns of a lower priority narrow to their minimum before
            those of a higher one give up anything.
    """

    header: str
    align: Align = "left"
    shrink: Overflow | None = None
    min_width: int | None = None
    priority: int = 0


def char_width(char: str) -> int:
    """Terminal cells one character takes: 0, 1 or 2."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Terminal cells a line of text takes."""
    return sum(char_width(char) for char in text)


def clean(text: str) -> str:
    """``text`` with tabs as spaces, line ends as ``\\n`` and other control characters
    (an escape sequence would restyle the terminal) as spaces."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(
        " " if char != "\n" and unicodedata.category(char) == "Cc" else char for char in text
    )


def fit(text: str, width: int | None) -> str:
    """One line of ``text`` cut to ``width`` cells, ending in "…" when it was cut.

    Args:
        text: one line (see :func:`clean`).
        width: the most cells it may take; None for no limit.

    Returns:
        The text itself when it fits, else its longest prefix that fits with "…".
    """
    if width is None or display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept, used = [], 0
    for char in text:
        cells = char_width(char)
        if used + cells > width - 1:
            break
        kept.append(char)
        used += cells
    return "".join(kept) + ELLIPSIS


def wrap(text: str, width: int) -> list[str]:
    """``text`` broken into lines of at most ``width`` cells (at least one line).

    Breaks at spaces where it can; a word wider than ``width`` is split. Line breaks in
    ``text`` are kept.
    """
    width = max(width, 1)
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if display_width(candidate) <= width:
                line = candidate
                continue
            if line:
                lines.append(line)
            line = word
            while display_width(line) > width:
                head = _prefix(line, width)
                lines.append(head)
                line = line[len(head) :]
        lines.append(line)
    return lines


def _prefix(text: str, width: int) -> str:
    """The longest prefix of ``text`` within ``width`` cells (at least one character)."""
    used = 0
    for index, char in enumerate(text):
        used += char_width(char)
        if used > width:
            return text[: max(index, 1)]
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split("\n"))


def _natural(column: Column, cell: str) -> int:
    text = _one_line(cell) if column.shrink == "truncate" else cell
    return max(display_width(line) for line in text.split("\n"))


def _floor(column: Column, natural: int) -> int:
    least = display_width(column.header) if column.min_width is None else column.min_width
    return min(natural, max(least, 1))


def _shrink(columns: Sequence[Column], widths: list[int], excess: int) -> list[int]:
    """Narrow the shrinkable columns, the lowest priority and then the widest first, by
    ``excess`` cells in all (or as far as their minimums allow)."""
    widths = list(widths)
    floors = [_floor(column, width) for column, width in zip(columns, widths, strict=True)]
    while excess > 0:
        able = [i for i, c in enumerate(columns) if c.shrink and widths[i] > floors[i]]
        if not able:
            break
        lowest = min(columns[i].priority for i in able)
        able = [i for i in able if columns[i].priority == lowest]
        widest = max(able, key=lambda i: (widths[i], i))
        others = [widths[i] for i in able if i != widest]
        if widths[widest] in others:
            step = 1  # a tie: narrow them in turn, so they end up level
        else:
            lower = max([floors[widest], widths[widest] - excess, *others])
            step = widths[widest] - lower
        widths[widest] -= step
        excess -= step
    return widths


def _cell_lines(column: Column, cell: str, width: int, limited: bool) -> list[str]:
    if column.shrink == "truncate":
        return [fit(_one_line(cell), width if limited else None)]
    if column.shrink == "wrap" and limited:
        return wrap(cell, width)
    return cell.split("\n")


def _pad(text: str, width: int, align: Align) -> str:
    space = " " * max(width - display_width(text), 0)
    return space + text if align == "right" else text + space


def render(
    columns: Sequence[Column], rows: Iterable[Sequence[str]], width: int | None = None
) -> list[str]:
    """Lay out a table: the header line, then each row's lines.

    Args:
        columns: the columns, in order.
        rows: one sequence of cell texts per row, as many as there are columns.
        width: the most cells a line may take; None for no limit (nothing is cut or
            wrapped). When even the shrinkable columns at their minimum widths do not
            fit, each line is cut with "…", so no line is ever wider than ``width``.

    Returns:
        The lines, without line ends or trailing spaces.

    Raises:
        ValueError: a row does not have one cell per column.
    """
    if not columns:
        return []
    header = tuple(clean(column.header) for column in columns)
    body = [tuple(clean(cell) for cell in row) for row in rows]
    for row in body:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} cells for {len(columns)} columns: {row!r}")
    widths = [
        max(_natural(column, cell) for cell in (header[i], *(row[i] for row in body)))
        for i, column in enumerate(columns)
    ]
    limited = width is not None
    if width is not None:
        excess = sum(widths) + GAP * (len(columns) - 1) - width
        widths = _shrink(columns, widths, excess)
    lines = []
    for row in (header, *body):
        cells = [
            _cell_lines(column, cell, size, limited)
            for column, cell, size in zip(columns, row, widths, strict=True)
        ]
        for index in range(max(len(texts) for texts in cells)):
            parts = [
                _pad(texts[index] if index < len(texts) else "", size, column.align)
                for column, texts, size in zip(columns, cells, widths, strict=True)
            ]
            lines.append(fit((" " * GAP).join(parts).rstrip(), width))
    return lines
