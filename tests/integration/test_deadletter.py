"""The dead-letter queue: what an entry records, and listing, replaying and purging it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import App, current_job
from lockgate.codec import decode
from lockgate.deadletter import count_dead, list_dead, purge, replay, show_dead

BACKENDS = ["streams", "sorted"]


def server_now(rclient: redis.Redis) -> float:
    seconds, micros = rclient.time()
    return seconds + micros / 1_000_000


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_dead_letter_records_why_where_and_when(
    make_app: Callable[..., App], rclient: redis.Redis, backend: str
) -> None:
    app = make_app(backend=backend)

    @app.task(queue="mail", priority="low")
    def send_invoice(order_id: str, *, copy: bool = False) -> None:
        raise ValueError(f"no address for {order_id}")

    before = time.time()
    send_invoice.enqueue("A1", copy=True, job_id="invoice-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
    after = time.time()
    (letter,) = list_dead(app)
    assert re.fullmatch(r"\d+-\d+", letter.id)
    assert (letter.job_id, letter.task) == ("invoice-A1", "send_invoice")
    assert letter.reason == "failed"
    assert (letter.error_type, letter.error) == ("ValueError", "no address for A1")
    assert "Traceback" in letter.traceback
    assert "in send_invoice" in letter.traceback
    assert "ValueError: no address for A1" in letter.traceback
    assert (letter.attempt, letter.deliveries) == (1, 1)
    assert (letter.queue, letter.level) == ("mail", "low")
    if backend == "streams":
        assert letter.origin == app.keys.stream("mail", "low")
        assert re.fullmatch(r"\d+-\d+", letter.entry)
    else:
        assert (letter.origin, letter.entry) == ("mail", "invoice-A1")
    assert letter.enqueued_at is not None and letter.failed_at is not None
    assert before - 0.01 <= letter.enqueued_at <= letter.failed_at <= after + 0.01
    job = decode(letter.job)
    assert (job.id, job.args, job.kwargs, job.attempt) == ("invoice-A1", ["A1"], {"copy": True}, 1)
    assert letter.as_dict()["job_id"] == "invoice-A1"
    # Dead-lettered: acked, gone from the queue, and its id free for a replay.
    assert not rclient.exists(app.keys.job("invoice-A1"))
    if backend == "streams":
        assert rclient.xlen(app.keys.stream("mail", "low")) == 0
    else:
        assert rclient.zcard(app.keys.sorted_inflight("mail")) == 0
    assert show_dead(app, letter.id) == letter
    assert show_dead(app, "0-1") is None
    assert count_dead(app) == 1


async def test_replay_keeps_the_job_id_and_runs_the_job(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    fixed = False
    runs: list[tuple[str, int, list[str]]] = []

    @app.task(retries=0)
    def charge(order_id: str) -> None:
        job = current_job()
        if not fixed:
            raise RuntimeError("card service bug")
        runs.append((job.job_id, job.attempt, [order_id]))

    charge.enqueue("A1", job_id="charge-A1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 1)
        fixed = True  # the code is fixed; replay
        (letter,) = list_dead(app)
        (result,) = replay(app, [letter])
        assert (result.id, result.job_id, result.outcome) == (letter.id, "charge-A1", "enqueued")
        assert list_dead(app) == []
        await wait_until(lambda: worker.processed == 1)
    assert runs == [("charge-A1", 1, ["A1"])]
    assert not rclient.exists(app.keys.job("charge-A1"))


async def test_replay_leaves_a_letter_whose_id_is_taken_or_whose_job_is_unusable(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()

    @app.task(retries=0)
    def charge(order_id: str) -> None:
        raise RuntimeError("down")

    charge.enqueue("A1", job_id="charge-A1")
    stream = app.keys.stream("default", "normal")
    rclient.xadd(stream, {"job": b"not json"})  # undecodable
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        await wait_until(lambda: worker.dead == 2)
    letters = {letter.reason: letter for letter in list_dead(app)}
    assert set(letters) == {"failed", "undecodable entry"}
    assert letters["undecodable entry"].job == "not json"

    charge.enqueue("A1", job_id="charge-A1")  # the same id is queued again meanwhile
    results = {r.outcome: r for r in replay(app, list_dead(app))}
    assert set(results) == {"taken", "bad"}
    assert results["taken"].job_id == "charge-A1"
    assert count_dead(app) == 2  # both letters stay
    assert rclient.xlen(stream) == 1  # only the job enqueued by hand


async def test_purge_deletes_every_dead_letter(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(retries=0)
    async def broken(n: int) -> None:
        raise KeyError(n)

    app.enqueue_many([broken.message(n) for n in range(3)])
    worker = worker_for(app, concurrency=3)
    async with running(worker):
        await wait_until(lambda: worker.dead == 3)
    assert count_dead(app) == 3
    assert purge(app) == 3
    assert count_dead(app) == 0 and list_dead(app) == []
    assert purge(app) == 0
