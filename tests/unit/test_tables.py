"""lockgate.cli.tables: rows in, lines out; alignment, fitting a width, no limit when asked."""

from __future__ import annotations

import pytest

from lockgate.cli.tables import Column, display_width, fit, render, wrap

LONG = "card declined by the issuer after three attempts: " + "do not honour " * 20


def test_columns_are_aligned_left_or_right_two_spaces_apart() -> None:
    lines = render(
        [Column("name"), Column("count", align="right")],
        [("a", "1"), ("longer", "12345")],
    )
    assert lines == [
        "name    count",
        "a           1",
        "longer  12345",
    ]


def test_no_line_has_trailing_spaces() -> None:
    lines = render([Column("n", align="right"), Column("text")], [("1", ""), ("22", "x")])
    assert lines == [" n  text", " 1", "22  x"]


@pytest.mark.parametrize("width", [20, 40, 57, 80, 81, 120])
def test_every_line_fits_the_width_when_the_long_column_is_truncated(width: int) -> None:
    columns = [Column("id"), Column("error", shrink="truncate")]
    lines = render(columns, [("1-0", LONG), ("2-0", "short")], width)
    assert all(display_width(line) <= width for line in lines), lines
    assert len(lines) == 3  # truncation keeps one line per row
    assert lines[1].startswith("1-0  card declined")
    assert lines[1].endswith("…")
    assert lines[2] == "2-0  short"


@pytest.mark.parametrize("width", [20, 33, 80])
def test_a_wrapped_column_keeps_every_word_on_lines_that_fit(width: int) -> None:
    columns = [Column("id"), Column("error", shrink="wrap")]
    lines = render(columns, [("1-0", LONG)], width)
    assert all(display_width(line) <= width for line in lines), lines
    assert len(lines) > 2
    assert lines[1].startswith("1-0  ")
    assert all(line.startswith("     ") for line in lines[2:])  # the id column stays empty
    assert " ".join(line[5:].strip() for line in lines[1:]).split() == LONG.split()


def test_no_width_limit_keeps_every_cell_whole() -> None:
    columns = [Column("id"), Column("error", shrink="truncate")]
    lines = render(columns, [("1-0", LONG)], None)
    assert lines[1] == f"1-0  {LONG}".rstrip()


def test_the_widest_shrinkable_columns_give_way_first_and_end_level() -> None:
    columns = [
        Column("a", shrink="truncate"),
        Column("b", shrink="truncate"),
        Column("c", shrink="truncate"),
    ]
    lines = render(columns, [("x" * 10, "y" * 40, "z" * 40)], 60)
    cells = lines[1].split("  ")
    assert [display_width(cell) for cell in cells] == [10, 23, 23]
    assert display_width(lines[1]) == 60


def test_fixed_columns_never_shrink_and_a_minimum_is_kept() -> None:
    columns = [Column("id"), Column("job", shrink="truncate", min_width=5), Column("n")]
    row = ("1718000000000-0", "charge-" + "9" * 30, "7")
    assert render(columns, [row], 30)[1] == "1718000000000-0  charge-99…  7"
    assert render(columns, [row], 25)[1] == "1718000000000-0  char…  7"
    # Narrower than the minimum allows: the job column stays 5 wide, the line is cut.
    assert render(columns, [row], 24)[1] == "1718000000000-0  char… …"


def test_a_table_that_cannot_shrink_enough_is_still_cut_to_the_width() -> None:
    lines = render([Column("id"), Column("other")], [("x" * 50, "y" * 50)], 40)
    assert all(display_width(line) <= 40 for line in lines)
    assert lines[1].endswith("…")


def test_wide_characters_count_two_cells_and_control_characters_are_neutralised() -> None:
    columns = [Column("id"), Column("error", shrink="truncate")]
    lines = render(columns, [("1", "\x1b[31m" + "支付失败" * 10 + "\tend")], 20)
    assert "\x1b" not in "".join(lines) and "\t" not in "".join(lines)
    assert all(display_width(line) <= 20 for line in lines), lines
    assert display_width("支付") == 4


def test_line_breaks_become_spaces_in_a_truncated_cell_and_lines_elsewhere() -> None:
    assert render([Column("e", shrink="truncate")], [("one\r\ntwo",)], None) == ["e", "one two"]
    assert render([Column("e")], [("one\ntwo",)], None) == ["e", "one", "two"]


def test_a_row_with_the_wrong_number_of_cells_is_refused() -> None:
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        render([Column("a")], [("1", "2")])


def test_fit_and_wrap_at_the_edges() -> None:
    assert fit("abcdef", 6) == "abcdef"
    assert fit("abcdef", 5) == "abcd…"
    assert fit("abcdef", 1) == "…"
    assert fit("abcdef", 0) == ""
    assert fit("abcdef", None) == "abcdef"
    assert wrap("abcdefgh ij", 3) == ["abc", "def", "gh", "ij"]
    assert wrap("", 5) == [""]
    assert wrap("a\nb c", 10) == ["a", "b c"]


def test_a_lower_priority_column_gives_way_first_down_to_its_minimum() -> None:
    columns = [
        Column("job", shrink="truncate", min_width=6),
        Column("error", shrink="truncate", priority=1),
    ]
    row = ("j" * 30, "e" * 30)
    assert render(columns, [row], 50)[1] == "j" * 17 + "…  " + "e" * 30
    assert render(columns, [row], 30)[1] == "j" * 5 + "…  " + "e" * 21 + "…"
