"""Workflows (``chain``, ``group``, ``.then``, ``enqueue_flow``) on both backends, against a
real Redis and real workers: order, callbacks that fire once after the last member,
parents' results, failure and dead-letter replay that resumes a flow, cancellation, a
second enqueue of one flow id, the flow's keys after ``flow_ttl``, and ``run_step``.

Waits are polls with deadlines on what the jobs record from inside them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from conftest import drain, running, wait_until, worker_for
from lockgate import (
    App,
    CancelOutcome,
    ConfigError,
    FlowResult,
    JobFailed,
    RetryableError,
    chain,
    current_job,
    group,
)
from lockgate.backend import flow_store
from lockgate.ops import deadletter

BACKENDS = ["streams", "sorted"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_chain_runs_in_order_and_returns_its_last_result(
    make_app: Callable[..., App], backend: str
) -> None:
    """Each step starts after the one before it succeeded, sees its result through
    parent_results(), and the flow's result is the last step's."""
    app = make_app(backend=backend)
    order: list[str] = []
    seen: dict[str, list[object]] = {}

    @app.task
    async def step(name: str) -> str:
        seen[name] = current_job().parent_results()
        order.append(name)
        return name.upper()

    flow = chain(step.message("a"), step.message("b"), step.message("c"))
    result = await app.enqueue_flow_async(flow, flow_id="order-1")
    assert isinstance(result, FlowResult)
    assert result.created
    assert result.job_ids == ["order-1.0", "order-1.1", "order-1.2"]
    async with running(worker_for(app, concurrency=8)):
        assert await result.result_async(timeout=20) == "C"
    assert order == ["a", "b", "c"]
    assert seen == {"a": [], "b": ["A"], "c": ["B"]}
    info = await app.flow_async("order-1")
    assert info.state == "done"
    assert [j.state for j in info.jobs] == ["done"] * 3
    assert info.waits_on == {
        "order-1.0": (), "order-1.1": ("order-1.0",), "order-1.2": ("order-1.1",),
    }  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
async def test_group_then_callback_runs_once_after_every_member(
    make_app: Callable[..., App], backend: str
) -> None:
    """A chord: 50 members side by side, then one callback, which runs once, after the
    50th member ended, with their results in declaration order; the callback may have a
    higher level than its group."""
    app = make_app(backend=backend)
    ended: list[int] = []
    calls: list[tuple[int, list[object]]] = []

    @app.task(priority="low")
    async def member(n: int) -> int:
        await asyncio.sleep(0.001 * (n % 5))
        ended.append(n)
        return n * n

    @app.task(priority="critical")
    async def total() -> int:
        parents = current_job().parent_results()
        calls.append((len(ended), parents))
        return sum(parents)  # type: ignore[arg-type]

    flow = group(*(member.message(n) for n in range(50))).then(total.message())
    result = app.enqueue_flow(flow)
    async with running(worker_for(app, concurrency=16)):
        assert await result.result_async(timeout=30) == sum(n * n for n in range(50))
    assert len(calls) == 1
    assert calls[0][0] == 50
    assert calls[0][1] == [n * n for n in range(50)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_nested_flow_shape_and_result(make_app: Callable[..., App], backend: str) -> None:
    """chain(a, group(chain(b, c), d), e): e waits for c and d; b and d wait for a; the
    result of a group nested in a group is a list of lists."""
    app = make_app(backend=backend)
    started: dict[str, list[object]] = {}

    @app.task
    async def node(name: str) -> str:
        started[name] = current_job().parent_results()
        return name

    flow = chain(
        node.message("a"),
        group(chain(node.message("b"), node.message("c")), node.message("d")),
        node.message("e"),
    )
    inner = group(group(node.message("x"), node.message("y")), node.message("z"))
    first = app.enqueue_flow(flow, flow_id="nested")
    second = app.enqueue_flow(inner, flow_id="inner")
    async with running(worker_for(app, concurrency=4)):
        assert await first.result_async(timeout=20) == "e"
        assert await second.result_async(timeout=20) == [["x", "y"], "z"]
    assert started["b"] == ["a"] and started["d"] == ["a"]
    assert started["c"] == ["b"]
    assert started["e"] == ["c", "d"]
    info = app.flow("nested")
    assert info.waits_on["nested.4"] == ("nested.2", "nested.3")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_enqueue_flow_twice_enqueues_once(make_app: Callable[..., App], backend: str) -> None:
    """A second enqueue_flow with the same flow_id adds nothing (created=False) and the
    jobs run once."""
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task
    async def work(n: int) -> None:
        runs.append(n)

    def flow() -> object:
        return group(work.message(1), work.message(2)).then(work.message(3))

    first = app.enqueue_flow(flow(), flow_id="once")  # type: ignore[arg-type]
    again = app.enqueue_flow(flow(), flow_id="once")  # type: ignore[arg-type]
    assert first.created and not again.created
    assert again.job_ids == first.job_ids
    async with running(worker_for(app, concurrency=4)):
        await first.result_async(timeout=20)
        late = await app.enqueue_flow_async(flow(), flow_id="once")  # type: ignore[arg-type]
        assert not late.created
    await drain(app)  # a second copy would run now: none must
    assert sorted(runs) == [1, 2, 3]


def test_a_step_with_its_own_job_id_is_refused(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task
    def work(n: int) -> None: ...

    with pytest.raises(ConfigError, match="derive from the flow's id"):
        app.enqueue_flow(chain(work.message(1), work.message(2, job_id="mine")))
    with pytest.raises(ConfigError, match="at least one step"):
        group()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_dead_member_fails_the_flow_and_its_replay_resumes_it(
    make_app: Callable[..., App], backend: str
) -> None:
    """A member dead-lettered: the callback does not run and the flow is failed;
    replaying the dead letter runs the member again, and once it succeeds the callback
    runs, once."""
    app = make_app(backend=backend)
    broken = {"b": True}
    callbacks: list[list[object]] = []

    @app.task(retries=0)
    async def member(name: str) -> str:
        if broken.get(name):
            raise ValueError(f"{name} is broken")
        return name

    @app.task
    async def callback() -> None:
        callbacks.append(current_job().parent_results())

    flow = group(member.message("a"), member.message("b")).then(callback.message())
    result = app.enqueue_flow(flow, flow_id="replay-me")
    async with running(worker_for(app, concurrency=4)):
        with pytest.raises(JobFailed) as failed:
            await result.result_async(timeout=20)
        assert failed.value.job_id == "replay-me.1"
        assert "b is broken" in str(failed.value)
        info = await app.flow_async("replay-me")
        assert info.state == "failed"
        assert [j.state for j in info.jobs] == ["done", "dead", "waiting"]
        assert callbacks == []
        broken["b"] = False
        (letter,) = [x for x in deadletter.list_dead(app, 10) if x.job_id == "replay-me.1"]
        (replayed,) = deadletter.replay(app, [letter])
        assert replayed.outcome == "enqueued"
        await wait_until(lambda: app.flow("replay-me").state == "done", timeout=20)
        assert await result.result_async(timeout=1) is None
    assert callbacks == [["a", "b"]]
    assert (await app.flow_async("replay-me")).state == "done"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cancel_flow_leaves_no_job_behind(make_app: Callable[..., App], backend: str) -> None:
    """Cancelling a flow whose first job has not run cancels it and drops the jobs that
    wait: none of them ever runs, and the flow reads cancelled."""
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task
    async def work(n: int) -> None:
        runs.append(n)

    flow = chain(work.message(0), group(work.message(1), work.message(2)), work.message(3))
    result = app.enqueue_flow(flow, flow_id="cancel-me")
    assert app.flow("cancel-me").state == "waiting"
    assert await app.cancel_flow_async("cancel-me") == 4
    assert (await app.flow_async("cancel-me")).state == "cancelled"
    await drain(app, concurrency=4)
    assert runs == []
    with pytest.raises(JobFailed):
        result.result(timeout=5)
    assert app.cancel_flow("no-such-flow") == 0


async def test_cancelling_one_waiting_job_of_a_flow_cancels_the_flow(
    make_app: Callable[..., App],
) -> None:
    """app.cancel of a waiting job of a flow: the jobs that wait for it can never run,
    so the flow reads cancelled instead of hanging, and nothing of it runs."""
    app = make_app()
    runs: list[int] = []

    @app.task
    async def work(n: int) -> None:
        runs.append(n)

    result = app.enqueue_flow(group(work.message(0), work.message(1)).then(work.message(2)))
    assert await app.cancel_async(result.job_ids[0])
    assert app.flow(result.flow_id).state == "cancelled"
    await drain(app, concurrency=2)
    assert runs == []
    assert [job.state for job in app.flow(result.flow_id).jobs] == ["cancelled"] * 3
    assert app.cancel("plain.7") is CancelOutcome.UNKNOWN  # names no flow: nothing to do


@pytest.mark.parametrize("backend", BACKENDS)
async def test_finished_flow_keys_expire_after_flow_ttl(
    make_app: Callable[..., App], backend: str
) -> None:
    """Every key of a finished flow carries flow_ttl, and none is left once it passed."""
    app = make_app(backend=backend, flow_ttl=1.0)

    @app.task
    async def work(n: int) -> int:
        return n

    result = app.enqueue_flow(group(work.message(1), work.message(2)).then(work.message(3)))
    async with running(worker_for(app, concurrency=4)):
        assert await result.result_async(timeout=20) == 3
    client = app.client()
    keys = app.store.flows.keys(result.flow_id).flow_keys(result.flow_id)
    live = [k for k in keys if client.exists(k)]
    assert live, "the finished flow kept nothing to read"
    assert all(0 < client.pttl(k) <= 1000 for k in live)
    await wait_until(lambda: not any(client.exists(k) for k in keys), timeout=10)
    assert app.flow(result.flow_id).state == "unknown"
    stages = list(client.scan_iter(match=f"*flowstage*{result.flow_id}*"))
    assert stages == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_run_step_returns_the_stored_result_on_a_retry(
    make_app: Callable[..., App], backend: str
) -> None:
    """The step's function runs once; the retry (after a failure later in the job) gets
    its stored result back without calling it, typed by its return annotation."""
    app = make_app(backend=backend)
    charges: list[str] = []
    seen: list[object] = []

    def charge(order: str) -> dict[str, str]:
        charges.append(order)
        return {"charge_id": f"ch_{order}"}

    async def confirm(order: str) -> int:
        return len(order)

    @app.task(retries=3, backoff=0.01)
    async def pay(order: str) -> None:
        job = current_job()
        got = job.run_step("charge", charge, order)
        size = await job.run_step_async("confirm", confirm, order)
        seen.append((got, size))
        if job.attempt == 1:
            raise RetryableError("the e-mail service is down")

    async with running(worker_for(app, concurrency=2)):
        handle = await pay.enqueue_async("o-1")
        await wait_until(lambda: app.job(handle.job_id).status == "done", timeout=20)
    assert charges == ["o-1"]
    assert seen == [({"charge_id": "ch_o-1"}, 3), ({"charge_id": "ch_o-1"}, 3)]


def test_eager_flow_runs_inline_in_order(make_app: Callable[..., App]) -> None:
    """app.eager() runs a flow's jobs in declaration order, parent_results() working,
    and its result is the flow's."""
    app = make_app()
    order: list[str] = []

    @app.task
    def node(name: str) -> str:
        order.append(name)
        same = current_job().run_step("same", str.lower, name)
        return same + ":" + ",".join(map(str, current_job().parent_results()))

    with app.eager():
        result = app.enqueue_flow(
            group(node.message("a"), node.message("b")).then(node.message("c"))
        )
        assert result.result() == "c:a:,b:"
        assert app.flow(result.flow_id).state == "done"
    assert order == ["a", "b", "c"]


def test_keyed_limits_in_a_partitioned_flow_are_refused(
    make_app: Callable[..., App],
) -> None:
    app = make_app(partitions=4)

    @app.task(key_by="tenant", key_concurrency=1)
    def limited(tenant: str) -> None: ...

    with pytest.raises(ConfigError, match="cannot be in a flow"):
        app.enqueue_flow(chain(limited.message("t1"), limited.message("t2")))


async def test_partitioned_flow_runs_with_its_jobs_in_one_partition(
    make_app: Callable[..., App],
) -> None:
    """With partitions > 1 every job of a flow lives in the flow's partition, so its
    settle reaches the barriers; app.job(id) still finds each by id alone."""
    app = make_app(partitions=4)

    @app.task(key_by="tenant")
    async def work(tenant: str) -> str:
        return tenant

    flow = group(*(work.message(f"t{n}") for n in range(12))).then(work.message("end"))
    result = app.enqueue_flow(flow, flow_id="spread")
    async with running(worker_for(app, concurrency=8)):
        assert await result.result_async(timeout=30) == "end"
    assert {app.job(job_id).status for job_id in result.job_ids} == {"done"}


async def test_a_flow_its_producer_left_half_queued_is_finished_by_workers(
    make_app: Callable[..., App],
) -> None:
    """A producer that dies after the commit of a big group, before it queued all of the
    group's first jobs: the flow is listed as releasing, and finish_releases (which
    workers call) queues the rest; every member then runs once."""
    app = make_app()
    runs: list[int] = []

    @app.task
    async def work(n: int) -> int:
        runs.append(n)
        return n

    total = flow_store.RELEASE_CHUNK + 250
    ops = app._flows
    planned = ops.plan(group(*(work.message(n) for n in range(total))), "half")
    staged, tasks = ops._staged(planned)
    store = app.store.flows
    calls, commit = store.enqueue_calls("half", staged, planned.shape_json(), tasks, 60_000)
    assert all(app.store.run(calls))
    created, left = app.store.run([commit])[0]
    assert (created, left) == (1, 250)  # the producer "dies" here
    assert await store.finish_releases() == 1
    assert await store.finish_releases() == 0
    result = FlowResult("half", True, planned.job_ids, ops)
    async with running(worker_for(app, concurrency=16)):
        assert await result.result_async(timeout=30) == list(range(total))
    assert sorted(runs) == list(range(total))


async def test_a_partitioned_chain_does_not_wait_for_idle_workers_to_look_again(
    make_app: Callable[..., App],
) -> None:
    """With partitions > 1 idle workers wait on wake-up lists, not on the streams: the
    settle that queues a chain's next step wakes them, so six steps take far less than
    one idle wait (30 s) each."""
    app = make_app(partitions=4)

    @app.task
    async def hop(n: int) -> int:
        return n

    result = app.enqueue_flow(chain(*(hop.message(n) for n in range(6))))
    async with running(worker_for(app, concurrency=1, idle_wait=30.0)):
        assert await result.result_async(timeout=20) == 5
