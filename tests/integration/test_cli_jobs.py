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
from cli_runs import cli_app_module, invoke, one_error_line, work_off

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


# --- lockgate job ------------------------------------------------------------------------


def test_job_shows_a_done_jobs_result_and_a_dead_jobs_error(cli: ModuleType) -> None:
    done = cli.divide.enqueue(6, 3, job_id="div-ok")
    dead = cli.divide.enqueue(1, 0, job_id="div-zero")
    work_off(cli.app)

    shown = invoke("job", SPEC, done.job_id)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[:3] == ["job div-ok: done", "task: divide", "attempts: 1"]
    assert "result: 2.0" in lines
    assert any(line.startswith("finished_at: ") for line in lines)
    fields = json.loads(invoke("job", SPEC, done.job_id, "--json").stdout)
    assert (fields["status"], fields["result"], fields["attempts"]) == ("done", 2.0, 1)
    assert fields["error"] is None and fields["finished_at"] is not None

    shown = invoke("job", SPEC, dead.job_id)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("job div-zero: dead\n")
    assert "error: ZeroDivisionError: float division by zero" in shown.stdout.splitlines()
    assert "Traceback" in shown.stdout
    fields = json.loads(invoke("job", SPEC, dead.job_id, "--json").stdout)
    assert fields["status"] == "dead" and fields["result"] is None
    assert fields["error"]["type"] == "ZeroDivisionError"


def test_job_of_a_waiting_job_and_of_an_unknown_one(cli: ModuleType) -> None:
    waiting = cli.later.enqueue(1)
    fields = json.loads(invoke("job", SPEC, waiting.job_id, "--json").stdout)
    assert (fields["status"], fields["task"], fields["attempts"]) == ("waiting", "later", 0)
    assert fields["queue"] == "default"
    assert fields["result_kept"] is False and fields["enqueued_at"] is not None
    assert fields["arguments"] == "[1]"  # known while it waits, runs or is delayed
    assert "arguments: [1]" in invoke("job", SPEC, waiting.job_id).stdout.splitlines()

    unknown = invoke("job", SPEC, "no-such-job")
    assert unknown.exit_code == 2
    assert one_error_line(unknown) == (
        "error: no job with id 'no-such-job' (never enqueued, or it ended longer ago than "
        "the app keeps statuses: status_ttl)"
    )


# --- lockgate cancel ---------------------------------------------------------------------


def test_cancel_prints_the_outcome_and_exits_2_for_an_unknown_job(cli: ModuleType) -> None:
    waiting = cli.later.enqueue(1, job_id="later-1")
    cancelled = invoke("cancel", SPEC, waiting.job_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout == "job later-1: cancelled: it had not started and will not run\n"
    assert cli.app.job(waiting.job_id).status == "cancelled"

    again = invoke("cancel", SPEC, waiting.job_id)
    assert again.exit_code == 0, again.output
    assert again.stdout == "job later-1: ended already: nothing to cancel\n"

    unknown = invoke("cancel", SPEC, "no-such-job")
    assert unknown.exit_code == 2
    assert unknown.stdout.startswith("job no-such-job: unknown: never enqueued")


# --- lockgate enqueue --delay ------------------------------------------------------------


def test_enqueue_with_a_delay_makes_a_delayed_job(cli: ModuleType) -> None:
    result = invoke("enqueue", SPEC, "later", "--args", "[4]", "--job-id", "late-4",
                    "--delay", "60")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == "late-4 enqueued, due in 60 s\n"
    assert cli.app.job("late-4").status == "delayed"

    at_once = invoke("enqueue", SPEC, "later", "--args", "[5]", "--job-id", "now-5")
    assert at_once.stdout == "now-5 enqueued\n"
    assert cli.app.job("now-5").status == "waiting"
    refused = invoke("enqueue", SPEC, "later", "--args", "[6]", "--delay", "-1")
    assert refused.exit_code == 2
