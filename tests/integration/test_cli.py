"""The ``lockgate dlq`` and ``lockgate stats`` commands against ``cli_app:app``.

Commands run in-process through click's CliRunner (one through the real entry point in a
subprocess). The app module reads its namespace from the environment and is imported
afresh for each test.

The dlq commands take the app first, as the README writes them: ``lockgate dlq MODULE:APP
list``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis
from click.testing import CliRunner, Result

from lockgate import App, Worker, WorkerConfig
from lockgate.cli import main
from lockgate.codec import Job, encode
from lockgate.deadletter import list_dead

HERE = Path(__file__).parent
SPEC = "cli_app:app"


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``cli_app`` imported for this test's Redis and namespace; its client closed after."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("LOCKGATE_TEST_NAMESPACE", namespace)
    sys.modules.pop("cli_app", None)
    module = importlib.import_module("cli_app")
    yield module
    module.app.close()
    sys.modules.pop("cli_app", None)


def invoke(*args: str) -> Result:
    # Wide enough that rich tables do not fold the values the tests look for.
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "400"})


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def work_off(app: App) -> None:
    """Run a worker until nothing is queued, delayed or running."""

    async def run() -> None:
        try:
            await Worker(app, WorkerConfig(concurrency=2, idle_wait=1.0)).run(burst=True)
        finally:
            await app.aclose()

    asyncio.run(asyncio.wait_for(run(), 60))


@pytest.fixture
def dead(cli: ModuleType) -> dict[str, str]:
    """Two charges and an e-mail, failed and dead-lettered: job id -> dead-letter id."""
    cli.charge.enqueue("A1", job_id="charge-A1")
    cli.charge.enqueue("A2", job_id="charge-A2")
    cli.email.enqueue("x@example.com", job_id="email-x")
    work_off(cli.app)
    letters = {letter.job_id: letter.id for letter in list_dead(cli.app)}
    assert set(letters) == {"charge-A1", "charge-A2", "email-x"}
    return letters


def test_the_documented_dlq_command_line_works(cli: ModuleType) -> None:
    """README: ``lockgate dlq shop.jobs:app list [--json] | show ID | replay ... | purge``."""
    result = invoke("dlq", SPEC, "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_dlq_list_as_a_table_and_as_json(dead: dict[str, str]) -> None:
    table = invoke("dlq", SPEC, "list")
    assert table.exit_code == 0, table.output
    for job_id in dead:
        assert job_id in table.stdout
    assert "card declined" in table.stdout

    listed = invoke("dlq", SPEC, "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = {row["job_id"]: row for row in json.loads(listed.stdout)}
    assert {job_id: row["id"] for job_id, row in rows.items()} == dead
    email = rows["email-x"]
    assert (email["task"], email["reason"]) == ("email", "failed")
    assert email["error_type"] == "LookupError"
    assert (email["queue"], email["level"], email["attempt"]) == ("mail", "low", 1)
    assert "LookupError: no mailbox x@example.com" in email["traceback"]

    limited = invoke("dlq", SPEC, "list", "--json", "--limit", "1")
    assert len(json.loads(limited.stdout)) == 1


def test_dlq_show_prints_one_letter_with_its_traceback(dead: dict[str, str]) -> None:
    shown = invoke("dlq", SPEC, "show", dead["charge-A1"])
    assert shown.exit_code == 0, shown.output
    letter = json.loads(shown.stdout)
    assert (letter["id"], letter["job_id"]) == (dead["charge-A1"], "charge-A1")
    assert letter["error"] == "card declined for A1"
    assert "Traceback" in letter["traceback"]
    assert letter["failed_at"] >= letter["enqueued_at"] > 0


def test_dlq_show_of_a_missing_id_is_one_error_line(cli: ModuleType) -> None:
    result = invoke("dlq", SPEC, "show", "0-1")
    assert result.exit_code == 2
    assert "0-1" in one_error_line(result)


def test_dlq_replay_one_id_keeps_the_job_id_and_the_job_runs(
    cli: ModuleType, dead: dict[str, str], rclient: redis.Redis
) -> None:
    rclient.set(cli.record_key("fixed"), 1)
    result = invoke("dlq", SPEC, "replay", dead["charge-A1"])
    assert result.exit_code == 0, result.output
    assert f"{dead['charge-A1']} charge-A1 enqueued" in result.stdout
    assert "replayed 1 of 1" in result.stdout
    assert {letter.job_id for letter in list_dead(cli.app)} == {"charge-A2", "email-x"}
    work_off(cli.app)
    assert rclient.lrange(cli.record_key("charged"), 0, -1) == [b"charge-A1"]


def test_dlq_replay_by_task_and_all(
    cli: ModuleType, dead: dict[str, str], rclient: redis.Redis
) -> None:
    rclient.set(cli.record_key("fixed"), 1)
    by_task = invoke("dlq", SPEC, "replay", "--task", "email")
    assert by_task.exit_code == 0, by_task.output
    assert "replayed 1 of 1" in by_task.stdout
    assert {letter.job_id for letter in list_dead(cli.app)} == {"charge-A1", "charge-A2"}

    everything = invoke("dlq", SPEC, "replay", "--all")
    assert everything.exit_code == 0, everything.output
    assert "replayed 2 of 2" in everything.stdout
    assert list_dead(cli.app) == []
    work_off(cli.app)
    charged = sorted(rclient.lrange(cli.record_key("charged"), 0, -1))
    assert charged == [b"charge-A1", b"charge-A2"]
    assert rclient.lrange(cli.record_key("emailed"), 0, -1) == [b"email-x"]

    nothing = invoke("dlq", SPEC, "replay", "--all")
    assert nothing.exit_code == 0 and "replayed 0 of 0" in nothing.stdout


@pytest.mark.parametrize("entry_id", ["0-1", "99999999999999-0", "not-an-id"])
def test_dlq_replay_of_an_id_that_does_not_exist_is_one_error_line_and_exit_2(
    dead: dict[str, str], entry_id: str
) -> None:
    result = invoke("dlq", SPEC, "replay", entry_id)
    assert result.exit_code == 2, result.output
    assert entry_id in one_error_line(result)
    assert len(dead) == 3


@pytest.mark.parametrize("args", [[], ["0-1", "--all"], ["--all", "--task", "charge"]])
def test_dlq_replay_needs_exactly_one_selector(cli: ModuleType, args: list[str]) -> None:
    result = invoke("dlq", SPEC, "replay", *args)
    assert result.exit_code == 2
    assert "exactly one of ID, --all or --task" in result.output


def test_dlq_purge(cli: ModuleType, dead: dict[str, str]) -> None:
    result = invoke("dlq", SPEC, "purge", "--yes")
    assert result.exit_code == 0, result.output
    assert "purged 3 dead letters" in result.stdout
    assert list_dead(cli.app) == []
    assert json.loads(invoke("dlq", SPEC, "list", "--json").stdout) == []


def bury(app: App, rclient: redis.Redis, job: Job, entry_id: str = "*") -> str:
    """Write a dead letter of ``job`` directly (as an app of another release left it)."""
    fields = {"job_id": job.id, "task": job.task, "reason": "failed", "job": encode(job)}
    entry: bytes = rclient.xadd(app.keys.dead(), fields, id=entry_id)
    return entry.decode()


def test_dlq_replay_of_an_undeclared_level_is_refused_until_another_is_named(
    cli: ModuleType, rclient: redis.Redis
) -> None:
    rclient.set(cli.record_key("fixed"), 1)
    job = Job(id="charge-U", task="charge", queue="default", level="urgent", args=["U"])
    entry_id = bury(cli.app, rclient, job)

    refused = invoke("dlq", SPEC, "replay", entry_id)
    assert refused.exit_code == 1, refused.output
    assert refused.stdout.splitlines() == [
        f"{entry_id} charge-U bad level 'urgent' is not declared by this app "
        "(declared: critical, normal, low); replay with --level LEVEL",
        "replayed 0 of 1",
    ]
    assert [letter.id for letter in list_dead(cli.app)] == [entry_id]
    assert not rclient.exists(cli.app.keys.job("charge-U"))

    undeclared = invoke("dlq", SPEC, "replay", entry_id, "--level", "urgent")
    assert undeclared.exit_code == 2
    assert "unknown priority 'urgent'" in one_error_line(undeclared)
    unserved = invoke("dlq", SPEC, "replay", "--all", "--queue", "reports")
    assert unserved.exit_code == 2
    assert "queue 'reports' is not served by this app" in one_error_line(unserved)
    assert len(list_dead(cli.app)) == 1

    replayed = invoke("dlq", SPEC, "replay", entry_id, "--level", "normal")
    assert replayed.exit_code == 0, replayed.output
    assert f"{entry_id} charge-U enqueued" in replayed.stdout
    assert list_dead(cli.app) == []
    work_off(cli.app)
    assert rclient.lrange(cli.record_key("charged"), 0, -1) == [b"charge-U"]


def test_dlq_trim_applies_the_apps_limits(cli: ModuleType, rclient: redis.Redis) -> None:
    job = Job(id="charge-T", task="charge", queue="default", level="normal")
    ancient = [bury(cli.app, rclient, job, f"{n * 1000}-0") for n in range(1, 301)]  # 1970
    recent = bury(cli.app, rclient, job)
    result = invoke("dlq", SPEC, "trim")
    assert result.exit_code == 0, result.output
    left = [letter.id for letter in list_dead(cli.app)]
    assert result.stdout == f"trimmed {301 - len(left)} dead letters\n"
    assert left[-1] == recent
    assert len(left) <= 100  # older than 30 days: every whole node of them went
    assert set(left[:-1]) <= set(ancient)


def test_stats_json_counts_delayed_jobs_and_dead_letters(
    cli: ModuleType, dead: dict[str, str]
) -> None:
    cli.later.enqueue(1, delay=60)
    cli.later.enqueue(2, delay=60)
    cli.later.enqueue(3)
    result = invoke("stats", SPEC, "--json")
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["dead_letters"] == 3
    assert stats["backend"] == "streams"
    rows = {(row["queue"], row["level"]): row for row in stats["levels"]}
    assert rows[("default", "normal")]["delayed"] == 2
    assert rows[("default", "normal")]["waiting"] == 1
    assert sum(row["delayed"] for row in stats["levels"]) == 2
    assert ("mail", "low") in rows

    table = invoke("stats", SPEC)
    assert table.exit_code == 0, table.output
    assert "dead letters: 3" in table.stdout


def test_the_real_command_reports_a_missing_dead_letter_with_exit_2(
    redis_url: str, namespace: str
) -> None:
    env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "dlq", SPEC, "replay", "0-1"],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == "error: no dead letter with id '0-1'"


def test_version_prints_the_installed_release() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"lockgate, version {importlib.metadata.version('lockgate')}"


def test_a_burst_worker_runs_what_is_queued_and_exits_0(
    cli: ModuleType, redis_url: str, namespace: str, rclient: redis.Redis
) -> None:
    rclient.set(cli.record_key("fixed"), 1)
    for order in ("B1", "B2", "B3"):
        cli.charge.enqueue(order, job_id=f"charge-{order}")
    env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)
    done = subprocess.run(
        [sys.executable, "-m", "lockgate", "worker", SPEC, "--burst"],
        cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    charged = sorted(v.decode() for v in rclient.lrange(cli.record_key("charged"), 0, -1))
    assert charged == ["charge-B1", "charge-B2", "charge-B3"]


def test_burst_with_several_processes_is_a_usage_error(cli: ModuleType) -> None:
    result = invoke("worker", SPEC, "--burst", "--processes", "2")
    assert result.exit_code == 2
    assert "--burst runs one worker process" in result.output
