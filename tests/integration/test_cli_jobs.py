"""Issue 27: the CLI's traps. ``lockgate stats`` shows paused queues; ``lockgate job``,
``lockgate cancel`` and ``lockgate enqueue --delay``.

Commands run in-process through click's CliRunner (see cli_runs.py) on ``cli_app``,
imported afresh in the test's namespace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import pytest
from cli_runs import cli_app_module, invoke

SPEC = "cli_app:app"


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with cli_app_module(redis_url, namespace, monkeypatch) as module:
        yield module


# --- stats shows paused queues -----------------------------------------------------------


def test_stats_and_stats_json_show_paused_queues(cli: ModuleType) -> None:
    cli.later.enqueue(1)
    before = invoke("stats", SPEC, "--json")
    assert before.exit_code == 0, before.output
    assert json.loads(before.stdout)["paused_queues"] == []
    assert "paused" not in invoke("stats", SPEC).stdout

    paused = invoke("queue", SPEC, "pause", "mail")
    assert paused.exit_code == 0, paused.output

    stats = json.loads(invoke("stats", SPEC, "--json").stdout)
    assert stats["paused_queues"] == ["mail"]
    rows = {(row["queue"], row["level"]): row for row in stats["levels"]}
    assert rows[("mail", "low")]["paused"] is True
    assert rows[("default", "normal")]["paused"] is False
    table = invoke("stats", SPEC, columns=80)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[-1] == "paused queues: mail"
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
