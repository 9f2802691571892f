"""Debounce (``@app.task(debounce=..., debounce_max=...)``) on both backends: an
enqueue with the id of a job that still waits takes its place (new arguments, start pushed
back, never past ``debounce_max`` after the first); one while the job runs queues one more
run after it. Each enqueue is one script call.

The tests record each run's arguments from inside the task; their waits are polls with
deadlines (the debounce itself is the scenario's clock, not a synchronisation).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from conftest import running, wait_until, worker_for
from lockgate import App, ConfigError
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import ScriptCall, SyncScripts
from lockgate.ops.queues import pause, resume


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_ten_enqueues_run_once_with_the_last_arguments(
    make_app: Callable[..., App], backend: str
) -> None:
    """The issue's case: one id enqueued 10 times 100 ms apart (debounce 0.5 s) runs once,
    with the 10th enqueue's arguments; the first enqueue created the job, the others
    merged into it."""
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task(debounce=0.5)
    async def reindex(n: int) -> None:
        runs.append(n)

    worker = worker_for(app, concurrency=4)
    async with running(worker):
        created = []
        for n in range(10):
            created.append((await reindex.enqueue_async(n, job_id="reindex:shop")).created)
            await asyncio.sleep(0.1)
        await wait_until(lambda: runs, timeout=10)
        # Nothing else runs: the job is gone, no second run is due.
        await wait_until(lambda: app.job("reindex:shop").status == "done", timeout=10)
    assert runs == [9]
    assert created == [True] + [False] * 9
    assert worker.processed == 1


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_debounce_max_bounds_the_push_back(
    make_app: Callable[..., App], backend: str
) -> None:
    """Enqueues that keep coming every 50 ms push the start back by 0.4 s each time, but
    it never moves past 0.8 s after the first: the job runs while they still come."""
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task(debounce=timedelta(seconds=0.4), debounce_max=0.8)
    async def sync_cart(n: int) -> None:
        runs.append(n)

    worker = worker_for(app, concurrency=2)
    sent = 0
    async with running(worker):
        deadline = time.monotonic() + 30
        while not runs and time.monotonic() < deadline:
            await sync_cart.enqueue_async(sent, job_id="cart:7")
            sent += 1
            await asyncio.sleep(0.05)
        assert runs, "the job never ran while enqueues kept pushing it back"
    # It ran with arguments of an enqueue of the same burst, not after it.
    assert runs[0] < sent
    assert sent < 200  # the cap held it to about 0.8 s of enqueues, not 30 s


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_an_enqueue_while_it_runs_queues_one_more_run(
    make_app: Callable[..., App], backend: str
) -> None:
    """While a run is going, enqueues of its id queue exactly one more run, with the last
    of their arguments, which starts after the first run ended."""
    app = make_app(backend=backend)
    runs: list[int] = []
    ends: list[int] = []
    release = asyncio.Event()

    @app.task(debounce=0.05)
    async def rebuild(n: int) -> None:
        runs.append(n)
        if n == 0:
            await release.wait()
        ends.append(n)

    worker = worker_for(app, concurrency=4)
    async with running(worker):
        assert (await rebuild.enqueue_async(0, job_id="feed")).created
        await wait_until(lambda: runs == [0], timeout=10)
        queued = [(await rebuild.enqueue_async(n, job_id="feed")).created for n in (1, 2, 3)]
        assert queued == [True, False, False]
        assert app.job("feed").status == "running"
        release.set()
        await wait_until(lambda: ends == [0, 3], timeout=10)
        await wait_until(lambda: app.job("feed").status == "done", timeout=10)
    assert runs == [0, 3]


@pytest.mark.parametrize("keyed", [False, True], ids=["stream", "lane"])
async def test_a_job_that_fell_due_is_still_replaced(
    make_app: Callable[..., App], keys: Keys, scripts: SyncScripts, keyed: bool
) -> None:
    """Streams: a debounced job that fell due and was moved into its stream (or, keyed,
    its fairness lane) but not handed out still waits: an enqueue takes it out of there and
    delays the new arguments."""
    app = make_app()
    runs: list[int] = []

    @app.task(debounce=0.05, key_by=(lambda shop, n: shop) if keyed else None)
    async def price(shop: str, n: int) -> None:
        runs.append(n)

    price.enqueue("s1", 1, job_id="price:s1")
    level = price.priority
    stream, delayed = keys.stream("default", level), keys.delayed("default", level)

    def moved() -> bool:  # a peek moves due delayed jobs, as a worker's read does
        scripts.run(ScriptCall("peek_stream", [stream, delayed, keys.paused()], [GROUP, "default"]))
        return app.job("price:s1").status == "waiting"

    await wait_until(moved, timeout=10)
    assert not price.enqueue("s1", 2, job_id="price:s1").created
    assert app.job("price:s1").status == "delayed"
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: runs, timeout=10)
        await wait_until(lambda: app.job("price:s1").status == "done", timeout=10)
    assert runs == [2]
    assert worker.processed == 1


def test_a_debounced_task_needs_a_job_id(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(debounce=1)
    def notify(user: str) -> None: ...

    with pytest.raises(ConfigError, match="debounced: an enqueue needs the job_id"):
        notify.enqueue("u1")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce_max": 5}, "it needs debounce"),
        ({"debounce": 0}, "must be positive"),
        ({"debounce": 5, "debounce_max": 2}, "must be at least debounce"),
    ],
)
def test_bad_debounce_options(
    make_app: Callable[..., App], options: dict[str, float], message: str
) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=message):

        @app.task(**options)  # type: ignore[misc]
        def notify(user: str) -> None: ...


async def test_sorted_a_debounced_keyed_job_is_replaced_wherever_it_waits(
    make_app: Callable[..., App],
) -> None:
    """Sorted backend, ``key_by`` and ``debounce``: a re-enqueue takes the job out of the
    ranked set where it is its key's head (the key's next job takes its place) and out of
    its key's lane where it waits behind another head; it runs once, last."""
    app = make_app(backend="sorted")
    runs: list[int] = []

    @app.task(key_by="shop", debounce=0.05)
    async def price(shop: str, n: int) -> None:
        runs.append(n)

    @app.task(key_by="shop")
    async def other(shop: str, n: int) -> None:
        runs.append(100 + n)

    client, level = app.client(), price.priority
    waiting, lane = app.keys.sorted_waiting("default"), app.keys.sorted_lane("default", level, "s1")
    await pause(app, "default")
    worker = worker_for(app, concurrency=2)
    async with running(worker):  # paused: its takes move due jobs, and hand out none
        assert price.enqueue("s1", 1, job_id="p").created
        await wait_until(lambda: client.zscore(waiting, "p") is not None)  # the key's head
        queued = other.enqueue("s1", 0).job_id  # behind it, in the lane
        assert not price.enqueue("s1", 2, job_id="p").created
        assert client.zscore(waiting, "p") is None
        assert client.zscore(waiting, queued) is not None  # it took the head's place
        await wait_until(lambda: client.zscore(lane, "p") is not None)  # due: behind it
        assert not price.enqueue("s1", 3, job_id="p").created
        assert client.zscore(lane, "p") is None
        await resume(app, "default")
        await wait_until(lambda: app.job("p").status == "done", timeout=10)
        await wait_until(lambda: worker.processed == 2)
    assert runs == [100, 3]


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_two_enqueues_of_one_id_in_one_call_keep_the_last_arguments(
    make_app: Callable[..., App], backend: str
) -> None:
    app = make_app(backend=backend)
    runs: list[int] = []

    @app.task(debounce=0.05)
    async def rebuild(n: int) -> None:
        runs.append(n)

    results = app.enqueue_many([rebuild.message(n, job_id="feed") for n in (1, 2)])
    assert [r.created for r in results] == [True, False]
    worker = worker_for(app, concurrency=2)
    async with running(worker):
        await wait_until(lambda: app.job("feed").status == "done", timeout=10)
    assert runs == [2]
