"""The put-back of a job whose task the worker does not know (core/unknown_task.py)."""

from __future__ import annotations

from lockgate.core.codec import Job
from lockgate.core.unknown_task import LONGEST_DELAY, unknown_task

ENQUEUED = 1_000_000.0


def job(waits: int = 0) -> Job:
    return Job(id="j1", task="report", queue="default", level="normal", enqueued=ENQUEUED,
               waits=waits)  # fmt: skip


def test_put_backs_keep_the_attempt_and_wait_longer_each_time_up_to_a_cap() -> None:
    delays = []
    current = job()
    for _ in range(8):
        outcome = unknown_task(current, 600.0, ENQUEUED + 1)
        assert outcome.kind == "retry" and outcome.next_job is not None
        assert outcome.next_job.attempt == current.attempt  # no attempt spent
        assert outcome.next_job.waits == current.waits + 1  # counted
        delays.append(outcome.delay)
        current = outcome.next_job
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert max(delays) == LONGEST_DELAY


def test_the_last_put_back_is_due_when_the_grace_ends() -> None:
    outcome = unknown_task(job(waits=10), 600.0, ENQUEUED + 595.0)
    assert (outcome.kind, outcome.delay) == ("retry", 5.0)


def test_after_the_grace_it_is_dead_lettered_naming_the_task() -> None:
    outcome = unknown_task(job(waits=10), 600.0, ENQUEUED + 600.5)
    assert outcome.kind == "dead"
    assert outcome.reason == (
        "unknown task 'report': no worker that took it knew it within 600 s of its "
        "enqueue (App(unknown_task_grace=...))"
    )


def test_a_grace_of_0_dead_letters_at_once_as_before() -> None:
    outcome = unknown_task(job(), 0.0, ENQUEUED)
    assert (outcome.kind, outcome.reason) == ("dead", "unknown task 'report'")
