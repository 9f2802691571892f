"""Issue 28: ``@app.task(secret_args=True)``. The task gets its real arguments, and
``App.job`` its real result; job log lines, ``lockgate job`` and the dead-letter listings
show ``***`` instead; a replayed job stays secret.

Commands run in-process through click's CliRunner on ``secret_app``, imported afresh in
the test's namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from types import ModuleType

import pytest
from cli_runs import cli_app_module, invoke

from lockgate import App, Worker, WorkerConfig
from lockgate.core.masking import MASK
from lockgate.ops.deadletter import list_dead
from lockgate.worker.joblog import JOBS_LOGGER, JobLog

SPEC = "secret_app:app"
CARD, EMAIL, DECLINED = "tok_4242_secret", "someone@example.com", "tok_9999_secret"


@pytest.fixture
def secret(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with cli_app_module(redis_url, namespace, monkeypatch, "secret_app") as module:
        yield module


def work_off_logged(app: App) -> None:
    """A burst worker with job lines (``--log-jobs``)."""

    async def run() -> None:
        worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=1.0))
        worker.watchers.add(JobLog(app).enable())
        try:
            await worker.run(burst=True)
        finally:
            await app.aclose()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_secret_arguments_reach_the_task_and_are_masked_wherever_shown(
    secret: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    assert secret.charge.settings.secret_args is True
    secret.charge.enqueue(CARD, email=EMAIL, job_id="charge-1")
    secret.refuse.enqueue(DECLINED, job_id="refuse-1")
    secret.plain.enqueue("visible-token", job_id="plain-1")
    with caplog.at_level(logging.INFO, logger=JOBS_LOGGER):
        work_off_logged(secret.app)

    # The task got the real arguments; App.job gives the caller the real result.
    info = secret.app.job("charge-1")
    assert (info.status, info.result) == ("done", f"charged {CARD} for {EMAIL}")
    assert (info.progress, info.progress_note) == (0.5, "half")

    lines = [r.getMessage() for r in caplog.records if r.name == JOBS_LOGGER]
    assert any("charge-1" in line for line in lines) and any("refuse-1" in line for line in lines)
    logged = caplog.text + json.dumps([vars(r) for r in caplog.records], default=str)
    for value in (CARD, EMAIL, DECLINED):
        assert value not in logged

    shown = invoke("job", SPEC, "charge-1")
    assert shown.exit_code == 0, shown.output
    assert f'result: "{MASK}"' in shown.stdout.splitlines()
    assert "progress: 50% (half)" in shown.stdout.splitlines()
    fields = json.loads(invoke("job", SPEC, "charge-1", "--json").stdout)
    assert (fields["result"], fields["progress"], fields["progress_note"]) == (MASK, 0.5, "half")
    assert CARD not in json.dumps(fields)
    plain = json.loads(invoke("job", SPEC, "plain-1", "--json").stdout)
    assert plain["result"] == "visible-token"  # a plain task's result is shown as it is

    listed = invoke("dlq", SPEC, "list", "--json")
    assert listed.exit_code == 0, listed.output
    (letter,) = json.loads(listed.stdout)
    assert letter["secret"] is True and "stored" not in letter
    assert json.loads(letter["job"])["args"] == [MASK]
    assert DECLINED not in listed.stdout
    assert letter["error"] == "card declined"  # errors are shown as raised
    table = invoke("dlq", SPEC, "list")
    assert "refuse-1" in table.stdout and DECLINED not in table.stdout
    one = invoke("dlq", SPEC, "show", letter["id"])
    assert one.exit_code == 0, one.output
    assert DECLINED not in one.stdout and json.loads(one.stdout)["secret"] is True


def test_lockgate_job_masks_a_waiting_secret_jobs_arguments(secret: ModuleType) -> None:
    secret.charge.enqueue(CARD, email=EMAIL, job_id="charge-2")
    secret.plain.enqueue("visible-token", job_id="plain-2")
    shown = invoke("job", SPEC, "charge-2")
    assert shown.exit_code == 0, shown.output
    assert f'arguments: ["{MASK}"] {{"email":"{MASK}"}}' in shown.stdout.splitlines()
    fields = json.loads(invoke("job", SPEC, "charge-2", "--json").stdout)
    assert fields["arguments"] == f'["{MASK}"] {{"email":"{MASK}"}}'
    assert CARD not in shown.stdout + json.dumps(fields) and EMAIL not in shown.stdout
    plain = json.loads(invoke("job", SPEC, "plain-2", "--json").stdout)
    assert plain["arguments"] == '["visible-token"]'


def test_a_replayed_secret_job_stays_secret(secret: ModuleType) -> None:
    secret.refuse.enqueue(DECLINED, job_id="refuse-2")
    work_off_logged(secret.app)
    (letter,) = list_dead(secret.app)
    assert letter.secret and DECLINED not in letter.job
    replayed = invoke("dlq", SPEC, "replay", letter.id)
    assert replayed.exit_code == 0, replayed.output
    assert list_dead(secret.app) == []
    work_off_logged(secret.app)  # it ran with its real argument again, and died again
    (again,) = list_dead(secret.app)
    assert again.job_id == "refuse-2" and again.id != letter.id
    assert again.secret and DECLINED not in again.job and DECLINED in again.stored
    assert json.loads(again.job)["args"] == [MASK]
