"""A worker tells its watchers of each run that begins and each job it settles; a watcher
that raises changes nothing for the jobs."""

from __future__ import annotations

from collections.abc import Callable

from conftest import worker_for
from lockgate import App, RetryableError, current_job
from lockgate.backend.broker import Delivery
from lockgate.core.outcome import ALREADY_PROCESSED
from lockgate.worker.runner import Ending


class Notes:
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends: list[tuple[str, str, str, bool]] = []

    def started(self, delivery: Delivery, now: float) -> None:
        assert now > 0
        self.starts.append(delivery.job_id)

    def settled(self, ending: Ending, owned: bool) -> None:
        outcome = ending.outcome
        self.ends.append((ending.delivery.job_id, outcome.kind, outcome.reason, owned))


class Broken:
    def started(self, delivery: Delivery, now: float) -> None:
        raise RuntimeError("watcher bug")

    def settled(self, ending: Ending, owned: bool) -> None:
        raise RuntimeError("watcher bug")


async def test_watchers_see_every_start_and_settle_and_cannot_break_the_worker(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(retries=1, backoff=0.01)
    def flaky() -> None:
        if current_job().attempt == 1:
            raise RetryableError("once")

    @app.task(idempotent=True)
    def once() -> None:
        pass

    flaky.enqueue(job_id="f")
    once.enqueue(job_id="o")
    notes = Notes()
    worker = worker_for(app)
    worker.watchers.add(Broken())
    worker.watchers.add(notes)
    await worker.run(burst=True)
    once.enqueue(job_id="o")  # done before: acknowledged without running
    again = worker_for(app)
    again.watchers.add(notes)
    await again.run(burst=True)
    # A run begins when its task is called: the duplicate of "o" never did.
    assert sorted(notes.starts) == ["f", "f", "o"]
    assert sorted(notes.ends) == [
        ("f", "done", "", True),
        ("f", "retry", "", True),
        ("o", "done", "", True),
        ("o", "done", ALREADY_PROCESSED, True),
    ]
