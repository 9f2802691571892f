"""``lockgate flow MODULE:APP FLOW_ID`` against ``cli_app:app``: a finished chord, a failed
flow with its dead letter, JSON, a narrow terminal, an unknown flow and an unreachable
server.

Commands run in-process through click's CliRunner (stdin no terminal); the app module
reads its namespace from the environment and is imported afresh for each test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import pytest
import redis
from cli_runs import cli_app_module, invoke, one_error_line, work_off

from lockgate import group
from lockgate.cli.tables import display_width

SPEC = "cli_app:app"
MEMBERS = 10


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``cli_app`` imported for this test's Redis and namespace; its client closed after."""
    with cli_app_module(redis_url, namespace, monkeypatch) as module:
        yield module


def chord(cli: ModuleType, flow_id: str) -> None:
    """``later`` members side by side, then one more ``later``: run to the end."""
    members = group(*(cli.later.message(n) for n in range(MEMBERS)))
    cli.app.enqueue_flow(members.then(cli.later.message(99)), flow_id=flow_id)
    work_off(cli.app, concurrency=4)


def test_a_finished_chord_as_a_table(cli: ModuleType) -> None:
    chord(cli, "nightly")
    result = invoke("flow", SPEC, "nightly")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"flow nightly of {cli.app.namespace}: done"
    assert lines[1].startswith("created 20") and lines[1].endswith(f"UTC; {MEMBERS + 1} jobs")
    assert lines[2].split() == ["id", "task", "state", "waits", "on"]
    rows = [line.split(None, 3) for line in lines[3:]]
    assert [row[0] for row in rows] == [f"nightly.{n}" for n in range(MEMBERS + 1)]
    assert all(row[1:3] == ["later", "done"] for row in rows)
    assert rows[0][3] == "-"
    assert rows[-1][3] == ", ".join(f"nightly.{n}" for n in range(MEMBERS))
    assert "dead letter" not in result.stdout  # no job is dead: no such column


def test_json_has_every_job_in_full(cli: ModuleType) -> None:
    chord(cli, "nightly")
    result = invoke("flow", SPEC, "nightly", "--json", columns=40)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["flow_id"], shown["state"]) == ("nightly", "done")
    assert shown["created_at"].startswith("20") and shown["created_at"].endswith("+00:00")
    assert len(shown["jobs"]) == MEMBERS + 1
    assert shown["jobs"][0] == {
        "id": "nightly.0", "task": "later", "state": "done", "waits_on": [], "dead_letter": None,
    }  # fmt: skip
    assert shown["jobs"][-1]["waits_on"] == [f"nightly.{n}" for n in range(MEMBERS)]


def test_a_failed_flow_names_the_dead_letter_of_its_dead_job(cli: ModuleType) -> None:
    flow = group(cli.later.message(1), cli.charge.message("A1")).then(cli.later.message(2))
    cli.app.enqueue_flow(flow, flow_id="checkout")
    work_off(cli.app, concurrency=4)
    result = invoke("flow", SPEC, "checkout")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith(": failed")
    assert lines[2].split() == ["id", "task", "state", "waits", "on", "dead", "letter"]
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert rows["checkout.0"][1:3] == ["later", "done"]
    assert rows["checkout.1"][1:3] == ["charge", "dead"]
    assert rows["checkout.2"][1:3] == ["later", "waiting"]
    letter = rows["checkout.1"][-1]
    shown = invoke("dlq", SPEC, "show", letter)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["job_id"] == "checkout.1"
    as_json = json.loads(invoke("flow", SPEC, "checkout", "--json").stdout)
    assert as_json["jobs"][1]["dead_letter"] == letter
    narrow = invoke("flow", SPEC, "checkout", columns=64).stdout
    assert letter in narrow  # never cut: it is there to be shown or replayed
    callback = narrow.splitlines()[-1]  # what it waits on gave way instead
    assert callback.startswith("checkout.2") and callback.endswith("…"), narrow


def test_a_narrow_terminal_cuts_what_a_job_waits_on(cli: ModuleType) -> None:
    chord(cli, "nightly")
    result = invoke("flow", SPEC, "nightly", columns=60)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(display_width(line) <= 60 for line in lines), result.stdout
    callback = lines[-1]
    assert callback.startswith(f"nightly.{MEMBERS}") and callback.endswith("…")
    assert "nightly.0, nightly.1" in callback


def test_an_unknown_flow_is_one_error_line_and_exit_2(cli: ModuleType) -> None:
    for extra in ((), ("--json",)):
        result = invoke("flow", SPEC, "no-such-flow", *extra)
        assert result.exit_code == 2
        assert result.stdout == ""
        line = one_error_line(result)
        assert line.startswith("error: no flow with id 'no-such-flow'")
        assert "flow_ttl" in line


def test_an_unreachable_server_is_one_error_line_and_exit_2(cli: ModuleType) -> None:
    result = invoke("flow", SPEC, "nightly", "--url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 2
    assert "127.0.0.1:1" in one_error_line(result)


def test_help_needs_no_app() -> None:
    result = invoke("flow", "--help")
    assert result.exit_code == 0
    assert "FLOW_ID" in result.stdout and "--json" in result.stdout


def test_the_flow_ran_where_the_test_looks(cli: ModuleType, rclient: redis.Redis) -> None:
    """The chord's jobs ran (``later`` records each), so the table is of a real run."""
    chord(cli, "nightly")
    ran = sorted(int(v) for v in rclient.lrange(cli.record_key("later"), 0, -1))
    assert ran == [*range(MEMBERS), 99]
