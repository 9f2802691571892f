"""The figure of ``lockgate demo --plot FILE.png``: the demo's runs as a picture.

One row per run (policy). On the left, each job's wait (enqueue to start, log scale)
against the time it started, a colour per level: where a level waits behind another. On
the right, each level's share of the jobs started in each slice of time, stacked to 100%:
where a level gets nothing (starvation) and where the weights show. The window in which
every level had work (the table's "share while all busy") is marked, with its shares.

Drawing only, no I/O but the one file written: matplotlib's object API on the Agg
canvas, never pyplot's global state, so it is safe in any process. matplotlib comes with
the ``plot`` extra; importing this module without it raises :class:`MissingExtra`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lockgate.cli.demo.report import TITLE, Run, shares_while_all_busy
from lockgate.errors import ConfigError, MissingExtra

try:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
except ImportError as e:  # a core install: matplotlib comes with the plot extra
    raise MissingExtra("lockgate demo --plot", "plot", "matplotlib") from e

# README width: 1,080 px wide, text still readable when a browser scales it to ~800.
WIDTH_INCHES = 9.0
ROW_INCHES = 2.4
HEADER_INCHES = 0.9  # title and legend
DPI = 120
# The shares on the right are counted in slices of time: 20 ms (a normal burst lasts
# ~150 ms), wider when a run is long, so there are at most MAX_SLICES.
SLICE_SECONDS = 0.02
MAX_SLICES = 200
MIN_WAIT_MS = 0.1  # waits are drawn on a log scale: a zero wait sits on this floor
# Highest level first (the demo's critical, normal, low); more levels take tab10's next.
LEVEL_COLOURS = ("#d62728", "#1f77b4", "#9e9e9e")
MORE_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


def size_pixels(rows: int) -> tuple[int, int]:
    """The PNG's width and height, in pixels, for ``rows`` runs (pure)."""
    return round(WIDTH_INCHES * DPI), round((HEADER_INCHES + rows * ROW_INCHES) * DPI)


def colour(index: int) -> str:
    """The colour of the level at ``index`` (highest first)."""
    palette = LEVEL_COLOURS + MORE_COLOURS
    return palette[index % len(palette)]


def shares_over_time(
    run: Run, levels: Sequence[str]
) -> tuple[list[float], float, dict[str, list[float]]]:
    """Each level's share of the jobs started in each slice of time of the run (pure).

    Returns:
        The slices' left edges (seconds since the run began), their width, and per level
        its share of each slice (0 in a slice where nothing started).
    """
    times = {level: run.since_began(level) for level in levels}
    end = max((t for ts in times.values() for t in ts), default=0.0)
    width = max(SLICE_SECONDS, end / MAX_SLICES)
    slices = int(end / width) + 1
    counts = {level: [0] * slices for level in levels}
    for level, ts in times.items():
        for t in ts:
            counts[level][min(max(int(t / width), 0), slices - 1)] += 1
    totals = [sum(counts[level][i] for level in levels) for i in range(slices)]
    shares = {
        level: [n / total if total else 0.0 for n, total in zip(counts[level], totals, strict=True)]
        for level in levels
    }
    return [i * width for i in range(slices)], width, shares


def _draw_waits(ax: Axes, run: Run, levels: Sequence[str]) -> None:
    # Lowest level first, so the few critical points are drawn over the flood.
    for index in reversed(range(len(levels))):
        level = levels[index]
        waits = [max(w * 1000, MIN_WAIT_MS) for w in run.waits.get(level, [])]
        ax.scatter(run.since_began(level), waits, s=4, color=colour(index), alpha=0.5, linewidths=0)
    ax.set_yscale("log")
    ax.set_ylabel("wait (ms)")
    ax.set_title(f"{run.name}: each job's wait", loc="left", fontsize=10)
    ax.grid(True, which="major", axis="y", alpha=0.3)


def _draw_shares(ax: Axes, run: Run, levels: Sequence[str]) -> None:
    lefts, width, shares = shares_over_time(run, levels)
    bottom = [0.0] * len(lefts)
    for index, level in enumerate(levels):
        ax.bar(
            lefts, shares[level], width=width, bottom=bottom, align="edge",
            color=colour(index), linewidth=0,
        )  # fmt: skip
        bottom = [b + s for b, s in zip(bottom, shares[level], strict=True)]
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter("{x:.0%}")
    ax.set_ylabel("share of starts")
    ax.set_title(f"{run.name}: who gets the worker", loc="left", fontsize=10)
    busy = [run.since_began(level) for level in levels]
    if all(busy):
        begin, end = max(min(ts) for ts in busy), min(max(ts) for ts in busy)
        for edge in (begin, end):
            ax.axvline(edge, color="black", linestyle="--", linewidth=0.8)
        window = shares_while_all_busy(run.starts, list(levels))
        text = ", ".join(f"{level} {window[level]:.0%}" for level in levels)
        ax.text(
            0.98, 0.95, f"between the dashed lines (all levels busy):\n{text}",
            transform=ax.transAxes, ha="right", va="top", fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9, "pad": 2},
        )  # fmt: skip


def figure(runs: Sequence[Run], levels: Sequence[str], title: str = TITLE) -> Figure:
    """The demo's figure, not yet drawn to a file (pure).

    Args:
        runs: what each run recorded, one row each, in order.
        levels: the app's levels, highest first.
        title: the figure's title.

    Returns:
        The figure, sized as :func:`size_pixels` says at :data:`DPI`.
    """
    width, height = size_pixels(len(runs))
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title, fontsize=12)
    axes = fig.subplots(len(runs), 2, sharex=True, sharey="col", squeeze=False)
    for row, run in zip(axes, runs, strict=True):
        _draw_waits(row[0], run, levels)
        _draw_shares(row[1], run, levels)
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the run began")
    fig.legend(
        handles=[Patch(color=colour(i), label=level) for i, level in enumerate(levels)],
        loc="outside lower center", ncols=len(levels), frameon=False,
    )  # fmt: skip
    return fig


def check_target(path: Path) -> None:
    """Refuse, before a demo runs for nothing, a file that cannot be written.

    Raises:
        ConfigError: its directory does not exist, or it is a directory.
    """
    if path.is_dir():
        raise ConfigError(f"cannot write the plot to {path}: it is a directory")
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write the plot to {path}: no directory {path.parent}")


def write_png(runs: Sequence[Run], levels: Sequence[str], path: Path, title: str = TITLE) -> None:
    """Draw the demo's figure (see :func:`figure`) into a PNG file.

    Args:
        runs: what each run recorded, one row each, in order.
        levels: the app's levels, highest first.
        path: the file to write (replaced if it exists); PNG whatever its suffix.
        title: the figure's title.

    Raises:
        ConfigError: the file cannot be written.
    """
    fig = figure(runs, levels, title)
    try:
        fig.savefig(path, format="png", dpi=DPI)
    except OSError as e:
        raise ConfigError(f"cannot write the plot to {path}: {e.strerror or e}") from e
