"""`lockgate demo` runs the lesson's scenario end to end on an embedded server."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.cli.demo.report import Progress, Run, progress_line, report, shares_while_all_busy
from lockgate.cli.tables import display_width

LEVELS = ["critical", "normal", "low"]
WEIGHTS = {"critical": 10, "normal": 5, "low": 1}
# The header docs/priorities.md shows.
HEADER = re.compile(r"^run +level +done +p50 wait ms +p99 wait ms +share while all busy$", re.M)


def test_demo_without_redis_configured_runs_on_an_embedded_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOCKGATE_REDIS_URL"}
    env["COLUMNS"] = "120"
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "demo"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "an embedded server" in done.stdout
    for run in ("strict", "weighted", "sorted+aging"):
        # One line per run as it finishes, then its rows in the table.
        assert re.search(rf"^ *{re.escape(run)}  5600 jobs in \d+\.\ds$", done.stdout, re.M)
        assert re.search(rf"^{re.escape(run)} +critical +100 ", done.stdout, re.M)
    assert done.stdout.count("5000") >= 3  # every run finished all low jobs
    assert HEADER.search(done.stdout), done.stdout
    assert all(len(line) <= 120 for line in done.stdout.splitlines())
    assert "\r" not in done.stderr  # no live progress line where stderr is no terminal


def test_shares_count_only_the_window_where_every_level_had_work() -> None:
    starts = {"critical": [1.0, 2.0], "normal": [0.0, 1.5, 3.0], "low": [0.5, 1.2, 4.0]}
    shares = shares_while_all_busy(starts, ["critical", "normal", "low"])
    # The window is [1.0, 2.0]: critical 2, normal 1, low 1 of 4 jobs started.
    assert shares == {"critical": 0.5, "normal": 0.25, "low": 0.25}


def played(name: str, elapsed: float = 1.25) -> Run:
    run = Run(name, elapsed=elapsed)
    for n, level in enumerate(LEVELS * 2):
        run.record(level, float(n), 0.001 * (n + 1))
    return run


def test_the_report_keeps_the_readmes_columns_one_row_per_run_and_level() -> None:
    lines = report([played("strict"), played("sorted+aging")], LEVELS, WEIGHTS)
    text = "\n".join(lines)
    assert lines[0] == "lockgate demo: 5,000 low + 500 normal + 100 critical, concurrency 8"
    assert HEADER.match(lines[1])
    assert len(lines) == 2 + 2 * len(LEVELS) + 1
    assert re.search(r"^strict +critical +2 +", text, re.M)
    assert re.search(r"^ +normal +2 +", text, re.M)  # the run is named on its first row
    assert lines[-1] == "weights 10:5:1 = critical 62.5%, normal 31.2%, low 6.2%"


@pytest.mark.parametrize("width", [50, 60, 80])
def test_the_report_fits_the_terminal(width: int) -> None:
    lines = report([played("strict"), played("sorted+aging")], LEVELS, WEIGHTS, width)
    assert all(display_width(line) <= width for line in lines), "\n".join(lines)
    rows = [line for line in lines if re.search(r" (critical|normal|low)  ", line)]
    assert len(rows) == 2 * len(LEVELS)
    for row in rows:  # the numbers' headers wrapped, names were cut; no number was
        assert re.search(r" \d+ +\d+\.\d +\d+\.\d +\d+\.\d%$", row), row


def test_progress_without_a_terminal_prints_one_line_per_run() -> None:
    out, err = io.StringIO(), io.StringIO()
    progress = Progress(out, err, live=False, width=80)
    progress.update("strict", 10, 5600)
    progress.finished(played("strict", elapsed=1.25))
    assert err.getvalue() == ""
    assert out.getvalue() == "        strict  6 jobs in 1.2s\n"


def test_progress_at_a_terminal_rewrites_one_line_then_wipes_it() -> None:
    out, err = io.StringIO(), io.StringIO()
    progress = Progress(out, err, live=True, width=40)
    progress.update("weighted", 0, 5600)
    progress.update("weighted", 5600, 5600)
    shown = err.getvalue().split("\r")[1:]
    assert [part.rstrip() for part in shown] == [
        progress_line("weighted", 0, 5600, 39),
        progress_line("weighted", 5600, 5600, 39),
    ]
    assert all(len(part) < 40 for part in shown) and shown[1].endswith("5600/5600")
    progress.finished(played("weighted"))
    assert err.getvalue().endswith("\r" + " " * len(shown[1]) + "\r")
    assert out.getvalue() == "      weighted  6 jobs in 1.2s\n"


# The real flood takes ~10 s; a smaller one plays the same three runs into the same figure.
SMALL_DEMO = (
    # A hang ends with every thread's traceback on stderr, before the run's timeout.
    "import faulthandler; faulthandler.dump_traceback_later(45, exit=True); "
    "import lockgate.cli.demo.scenario as d; "
    "d.LOW_JOBS, d.NORMAL_JOBS, d.CRITICAL_JOBS = 600, 100, 20; "
    "from lockgate.cli import main; main(['demo', '--url', {url!r}, '--plot', {out!r}])"
)


def test_demo_plot_draws_every_run_into_a_png(redis_url: str, tmp_path: Path) -> None:
    from matplotlib.image import imread

    from lockgate.cli.demo.plot import size_pixels

    out = tmp_path / "out.png"
    code = SMALL_DEMO.format(url=redis_url, out=str(out))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"plot written to {out}")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = size_pixels(3)
    assert imread(out).shape == (height, width, 4)  # RGBA, one row per run
