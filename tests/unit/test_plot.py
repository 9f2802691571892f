"""The demo's figure (lockgate.cli.demo.plot): drawn from a small made-up result, no Redis."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from lockgate.cli.demo.plot import check_target, shares_over_time, size_pixels, write_png
from lockgate.cli.demo.report import Run
from lockgate.errors import ConfigError

LEVELS = ["critical", "normal", "low"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def made_up(name: str, began: float = 1_700_000_000.0) -> Run:
    """A run of 0.5 s: low all along, normal in the middle, a critical job every 0.1 s."""
    run = Run(name, elapsed=0.5, began=began)
    for i in range(100):
        t = i * 0.005
        run.record("low", began + t, 0.2 + t)
        if 0.1 <= t < 0.3:
            run.record("normal", began + t, 0.05)
        if i % 20 == 0:
            run.record("critical", began + t, 0.0)  # a zero wait, on a log scale
    return run


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's header (its IHDR chunk comes first)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_the_figure_is_a_png_of_one_row_per_run(tmp_path: Path) -> None:
    runs = [made_up("strict"), made_up("weighted"), made_up("sorted+aging")]
    out = tmp_path / "policies.png"
    write_png(runs, LEVELS, out)
    assert png_size(out) == size_pixels(3)
    assert "matplotlib.pyplot" not in sys.modules  # the object API only, no global state


def test_the_size_fits_a_readme_and_grows_by_rows() -> None:
    width, one = size_pixels(1)
    assert 800 <= width <= 1200
    assert size_pixels(3)[1] > size_pixels(2)[1] > one


def test_a_level_without_jobs_is_drawn_as_nothing(tmp_path: Path) -> None:
    run = Run("idle")
    run.record("low", 3.0, 0.5)
    out = tmp_path / "idle.png"
    write_png([run], LEVELS, out)
    assert png_size(out) == size_pixels(1)


def test_shares_add_up_to_one_where_jobs_started() -> None:
    lefts, width, shares = shares_over_time(made_up("strict", began=0.0), LEVELS)
    assert lefts[0] == 0.0 and width == pytest.approx(0.02)
    for i in range(len(lefts)):
        assert sum(shares[level][i] for level in LEVELS) == pytest.approx(1.0)


def test_shares_are_counted_per_slice_of_20_ms() -> None:
    run = Run("strict", began=10.0)
    for level, since in [("low", 0.005), ("normal", 0.006), ("normal", 0.007)]:
        run.record(level, 10.0 + since, 0.1)
    run.record("critical", 10.008, 0.0)
    run.record("low", 10.051, 0.1)
    lefts, _, shares = shares_over_time(run, LEVELS)
    assert lefts == pytest.approx([0.0, 0.02, 0.04])
    assert shares == {
        "critical": [0.25, 0.0, 0.0],
        "normal": [0.5, 0.0, 0.0],
        "low": [0.25, 0.0, 1.0],  # nothing started in the middle slice
    }


def test_a_file_that_cannot_be_written_is_refused_before_the_demo_runs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no directory"):
        check_target(tmp_path / "missing" / "out.png")
    with pytest.raises(ConfigError, match="is a directory"):
        check_target(tmp_path)
    check_target(tmp_path / "out.png")
