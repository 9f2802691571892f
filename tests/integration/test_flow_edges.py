"""Workflows at their edges (found by a review of the feature, each fixed with this
test failing first): scenarios where a flow could hang for ever, a job of it run twice
or never, or a key of a finished, failed or cancelled flow be left without a TTL; and
API answers that must match docs/flows.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from conftest import drain, running, wait_until, worker_for
from lockgate import (
    App,
    CancelOutcome,
    ConnectionFailed,
    JobFailed,
    OutcomeUnknown,
    RetryableError,
    chain,
    current_job,
    group,
)
from lockgate.backend import flow_store
from lockgate.backend.keys import Keys
from lockgate.ops import deadletter, queues

BACKENDS = ["streams", "sorted"]


def _flow_keys_without_ttl(app: App, flow_id: str) -> list[str]:
    """The flow's keys that exist and have no TTL (PTTL -1)."""
    client = app.client()
    keys = app.store.flows.keys(flow_id).flow_keys(flow_id)
    return [k for k in keys if client.exists(k) and client.pttl(k) == -1]


async def _letter(app: App, job_id: str) -> deadletter.DeadLetter:
    await wait_until(
        lambda: any(x.job_id == job_id for x in deadletter.list_dead(app, 100)), timeout=20
    )
    (letter,) = [x for x in deadletter.list_dead(app, 100) if x.job_id == job_id]
    return letter


# 1. Replaying one of two dead members persists every key of a flow that stays failed.


@pytest.mark.parametrize("backend", BACKENDS)
async def test_replaying_one_of_two_dead_members_keeps_the_failed_flow_expiring(
    make_app: Callable[..., App], backend: str
) -> None:
    """group(a, b, c).then(d) with a and b dead-lettered. The operator replays a only
    (b's letter is left to age out). a succeeds: flow_settled sees 'revived' and calls
    flow_persist, so every key of a flow that is still failed (b dead) loses its TTL and
    lives for ever. Expected: a flow with a job still dead keeps an expiry. (Fixed by
    e4d67d5, which persists only once no job is dead: kept as a regression test.)"""
    app = make_app(backend=backend, dead_letter_max_age=60.0)
    broken = {"a": True, "b": True}

    @app.task(retries=0)
    async def member(name: str) -> str:
        if broken.get(name):
            raise ValueError(f"{name} is broken")
        return name

    @app.task
    async def callback() -> None: ...

    flow = group(member.message("a"), member.message("b"), member.message("c"))
    result = app.enqueue_flow(flow.then(callback.message()), flow_id="two-dead")
    async with running(worker_for(app, concurrency=4)):
        with pytest.raises(JobFailed):
            await result.result_async(timeout=20)
        await wait_until(lambda: app.store.flows.summary("two-dead").dead == 2, timeout=20)
        assert _flow_keys_without_ttl(app, "two-dead") == []  # failed: expiring
        broken["a"] = False
        deadletter.replay(app, [await _letter(app, "two-dead.0")])
        await wait_until(lambda: app.store.flows.summary("two-dead").done == 2, timeout=20)
    assert app.flow("two-dead").state == "failed"  # b is still dead
    assert _flow_keys_without_ttl(app, "two-dead") == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_replaying_a_dead_member_of_a_cancelled_flow_keeps_it_expiring(
    make_app: Callable[..., App], backend: str
) -> None:
    """A member dead-lettered, then the flow cancelled (its keys get flow_ttl), then the
    member's letter replayed: it succeeds, 'revived' persists every key of the cancelled
    flow, which then never expires."""
    app = make_app(backend=backend, dead_letter_max_age=60.0)
    broken = {"b": True}

    @app.task(retries=0)
    async def member(name: str) -> str:
        if broken.get(name):
            raise ValueError(f"{name} is broken")
        return name

    @app.task
    async def callback() -> None: ...

    flow = group(member.message("a"), member.message("b")).then(callback.message())
    result = app.enqueue_flow(flow, flow_id="dead-then-cancelled")
    async with running(worker_for(app, concurrency=4)):
        with pytest.raises(JobFailed):
            await result.result_async(timeout=20)
        app.cancel_flow("dead-then-cancelled")
        assert app.flow("dead-then-cancelled").state == "cancelled"
        assert _flow_keys_without_ttl(app, "dead-then-cancelled") == []
        broken["b"] = False
        deadletter.replay(app, [await _letter(app, "dead-then-cancelled.1")])
        await wait_until(
            lambda: app.store.flows.summary("dead-then-cancelled").done == 2, timeout=20
        )
    assert app.flow("dead-then-cancelled").state == "cancelled"
    assert _flow_keys_without_ttl(app, "dead-then-cancelled") == []


# 2. A failed flow in an App that keeps dead letters without an age limit never expires.


# 3. Jobs of a flow removed without a settle: the flow hangs for ever, with no TTL.


@pytest.mark.parametrize("backend", BACKENDS)
async def test_purging_a_waiting_job_of_a_flow_ends_the_flow(
    make_app: Callable[..., App], backend: str
) -> None:
    """queues.purge deletes a flow's first job while it waits: nothing settles it, so the
    flow stays 'waiting' for ever, result() never returns, and none of its keys expires."""
    app = make_app(backend=backend, flow_ttl=60.0)

    @app.task
    async def work(n: int) -> None: ...

    result = app.enqueue_flow(chain(work.message(0), work.message(1)), flow_id="purged")
    assert await queues.purge(app, "default") == 1
    await drain(app, concurrency=2)
    assert app.flow("purged").state in ("cancelled", "failed")
    assert _flow_keys_without_ttl(app, "purged") == []
    with pytest.raises(Exception) as ended:
        result.result(timeout=2)
    assert not isinstance(ended.value, TimeoutError)


async def test_app_cancel_retried_after_a_lost_second_round_trip_cancels_the_flow(
    make_app: Callable[..., App],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """app.cancel(job of a flow) is two steps: cancel_job.lua removes the job, then a
    separate summary read + flow_cancel call cancels the flow. When the connection drops
    between them, app.cancel raises; the caller retries, the job is gone, app.cancel
    returns False and never reaches the flow: its waiting jobs are held for ever, the
    flow reads 'waiting' and has no TTL."""
    app = make_app(flow_ttl=60.0)

    @app.task
    async def work(n: int) -> None: ...

    result = app.enqueue_flow(group(work.message(0), work.message(1)).then(work.message(2)))
    flows_store = app.store.flows
    real = flows_store.summary
    calls = {"n": 0}

    def flaky(flow_id: str) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionFailed("redis://127.0.0.1:6379", "connection reset")
        return real(flow_id)

    monkeypatch.setattr(flows_store, "summary", flaky)
    with pytest.raises(ConnectionFailed):
        app.cancel(result.job_ids[0])
    assert app.cancel(result.job_ids[0]) is CancelOutcome.ENDED  # the retry: it is gone
    assert app.flow(result.flow_id).state == "cancelled"
    assert _flow_keys_without_ttl(app, result.flow_id) == []


# 4. A plain job named like a held job of a flow: the flow's job is never queued.


async def test_cancelling_a_plain_job_whose_id_looks_like_a_flow_job_leaves_the_flow_be(
    make_app: Callable[..., App],
) -> None:
    """App.cancel parses any id '<x>.<digits>' as a job of flow <x>: cancelling the plain
    job 'report.3' cancels the unrelated, live flow 'report' (its job 3 is held, so the
    id was free)."""
    app = make_app()

    @app.task
    async def work(n: int) -> None: ...

    flow = chain(*(work.message(n) for n in range(5)))
    app.enqueue_flow(flow, flow_id="report")
    plain = work.enqueue(42, job_id="report.3")
    assert plain.created
    assert app.cancel("report.3")
    assert app.flow("report").state == "waiting"


# 5. Partitioned namespaces: an enqueue_flow does not wake idle workers.


async def test_partitioned_enqueue_flow_wakes_idle_workers(make_app: Callable[..., App]) -> None:
    """With partitions > 1 idle workers block on wake-up lists. app.enqueue_many pushes
    them; enqueue_flow (flow_commit queueing the roots by the enqueue bodies) does not,
    so a flow enqueued while workers idle waits until a worker looks again by itself."""
    app = make_app(partitions=4)

    @app.task
    async def work(n: int) -> int:
        return n

    async with running(worker_for(app, concurrency=2, idle_wait=30.0)):
        await asyncio.sleep(1.5)  # the worker found nothing and waits on its lists
        started = time.monotonic()
        result = await app.enqueue_flow_async(group(work.message(1), work.message(2)))
        assert await result.result_async(timeout=10) == [1, 2]
        took = time.monotonic() - started
        # A plain enqueue_many here: about 0.01 s. The flow: 0.7 to 2.7 s (until the
        # worker's loop looks again by itself), up to idle_wait.
        assert took < 0.5, f"the flow's first jobs waited {took:.2f} s for an idle worker"


# 6. API answers.


async def test_cancel_flow_of_a_done_flow_leaves_it_done(make_app: Callable[..., App]) -> None:
    """cancel_flow on a flow that ended done cancels nothing (it returns 0), yet marks
    it cancelled: its state flips to 'cancelled' and result() raises JobCancelled instead
    of returning the result it had."""
    app = make_app()

    @app.task
    async def work(n: int) -> int:
        return n

    result = app.enqueue_flow(chain(work.message(1), work.message(2)), flow_id="finished")
    async with running(worker_for(app, concurrency=2)):
        assert await result.result_async(timeout=20) == 2
    assert app.cancel_flow("finished") == 0
    assert app.flow("finished").state == "done"
    assert result.result(timeout=1) == 2


async def test_a_flow_whose_first_job_waits_for_its_retry_is_running(
    make_app: Callable[..., App],
) -> None:
    """docs/flows.md: 'waiting' means no job started. A first job that ran, failed and
    waits for its retry (delayed) makes the flow read 'waiting' again."""
    app = make_app()
    attempts: list[int] = []

    @app.task(retries=2, backoff=30.0)
    async def flaky() -> None:
        attempts.append(current_job().attempt)
        raise RetryableError("try later")

    @app.task
    async def after() -> None: ...

    result = app.enqueue_flow(chain(flaky.message(), after.message()), flow_id="retrying")
    async with running(worker_for(app, concurrency=1)):
        await wait_until(lambda: attempts == [1], timeout=20)
        await wait_until(lambda: app.job(result.job_ids[0]).status == "delayed", timeout=20)
        assert app.flow("retrying").state == "running"


async def test_a_job_whose_result_has_no_json_form_succeeds_in_a_flow_as_alone(
    make_app: Callable[..., App],
) -> None:
    """A task returning a value with no JSON form ends 'done' as a plain job, but is
    dead-lettered in a flow ("its result could not be kept") after its effect happened:
    the flow fails, and the replay the docs suggest runs the effect again."""
    app = make_app()
    effects: list[int] = []

    class Receipt:  # what an ORM or SDK call typically returns
        pass

    @app.task(retries=0)
    async def charge(n: int) -> Receipt:
        effects.append(n)
        return Receipt()

    @app.task
    async def notify() -> None: ...

    plain = charge.enqueue(1)
    app.enqueue_flow(chain(charge.message(2), notify.message()), flow_id="receipt")
    async with running(worker_for(app, concurrency=2)):
        await wait_until(lambda: app.job(plain.job_id).status == "done", timeout=20)
        await wait_until(
            lambda: app.flow("receipt").state not in ("waiting", "running"), timeout=20
        )
    assert sorted(effects) == [1, 2]
    assert app.flow("receipt").state == "done"


# 7. run_step: a late (zombie) run overwrites the result another run recorded.


async def test_run_step_result_is_not_overwritten_by_a_run_that_lost_its_claim(
    make_app: Callable[..., App],
) -> None:
    """run_step stores fn's result with a plain SET, before (and apart from) the
    owner-checked settle of the step's claim. A run that lost its claim while fn ran (a
    zombie, paused past its liveness) overwrites the result the run that took over had
    stored and used: two successful runs recorded, and later retries read the zombie's.

    Simulated: while the first run's fn runs, another run's result is stored and the
    step marked done, as the taking-over run would have done."""
    app = make_app()
    seen: list[object] = []

    def create() -> str:
        job = current_job()
        claim_name = Keys.step_claim_name(job.task, job.job_id, "charge")
        # The run that took over meanwhile stored its own result for the step.
        app.store.flows.keep_step_result(job.job_id, claim_name, b'"ch_taken_over"', 60_000)
        return "ch_zombie"

    @app.task(retries=0)
    async def pay() -> None:
        seen.append(current_job().run_step("charge", create))

    handle = pay.enqueue()
    async with running(worker_for(app, concurrency=1)):
        await wait_until(lambda: app.job(handle.job_id).status == "done", timeout=20)
    claim_name = Keys.step_claim_name(pay.name, handle.job_id, "charge")
    assert app.store.flows.step_result(handle.job_id, claim_name) == b'"ch_taken_over"'


# 8. cancel_flow asks to cancel every job it just dropped.


async def test_cancel_flow_cancels_only_the_jobs_that_were_queued(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """flow_cancel.lua drops the held jobs, then FlowOps.cancel reads the record (held
    now empty) and cancels every job not done or dead: for a chain of 2,000
    steps, 2,000 job cancel calls (several round trips each) where one job was queued."""
    app = make_app()

    @app.task
    async def work(n: int) -> None: ...

    result = app.enqueue_flow(chain(*(work.message(n) for n in range(2000))), flow_id="long")
    asked: list[str] = []
    real = app.store.jobs.cancel

    def counting(job_id: str, record: bytes, record_ttl_ms: int) -> str:
        asked.append(job_id)
        return real(job_id, record, record_ttl_ms)

    monkeypatch.setattr(app.store.jobs, "cancel", counting)
    started = time.monotonic()
    assert app.cancel_flow("long") == 2000
    took = time.monotonic() - started
    assert asked == [result.job_ids[0]], f"{len(asked)} job cancel calls, {took:.2f} s"


# 9. A dead letter that outlives its flow's records: its replay resumes nothing.


async def test_replaying_a_letter_that_outlived_its_flow_says_so_or_resumes_it(
    make_app: Callable[..., App],
) -> None:
    """'a failed flow's keys live at least as long as its dead letters': the keys get
    max(flow_ttl, dead_letter_max_age) once, at the death, but a letter is only trimmed
    when another letter is added (or by dlq trim), so it outlives them. Its replay then
    reports 'enqueued', the job runs and succeeds, and the callback that waited for it
    never runs: nothing says the flow could not resume."""
    app = make_app(flow_ttl=1.0, dead_letter_max_age=1.0)
    broken = {"b": True}
    callbacks: list[int] = []

    @app.task(retries=0)
    async def member(name: str) -> str:
        if broken.get(name):
            raise ValueError(f"{name} is broken")
        return name

    @app.task
    async def callback() -> None:
        callbacks.append(1)

    flow = group(member.message("a"), member.message("b")).then(callback.message())
    result = app.enqueue_flow(flow, flow_id="outlived")
    async with running(worker_for(app, concurrency=2)):
        with pytest.raises(JobFailed):
            await result.result_async(timeout=20)
        # The flow's keys expire; the letter is still listed.
        await wait_until(lambda: not app.store.flows.summary("outlived").total, timeout=20)
        broken["b"] = False
        (replayed,) = deadletter.replay(app, [await _letter(app, "outlived.1")])
    await drain(app, concurrency=2)
    assert replayed.outcome != "enqueued" or callbacks == [1], (
        f"replay said {replayed.outcome!r}, the flow reads {app.flow('outlived').state!r}"
        ", and its callback never ran"
    )


# 10. enqueue_flow without a flow_id whose commit reply was lost.


def test_outcome_unknown_of_enqueue_flow_names_the_flow_to_enqueue_again(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """enqueue_flow documents 'OutcomeUnknown: no reply came: enqueue again with the same
    flow_id', but with flow_id=None the id is generated inside the call and the error
    carries only job_ids (its text says 'enqueue again with the same job ids', which a
    flow's steps may not have). A retry without the id creates a second flow: every job
    runs twice."""
    app = make_app()

    @app.task
    def work(n: int) -> None: ...

    store = app.store
    real = store.run

    def lost_commit(calls: Any, job_ids: Any = None) -> Any:
        replies = real(calls, job_ids)
        if calls and calls[0].script == "flow_commit":
            raise OutcomeUnknown(store.url, "timeout reading the reply", job_ids or [])
        return replies

    monkeypatch.setattr(store, "run", lost_commit)
    with pytest.raises(OutcomeUnknown) as lost:
        app.enqueue_flow(chain(work.message(1), work.message(2)))
    assert getattr(lost.value, "flow_id", None) is not None


# 11. A rolling deploy: a worker of the release before flows runs a flow's job as plain.

OLD_APP = """
import os

import redis

from lockgate import App

app = App(redis_url=os.environ["REVIEW_URL"], namespace=os.environ["REVIEW_NS"])


@app.task
def step(name: str) -> str:
    client = redis.Redis.from_url(os.environ["REVIEW_URL"])
    client.rpush("review:" + os.environ["REVIEW_NS"] + ":ran", name)
    return name
"""

OLD_WORKER = """
import asyncio
from review_old_app import app
from lockgate import Worker, WorkerConfig
asyncio.run(Worker(app, WorkerConfig(concurrency=2, idle_wait=0.5)).run(burst=True))
"""


# 12. Eager flows outlive their block and shadow real flows of the same id.


async def test_an_eager_flow_does_not_shadow_a_real_flow_of_the_same_id_later(
    make_app: Callable[..., App],
) -> None:
    """FlowOps.eager (per App, never cleared) keeps every flow an eager block ran. After
    the block, App.flow, FlowResult.result and parent_results() of a real flow with the
    same id (a module-level app shared by a test suite's eager and worker tests) answer
    from the eager run."""
    app = make_app()
    seen: list[object] = []

    @app.task
    def first(tag: str) -> str:
        return tag

    @app.task
    def reader() -> str:
        seen.append(current_job().parent_results())
        return "read"

    with app.eager():
        app.enqueue_flow(chain(first.message("eager"), reader.message()), flow_id="shared")
    assert seen == [["eager"]]
    result = app.enqueue_flow(chain(first.message("real"), reader.message()), flow_id="shared")
    assert result.created
    async with running(worker_for(app, concurrency=2)):
        await wait_until(lambda: len(seen) == 2, timeout=20)
    assert seen[1] == ["real"]


# 13. Cancelling a running job of a flow cancels the flow, yet its queued jobs still run.


# 14. An eta on a step is turned into a delay when the message is built.


# 15. A stage call sent twice (redis-py's retry after a lost reply) queues roots twice.


async def test_a_retried_stage_call_does_not_run_a_first_job_twice(
    make_app: Callable[..., App],
) -> None:
    """The clients retry a call once when its connection drops after the send
    (ChainedRetry(NoBackoff(), 1)), and a pipeline is re-sent whole: each stage call runs
    twice. A root's enqueue call goes to the stage's roots list (no set), so the second
    run must add nothing (each chunk is staged once), or the second copy of a root that
    already ran and ended (its id free again) would run again.

    Deterministic form: the stage calls applied twice, the commit, the producer gone, the
    first 300 roots run, then a worker's finish_releases queues the rest."""
    app = make_app()
    runs: list[int] = []

    @app.task
    async def work(n: int) -> int:
        runs.append(n)
        return n

    total = 350
    ops = app._flows
    planned = ops.plan(group(*(work.message(n) for n in range(total))), "twice")
    staged, tasks = ops._staged(planned)
    store = app.store.flows
    calls, commit = store.enqueue_calls("twice", staged, planned.shape_json(), tasks, 60_000)
    assert all(app.store.run(calls))
    assert all(app.store.run(calls))  # the same calls again: the retried pipeline
    created, left = app.store.run([commit])[0]
    assert (created, left) == (1, total - flow_store.RELEASE_CHUNK)  # each root once
    async with running(worker_for(app, concurrency=16)):
        await wait_until(lambda: len(runs) >= 300, timeout=30)
        await store.finish_releases()
        await wait_until(lambda: app.store.flows.summary("twice").done == total, timeout=30)
    await drain(app, concurrency=16)  # a second copy of a root would run now
    assert len(runs) == total, f"{len(runs) - total} first jobs ran twice"
