"""The quickstart of the getting-started page, and the commands the page shows beside it."""

from __future__ import annotations

import json

from .conftest import DocsRun

APP = "examples.quickstart:app"


def _stats(docs_run: DocsRun) -> dict[str, object]:
    result = docs_run.run(["-m", "lockgate", "stats", APP, "--json"])
    assert result.returncode == 0, result.stderr
    stats: dict[str, object] = json.loads(result.stdout)
    return stats


def _drained(stats: dict[str, object]) -> bool:
    rows = stats["levels"]
    assert isinstance(rows, list) and rows
    return stats["dead_letters"] == 0 and all(
        row["length"] == row["pending"] == row["delayed"] == 0 for row in rows
    )


def test_quickstart_runs_jobs_by_priority(docs_run: DocsRun) -> None:
    result = docs_run.run(["-m", "examples.quickstart"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "pay:A1 created: True, again: False",
        # One at a time: the payments (critical) before the roll-up (low) enqueued first.
        "charged A1: 100",
        "charged A2: 5",
        "charged A3: 7",
        "rolled up 2024-01-31",
    ]
    stats = _stats(docs_run)
    assert stats["namespace"] == "quickstart"
    assert _drained(stats), stats


def test_quickstart_runs_twice(docs_run: DocsRun) -> None:
    """Done jobs leave nothing behind that would turn the next run's jobs into duplicates."""
    for _ in range(2):
        result = docs_run.run(["-m", "examples.quickstart"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("pay:A1 created: True, again: False\n")


def test_cli_commands_of_the_page(docs_run: DocsRun) -> None:
    """`lockgate enqueue` and `lockgate worker --burst` on the quickstart's app."""
    enqueued = docs_run.run(
        ["-m", "lockgate", "enqueue", APP, "charge", "--args", '["A4", 9]', "--job-id", "pay:A4"]
    )
    assert enqueued.returncode == 0, enqueued.stderr
    assert "pay:A4" in enqueued.stdout
    waiting = _stats(docs_run)
    assert not _drained(waiting), waiting
    worked = docs_run.run(["-m", "lockgate", "worker", APP, "--burst", "--concurrency", "8"])
    assert worked.returncode == 0, worked.stderr
    assert worked.stdout.splitlines() == ["charged A4: 9"]
    assert _drained(_stats(docs_run))
