"""The ``lockgate dlq`` and ``lockgate stats`` commands against ``cli_app:app``.

Commands run in-process through click's CliRunner, or through the real entry point in a
subprocess where the process matters (log levels, worker processes) and at a real
pseudo-terminal (prompts, the terminal's width). The app module reads its namespace from
the environment and is imported afresh for each test.

The dlq commands take the app first, as the docs write them: ``lockgate dlq MODULE:APP
list``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis
from cli_runs import cli_app_module, invoke, one_error_line, work_off
from click.testing import CliRunner
from terminal import Terminal

from conftest import job_ended, wait_until_sync
from lockgate import App
from lockgate.cli import main
from lockgate.core.codec import Job, encode
from lockgate.ops.deadletter import list_dead, replay

HERE = Path(__file__).parent
SPEC = "cli_app:app"
RUN_TIMEOUT = 60  # loose: a bound against hangs
IMPORTED = "DEBUG cli_app: cli_app imported"  # cli_app.IMPORTED, logged at DEBUG


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``cli_app`` imported for this test's Redis and namespace; its client closed after."""
    with cli_app_module(redis_url, namespace, monkeypatch) as module:
        yield module


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
    """Docs: ``lockgate dlq shop.jobs:app list [--json] | show ID | replay ... | purge``."""
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
    by_task = invoke("dlq", SPEC, "replay", "--task", "email", "--yes")
    assert by_task.exit_code == 0, by_task.output
    assert "replayed 1 of 1" in by_task.stdout
    assert {letter.job_id for letter in list_dead(cli.app)} == {"charge-A1", "charge-A2"}

    everything = invoke("dlq", SPEC, "replay", "--all", "--yes")
    assert everything.exit_code == 0, everything.output
    assert "replayed 2 of 2" in everything.stdout
    assert list_dead(cli.app) == []
    work_off(cli.app)
    charged = sorted(rclient.lrange(cli.record_key("charged"), 0, -1))
    assert charged == [b"charge-A1", b"charge-A2"]
    assert rclient.lrange(cli.record_key("emailed"), 0, -1) == [b"email-x"]

    nothing = invoke("dlq", SPEC, "replay", "--all", "--yes")
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
    assert job_ended(rclient, cli.app.keys, "charge-U")

    undeclared = invoke("dlq", SPEC, "replay", entry_id, "--level", "urgent")
    assert undeclared.exit_code == 2
    assert "unknown priority 'urgent'" in one_error_line(undeclared)
    unserved = invoke("dlq", SPEC, "replay", "--all", "--queue", "reports", "--yes")
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


# --- helpers for the tests below -------------------------------------------------------


@pytest.fixture
def env(redis_url: str, namespace: str) -> dict[str, str]:
    """The environment of a ``lockgate`` subprocess for this test's Redis and namespace."""
    return dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)


def lockgate(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the real ``lockgate`` command, with no terminal attached, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *args],
        cwd=HERE, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT,
    )  # fmt: skip


def at_terminal(*args: str, env: dict[str, str], columns: int = 80) -> Terminal:
    return Terminal([sys.executable, "-m", "lockgate", *args], cwd=HERE, env=env, columns=columns)


# --- dlq list at the terminal's width ---------------------------------------------------

LONG_ORDER = "order-" + "7" * 150 + " (the end)"
LONG_JOB_ID = "charge-" + "x" * 60


@pytest.fixture
def long_dead(cli: ModuleType) -> dict[str, str]:
    """Dead letters, one with a job id and an error longer than a terminal's line."""
    cli.charge.enqueue(LONG_ORDER, job_id=LONG_JOB_ID)
    cli.email.enqueue("x@example.com", job_id="email-x")
    work_off(cli.app)
    return {letter.job_id: letter.id for letter in list_dead(cli.app)}


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_dlq_list_fits_the_terminal_width(long_dead: dict[str, str], columns: int) -> None:
    result = invoke("dlq", SPEC, "list", columns=columns)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) == columns, result.stdout  # the long row is cut
    assert len(lines) == 2 + len(long_dead)  # title, header, one line per letter
    letters = {letter: next(line for line in lines if line.startswith(entry_id))
               for letter, entry_id in long_dead.items()}  # fmt: skip
    # The ids stay whole: they are what show and replay take.
    assert "ValueError: ca" in letters[LONG_JOB_ID]
    assert letters[LONG_JOB_ID].endswith("…")
    assert "(the end)" not in result.stdout
    assert "email-x" in letters["email-x"] and "LookupError" in letters["email-x"]


def test_dlq_list_wide_prints_every_column_and_the_whole_error(long_dead: dict[str, str]) -> None:
    result = invoke("dlq", SPEC, "list", "--wide", columns=80)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[1]
    for column in ("id", "job id", "task", "queue/level", "reason", "error", "attempt",
                   "deliveries", "failed at"):  # fmt: skip
        assert column in header
    assert f"ValueError: card declined for {LONG_ORDER}" in result.stdout
    assert LONG_JOB_ID in result.stdout
    assert "LookupError: no mailbox x@example.com" in result.stdout
    assert "…" not in result.stdout


def test_dlq_list_is_80_columns_when_stdout_is_no_terminal(
    long_dead: dict[str, str], env: dict[str, str]
) -> None:
    env.pop("COLUMNS", None)
    done = lockgate("dlq", SPEC, "list", env=env)
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) == 80, done.stdout


def test_dlq_list_fits_a_real_terminal_of_60_columns(
    long_dead: dict[str, str], env: dict[str, str]
) -> None:
    terminal = at_terminal("dlq", SPEC, "list", env=env, columns=60)
    try:
        assert terminal.finish() == 0, terminal.text
    finally:
        terminal.close()
    lines = terminal.text.splitlines()
    assert max(len(line) for line in lines) == 60, terminal.text
    assert all(entry_id in terminal.text for entry_id in long_dead.values())


def test_stats_table_fits_80_columns(cli: ModuleType) -> None:
    cli.later.enqueue(1)
    result = invoke("stats", SPEC, columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    # At 80 columns the last header wraps (oldest / wait / ms) before a name is cut.
    assert " ".join(lines[1:4]).split() == [
        "queue", "level", "waiting", "pending", "delayed", "workers", "done", "retried", "dead",
        "oldest", "wait", "ms",
    ]  # fmt: skip
    assert lines[-1] == "dead letters: 0"


# --- --log-level on every subcommand ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "debug"),
    [
        (["dlq", SPEC, "list", "--log-level", "DEBUG"], True),
        (["dlq", "--log-level", "debug", SPEC, "list"], True),
        (["--log-level", "DEBUG", "dlq", SPEC, "list"], True),  # the group's, as before
        (["--log-level", "WARNING", "dlq", SPEC, "list", "--log-level", "DEBUG"], True),
        (["--log-level", "DEBUG", "dlq", SPEC, "list", "--log-level", "WARNING"], False),
        (["dlq", SPEC, "list"], False),  # INFO by default
        (["stats", SPEC, "--log-level", "DEBUG"], True),
        (["enqueue", SPEC, "later", "--args", "[1]", "--log-level", "DEBUG"], True),
        (["--log-level", "ERROR", "worker", SPEC, "--burst", "--log-level", "DEBUG"], True),
    ],
)
def test_the_subcommands_log_level_is_the_one_that_counts(
    env: dict[str, str], args: list[str], debug: bool
) -> None:
    done = lockgate(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert (IMPORTED in done.stderr) is debug, done.stderr


@pytest.fixture
def root_log_level() -> Iterator[None]:
    """In-process commands set the root logger's level: put it back after."""
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


@pytest.mark.usefixtures("root_log_level")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["stats", SPEC, "--json"], 0),
        (["enqueue", SPEC, "later", "--args", "[1]"], 0),
        (["dlq", SPEC, "list"], 0),
        (["dlq", SPEC, "show", "0-1"], 2),
        (["dlq", SPEC, "replay", "--all", "--yes"], 0),
        (["dlq", SPEC, "trim"], 0),
        (["dlq", SPEC, "purge", "--yes"], 0),
        (["pg", "init", "--dsn", "host=127.0.0.1 port=1 dbname=test connect_timeout=5"], 2),
        (["demo", "--url", "redis://127.0.0.1:1/0"], 2),
    ],
)
def test_every_subcommand_takes_log_level(cli: ModuleType, args: list[str], code: int) -> None:
    result = invoke(*args, "--log-level", "WARNING")
    assert result.exit_code == code, result.output
    if code:  # the command's own one-line error, not a usage error about the option
        one_error_line(result)


@pytest.mark.parametrize(
    "args",
    [
        ["--log-level", "DEBUG", "worker", SPEC, "--processes", "2"],
        ["--log-level", "ERROR", "worker", SPEC, "--processes", "2", "--log-level", "DEBUG"],
    ],
)
def test_worker_processes_get_the_effective_log_level(
    env: dict[str, str], tmp_path: Path, args: list[str]
) -> None:
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *args],
            cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:
        # Only the workers import the app: its DEBUG line twice is both of them at DEBUG.
        wait_until_sync(
            lambda: log.read_text().count(IMPORTED) >= 2,
            message="both worker processes logging at DEBUG",
        )
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(RUN_TIMEOUT) == 0, log.read_text()
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)


# --- worker --queues naming a queue the app does not use -------------------------------


def test_queues_no_task_uses_are_one_warning_and_the_worker_goes_on(
    cli: ModuleType, env: dict[str, str], rclient: redis.Redis
) -> None:
    cli.later.enqueue(7)
    done = lockgate("worker", SPEC, "--burst", "--queues", "default, nowhere,elsewhere", env=env)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, done.stderr
    assert warnings[0].endswith(
        "--queues names nowhere, elsewhere, which no task of the app uses "
        "(its queues: default, mail); serving it anyway"
    )
    assert rclient.lrange(cli.record_key("later"), 0, -1) == [b"7"]


def test_queues_the_app_uses_give_no_warning(cli: ModuleType, env: dict[str, str]) -> None:
    done = lockgate("worker", SPEC, "--burst", "--queues", "mail,default", env=env)
    assert done.returncode == 0, done.stderr
    assert " WARNING " not in done.stderr


# --- dlq help without an importable app -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["dlq", "--help"],
        ["dlq", "no_such_module:app", "--help"],
        *(["dlq", "no_such_module:app", command, "--help"]
          for command in ("list", "show", "replay", "trim", "purge")),
    ],
)  # fmt: skip
def test_dlq_help_needs_no_importable_app(args: list[str]) -> None:
    result = CliRunner().invoke(main, args, prog_name="lockgate", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: lockgate dlq")


def test_a_dlq_command_still_reports_an_app_that_cannot_be_imported() -> None:
    result = CliRunner().invoke(main, ["dlq", "no_such_module:app", "list"])
    assert result.exit_code == 2
    assert "cannot import 'no_such_module'" in result.stderr


# --- confirmation of purge and bulk replays ---------------------------------------------

BULK = [["purge"], ["replay", "--all"], ["replay", "--task", "charge"]]


def nothing_touched(cli: ModuleType, rclient: redis.Redis, dead: dict[str, str]) -> None:
    assert {letter.job_id: letter.id for letter in list_dead(cli.app)} == dead
    assert not [job_id for job_id in dead if not job_ended(rclient, cli.app.keys, job_id)]


@pytest.mark.parametrize("args", BULK)
def test_bulk_changes_without_a_terminal_or_yes_are_refused_touching_nothing(
    cli: ModuleType, dead: dict[str, str], rclient: redis.Redis, args: list[str]
) -> None:
    result = invoke("dlq", SPEC, *args)
    assert result.exit_code == 2, result.output
    assert "stdin is not a terminal); pass --yes" in one_error_line(result)
    assert result.stdout == ""
    nothing_touched(cli, rclient, dead)


@pytest.mark.parametrize(
    ("args", "done"),
    [
        (["purge", "--yes"], "purged 3 dead letters"),
        (["replay", "--all", "--yes"], "replayed 3 of 3"),
        (["replay", "--task", "charge", "--yes"], "replayed 2 of 2"),
        (["replay", "--yes", "--task", "email"], "replayed 1 of 1"),
    ],
)
def test_bulk_changes_with_yes_go_ahead_without_a_terminal(
    cli: ModuleType, dead: dict[str, str], args: list[str], done: str
) -> None:
    result = invoke("dlq", SPEC, *args)
    assert result.exit_code == 0, result.output
    assert done in result.stdout
    assert len(list_dead(cli.app)) == 3 - int(done.split()[1])


@pytest.mark.parametrize(
    ("args", "question", "done", "left"),
    [
        (["purge"], "delete all 3 dead letters of", "purged 3 dead letters", 0),
        (["replay", "--all"], "replay 3 dead letters of", "replayed 3 of 3", 0),
        (["replay", "--task", "charge"], "replay 2 dead letters of task 'charge' of",
         "replayed 2 of 2", 1),
    ],
)  # fmt: skip
@pytest.mark.parametrize("answer", ["y", "n"])
def test_bulk_changes_ask_at_a_terminal(
    cli: ModuleType, dead: dict[str, str], rclient: redis.Redis, env: dict[str, str],
    args: list[str], question: str, done: str, left: int, answer: str,
) -> None:  # fmt: skip
    terminal = at_terminal("dlq", SPEC, *args, env=env)
    try:
        terminal.expect(question)
        terminal.expect("[y/N]")
        terminal.type(f"{answer}\n")
        code = terminal.finish()
    finally:
        terminal.close()
    if answer == "y":
        assert code == 0, terminal.text
        assert done in terminal.text
        assert len(list_dead(cli.app)) == left
    else:
        assert code == 1, terminal.text
        assert "Aborted" in terminal.text and done not in terminal.text
        nothing_touched(cli, rclient, dead)


def test_a_bulk_replay_reports_a_letter_gone_meanwhile_and_leaves_it_alone(
    cli: ModuleType, dead: dict[str, str], rclient: redis.Redis, env: dict[str, str]
) -> None:
    """Another operator replays a letter while this one is asked: it is not replayed again,
    and only what this command enqueued counts as replayed."""
    terminal = at_terminal("dlq", SPEC, "replay", "--all", env=env)
    try:
        terminal.expect("replay 3 dead letters of")
        terminal.expect("[y/N]")
        email = next(lt for lt in list_dead(cli.app) if lt.job_id == "email-x")
        (other,) = replay(cli.app, [email])  # the other operator's replay
        assert other.outcome == "enqueued"
        terminal.type("y\n")
        code = terminal.finish()
    finally:
        terminal.close()
    assert code == 0, terminal.text  # nothing stays: no letter needs attention
    assert f"{dead['email-x']} email-x gone replayed or removed by someone else" in terminal.text
    assert f"{dead['charge-A1']} charge-A1 enqueued" in terminal.text
    assert "replayed 2 of 3 (1 gone: replayed or removed by someone else)" in terminal.text
    assert list_dead(cli.app) == []
    # The e-mail is queued once, by the other replay.
    stream = cli.app.keys.stream("mail", "low")
    queued = [fields[b"job"] for _, fields in rclient.xrange(stream)]
    assert sum(b'"email-x"' in job for job in queued) == 1


CONCURRENT_LETTERS = 250
SUMMARY = re.compile(r"^replayed (\d+) of (\d+)(?: \((\d+) gone: .*\))?$", re.MULTILINE)


def test_two_bulk_replays_at_once_enqueue_each_job_once_and_say_so(
    cli: ModuleType, rclient: redis.Redis, env: dict[str, str]
) -> None:
    """Two operators run ``dlq replay --all`` at two terminals, both list every letter and
    both answer yes at once: each letter is replayed by one of them; each reports the rest
    of its listing as gone, and neither fails for it."""
    with rclient.pipeline(transaction=False) as pipe:
        for n in range(CONCURRENT_LETTERS):
            job = Job(id=f"charge-{n}", task="charge", queue="default", level="normal", args=[n])
            pipe.xadd(cli.app.keys.dead(), {"job_id": job.id, "task": "charge", "job": encode(job)})
        pipe.execute()
    terminals = [at_terminal("dlq", SPEC, "replay", "--all", env=env) for _ in range(2)]
    try:
        for terminal in terminals:
            terminal.expect(f"replay {CONCURRENT_LETTERS} dead letters of")
            terminal.expect("[y/N]")
        for terminal in terminals:
            terminal.type("y\n")
        codes = [terminal.finish() for terminal in terminals]
    finally:
        for terminal in terminals:
            terminal.close()
    replayed = 0
    for terminal, code in zip(terminals, codes, strict=True):
        assert code == 0, terminal.text
        (summary,) = SUMMARY.findall(terminal.text)
        done, listed, gone = int(summary[0]), int(summary[1]), int(summary[2] or 0)
        assert done + gone == listed == CONCURRENT_LETTERS
        assert terminal.text.count(" enqueued\n") == done
        assert terminal.text.count(" gone replayed or removed by someone else\n") == gone
        replayed += done
    assert replayed == CONCURRENT_LETTERS
    assert list_dead(cli.app) == []
    stream = cli.app.keys.stream("default", "normal")
    assert rclient.xlen(stream) == CONCURRENT_LETTERS  # each job queued once


def test_a_single_replay_does_not_ask_at_a_terminal(
    cli: ModuleType, dead: dict[str, str], env: dict[str, str]
) -> None:
    terminal = at_terminal("dlq", SPEC, "replay", dead["email-x"], env=env)
    try:
        assert terminal.finish() == 0, terminal.text
    finally:
        terminal.close()
    assert "replayed 1 of 1" in terminal.text and "[y/N]" not in terminal.text
