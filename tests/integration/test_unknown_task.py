"""Issue 27: a job whose task the worker does not know (a rolling deploy: the producer is
on the new release, a worker still on the old one) is put back for a worker that knows
it, no attempt spent, and dead-lettered only after ``App(unknown_task_grace=...)``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conftest import running, wait_until, worker_for
from lockgate import App, current_job
from lockgate.ops.deadletter import list_dead
from lockgate.worker.joblog import ended_as
from lockgate.worker.runner import Ending


class Endings:
    """A job watcher that keeps how each settled run ended (as the metrics name it)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str]] = []

    def started(self, delivery: object, now: float) -> None:
        pass

    def settled(self, ending: Ending, owned: bool) -> None:
        self.seen.append((ended_as(ending), ending.outcome.reason))


def old_and_new(make_app: Callable[..., App], **options: object) -> tuple[App, App]:
    """Two releases of one app in one namespace: only the new one has ``report``."""
    old, new = make_app(**options), make_app(**options)
    for app in (old, new):

        @app.task
        def existing() -> None: ...

    return old, new


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_a_job_an_old_worker_does_not_know_is_run_by_one_that_knows_it(
    make_app: Callable[..., App], backend: str
) -> None:
    old, new = old_and_new(make_app, backend=backend)
    attempts: list[int] = []

    @new.task(keep_result=60)
    async def report(n: int) -> int:
        attempts.append(current_job().attempt)
        return n * 2

    handle = report.enqueue(21)
    old_worker, endings = worker_for(old), Endings()
    old_worker.watchers.add(endings)
    async with running(old_worker):
        await wait_until(lambda: endings.seen)
    assert endings.seen[0] == (
        "put_back", "unknown task 'report': put back for a worker that knows it"
    )  # fmt: skip
    assert (await new.job_async(handle.job_id)).status == "delayed"
    assert old_worker.dead == 0

    async with running(worker_for(new)):
        assert await handle.result_async(timeout=30) == 42
    assert attempts == [1]  # the put-back spent no attempt
    info = await new.job_async(handle.job_id)
    assert (info.status, info.attempts) == ("done", 1)
    assert list_dead(new) == []


async def test_a_job_no_worker_knows_is_dead_lettered_after_the_grace(
    make_app: Callable[..., App],
) -> None:
    old, new = old_and_new(make_app, unknown_task_grace=0.5)

    @new.task
    def report(n: int) -> None: ...

    handle = report.enqueue(1)
    worker, endings = worker_for(old), Endings()
    worker.watchers.add(endings)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    kinds = [kind for kind, _ in endings.seen]
    assert kinds[0] == "put_back" and kinds[-1] == "dead_lettered", endings.seen
    reason = (
        "unknown task 'report': no worker that took it knew it within 0.5 s of its "
        "enqueue (App(unknown_task_grace=...))"
    )
    (letter,) = list_dead(new)
    assert (letter.job_id, letter.reason) == (handle.job_id, reason)
    info = await new.job_async(handle.job_id)
    assert (info.status, info.reason, info.attempts) == ("dead", reason, 0)


async def test_a_grace_of_0_dead_letters_at_once(make_app: Callable[..., App]) -> None:
    old, new = old_and_new(make_app, unknown_task_grace=0)

    @new.task
    def report(n: int) -> None: ...

    report.enqueue(1)
    worker, endings = worker_for(old), Endings()
    worker.watchers.add(endings)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    assert endings.seen == [("dead_lettered", "unknown task 'report'")]
