"""Pausing, resuming and purging a queue (``lockgate.queues`` and ``lockgate queue``), on
both backends, with real workers and the real command line."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from cli_runs import cli_app_in, invoke, one_error_line
from terminal import Terminal

from conftest import job_ended, running, wait_until, worker_for
from lockgate import App, ConfigError
from lockgate.backend.connections import async_client
from lockgate.backend.sorted_broker import SortedConsumer
from lockgate.backend.stream_consumer import StreamConsumer
from lockgate.ops import queues

BACKENDS = ["streams", "sorted"]
HERE = Path(__file__).parent
SPEC = "cli_app:app"
DEADLINE = 5.0  # each wait here: far more than it needs, less than a test may take


async def waiting(app: App, queue: str) -> int:
    rows, _ = await app.store.stats([queue])
    return sum(row.waiting for row in rows)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_paused_queue_takes_jobs_and_a_worker_runs_none_until_it_is_resumed(
    make_app: Callable[..., App], backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(backend=backend)
    sent: list[int] = []
    done: list[int] = []

    @app.task(queue="mail")
    async def send(n: int) -> None:
        sent.append(n)

    @app.task
    async def other(n: int) -> None:
        done.append(n)

    consumer = StreamConsumer if backend == "streams" else SortedConsumer
    reads = 0
    read = consumer.read

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(self, *args, **kwargs)

    monkeypatch.setattr(consumer, "read", counted)
    # A long idle wait: only a wake-up (an enqueue, a resume) ends it in time.
    worker = worker_for(app, idle_wait=30.0)
    async with running(worker):
        await wait_until(lambda: reads > 0, DEADLINE)
        await queues.pause(app, "mail")
        assert await queues.paused(app) == {"mail"}
        assert all([(await send.enqueue_async(n)).created for n in range(3)])
        await other.enqueue_async(1)
        await wait_until(lambda: done == [1], DEADLINE, "the other queue's job ran")
        await other.enqueue_async(2)  # read after the mail jobs were there
        await wait_until(lambda: done == [1, 2], DEADLINE, "the other queue's job ran")
        assert sent == []
        assert await waiting(app, "mail") == 3

        # The idle worker does not spin on the paused queue's jobs: a window to observe
        # (a spinning worker reads hundreds of times in it), not to synchronise.
        before = reads
        await asyncio.sleep(0.3)
        assert reads - before <= 1

        await queues.resume(app, "mail")
        await wait_until(lambda: sorted(sent) == [0, 1, 2], DEADLINE, "resume wakes the worker")
    assert await queues.paused(app) == set()


@pytest.fixture
async def reader(make_app: Callable[..., App]) -> Any:
    """Factory of a backend's app with task 'work' (queue 'default') and a consumer of it
    (a worker's, to take a job and keep it running)."""
    made: list[Any] = []

    def make(backend: str) -> tuple[App, Any]:
        app = make_app(backend=backend)

        @app.task
        async def work(n: int) -> None:
            pass

        @app.task
        async def report(n: int) -> None:
            pass

        consumer = app.store.consumer(
            async_client(app.redis_url), queues=["default"], name="c1", lease_seconds=30.0,
            claims=None,
        )  # fmt: skip
        made.append(consumer)
        return app, consumer

    yield make
    for consumer in made:
        await consumer.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_purge_deletes_waiting_jobs_only_and_frees_their_ids(
    reader: Callable[[str], tuple[App, Any]], backend: str
) -> None:
    app, consumer = reader(backend)
    work = app.tasks["work"]
    await work.enqueue_async(0, job_id="running")
    (taken,) = (await consumer.read(1, [1, 1, 1])).deliveries
    assert taken.job_id == "running"
    for n in range(3):
        await work.enqueue_async(n, job_id=f"waiting-{n}")
    await work.enqueue_async(9, job_id="delayed", delay=60)

    assert await queues.purge(app, "default") == 3
    rows, _ = await app.store.stats(["default"])
    totals = [sum(getattr(row, what) for row in rows) for what in ("waiting", "pending", "delayed")]
    assert totals == [0, 1, 1]
    assert (await work.enqueue_async(0, job_id="waiting-0")).created  # the id is free again
    assert not (await work.enqueue_async(0, job_id="running")).created
    assert not (await work.enqueue_async(0, job_id="delayed")).created


def queued(rclient: redis.Redis, app: App, job_ids: list[str]) -> list[str]:
    """Those of ``job_ids`` that are queued, delayed or running (their marker is there)."""
    return [job_id for job_id in job_ids if not job_ended(rclient, app.keys, job_id)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_purge_by_level_and_by_task(
    reader: Callable[[str], tuple[App, Any]], backend: str, rclient: redis.Redis
) -> None:
    app, _ = reader(backend)
    work, report = app.tasks["work"], app.tasks["report"]
    await app.enqueue_many_async([
        report.message(1, job_id="report-low-1", priority="low"),
        report.message(2, job_id="report-low-2", priority="low"),
        report.message(3, job_id="report-critical", priority="critical"),
        work.message(4, job_id="work-low", priority="low"),
        work.message(5, job_id="work-normal"),
    ])  # fmt: skip
    every = ["report-low-1", "report-low-2", "report-critical", "work-low", "work-normal"]

    assert await queues.purge(app, "default", level="low", task="report") == 2
    assert queued(rclient, app, every) == ["report-critical", "work-low", "work-normal"]
    assert await queues.purge(app, "default", task="work") == 2
    assert queued(rclient, app, every) == ["report-critical"]
    assert await queues.purge(app, "default", level="normal") == 0
    assert await queues.purge(app, "default", level="critical") == 1
    assert queued(rclient, app, every) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_purge_goes_chunk_by_chunk_past_the_jobs_it_keeps(
    reader: Callable[[str], tuple[App, Any]], backend: str, rclient: redis.Redis
) -> None:
    app, _ = reader(backend)
    work, report = app.tasks["work"], app.tasks["report"]
    messages = [
        (work if n % 2 else report).message(n, job_id=f"{'work' if n % 2 else 'report'}-{n}")
        for n in range(13)
    ]
    await app.enqueue_many_async(messages)
    job_ids = [message.job.id for message in messages]
    if backend == "sorted":  # ranks that tie: pages must neither skip nor repeat
        rclient.zadd(app.keys.sorted_waiting("default"), dict.fromkeys(job_ids, 1000))

    levels = app.levels.names
    assert await app.store.purge_waiting("default", levels, "work", chunk=2) == 6
    assert queued(rclient, app, job_ids) == [j for j in job_ids if j.startswith("report")]
    assert await app.store.purge_waiting("default", levels, None, chunk=3) == 7
    assert queued(rclient, app, job_ids) == []


async def test_an_unknown_queue_or_level_is_refused(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(queue="mail")
    async def send() -> None:
        pass

    for call in (queues.pause, queues.resume, queues.purge):
        with pytest.raises(ConfigError, match=r"unknown queue 'nope'; the app's queues: mail"):
            await call(app, "nope")
    with pytest.raises(ConfigError, match="unknown priority 'urgent'"):
        await queues.purge(app, "mail", level="urgent")
    assert await queues.paused(app) == set()

    # A paused queue no task uses any more (an older release's) can still be resumed.
    await app.store.pause("retired")
    assert await queues.paused(app) == {"retired"}
    await queues.resume(app, "retired")
    assert await queues.paused(app) == set()


# --- lockgate queue MODULE:APP pause | resume | purge ---------------------------------


@pytest.fixture
def cli(redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``cli_app`` imported for this test's Redis and namespace (the CLI finds it there)."""
    monkeypatch.setenv("LOCKGATE_REDIS_URL", redis_url)
    with cli_app_in(namespace, monkeypatch):
        yield importlib.import_module("cli_app")


def mail_jobs(cli: ModuleType, count: int) -> list[str]:
    """``count`` e-mails enqueued on queue 'mail', and one job on 'default': the ids."""
    job_ids = [
        cli.email.enqueue(f"{n}@example.com", job_id=f"mail-{n}").job_id for n in range(count)
    ]
    return [*job_ids, cli.later.enqueue(1, job_id="later-1").job_id]


def test_the_cli_pauses_and_resumes(cli: ModuleType, rclient: redis.Redis) -> None:
    paused = invoke("queue", SPEC, "pause", "mail")
    assert paused.exit_code == 0, paused.output
    assert paused.stdout == f"paused queue mail of {cli.app.namespace}\n"
    assert rclient.zrange(cli.app.keys.paused(), 0, -1) == [b"mail"]
    assert cli.email.enqueue("x@example.com").created

    resumed = invoke("queue", SPEC, "resume", "mail")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout == f"resumed queue mail of {cli.app.namespace}\n"
    assert rclient.zrange(cli.app.keys.paused(), 0, -1) == []


def test_the_cli_purges_with_yes(cli: ModuleType, rclient: redis.Redis) -> None:
    job_ids = mail_jobs(cli, 3)
    result = invoke("queue", SPEC, "purge", "mail", "--yes")
    assert result.exit_code == 0, result.output
    assert result.stdout == "purged 3 waiting jobs of queue mail\n"
    assert queued(rclient, cli.app, job_ids) == ["later-1"]

    cli.charge.enqueue("A1", job_id="charge-A1")
    result = invoke("queue", SPEC, "purge", "default", "--task", "later", "--level", "normal",
                    "--yes")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == "purged 1 waiting jobs of queue default\n"
    assert queued(rclient, cli.app, [*job_ids, "charge-A1"]) == ["charge-A1"]


def test_the_cli_refuses_a_purge_without_a_terminal_or_yes(
    cli: ModuleType, rclient: redis.Redis
) -> None:
    job_ids = mail_jobs(cli, 2)
    result = invoke("queue", SPEC, "purge", "mail")
    assert result.exit_code == 2, result.output
    assert "stdin is not a terminal); pass --yes" in one_error_line(result)
    assert result.stdout == ""
    assert queued(rclient, cli.app, job_ids) == job_ids


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["pause", "nope"], "unknown queue 'nope'"),
        (["resume", "nope"], "unknown queue 'nope'"),
        (["purge", "nope", "--yes"], "unknown queue 'nope'"),
        (["purge", "mail", "--level", "urgent", "--yes"], "unknown priority 'urgent'"),
    ],
)
def test_the_cli_reports_an_unknown_queue_or_level_in_one_line(
    cli: ModuleType, rclient: redis.Redis, args: list[str], error: str
) -> None:
    job_ids = mail_jobs(cli, 1)
    result = invoke("queue", SPEC, *args)
    assert result.exit_code == 2, result.output
    assert error in one_error_line(result)
    assert queued(rclient, cli.app, job_ids) == job_ids
    assert rclient.zrange(cli.app.keys.paused(), 0, -1) == []


@pytest.mark.parametrize("answer", ["y", "n"])
def test_the_cli_asks_before_a_purge_at_a_terminal(
    cli: ModuleType, rclient: redis.Redis, redis_url: str, namespace: str, answer: str
) -> None:
    job_ids = mail_jobs(cli, 2)
    env = {"LOCKGATE_REDIS_URL": redis_url, "LOCKGATE_TEST_NAMESPACE": namespace}
    argv = ["-m", "lockgate", "queue", SPEC, "purge", "mail", "--task", "email"]
    terminal = Terminal([sys.executable, *argv], cwd=HERE, env=dict(os.environ, **env))
    try:
        terminal.expect(f"delete the waiting jobs of task 'email' of queue 'mail' of {namespace}?")
        terminal.expect("[y/N]")
        terminal.type(f"{answer}\n")
        code = terminal.finish()
    finally:
        terminal.close()
    if answer == "y":
        assert code == 0, terminal.text
        assert "purged 2 waiting jobs of queue mail" in terminal.text
        assert queued(rclient, cli.app, job_ids) == ["later-1"]
    else:
        assert code == 1, terminal.text
        assert "Aborted" in terminal.text
        assert queued(rclient, cli.app, job_ids) == job_ids


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_purged_job_does_not_answer_with_an_earlier_run_under_its_id(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(keep_result=60)
    def receipt(n: int) -> str:
        return f"receipt-{n}"

    first = await receipt.enqueue_async(1, job_id="r")
    await worker_for(app).run(burst=True)
    assert await first.result_async(timeout=5) == "receipt-1"
    second = await receipt.enqueue_async(2, job_id="r")
    assert second.created and second.status() == "waiting"
    assert await queues.purge(app, "default") == 1
    # Never ran: the first run's status and result do not speak for it.
    assert (await app.job_async("r")).status == "unknown"
