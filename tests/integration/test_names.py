"""Names cannot collide (issue 22, item 7): keys built from several user strings, the
upgrade from the names that did collide, and user strings in log lines.

lockgate 0.2 and 0.3 joined a claim's parts with ``:``: task ``a`` with job id ``b:c``
and task ``a:b`` with job id ``c`` shared the claim ``job:a:b:c``, so whichever ran
second was acknowledged as already processed without running. The same held for steps
(``step:{task}:{job id}:{step}``) and request guards (``request:{counter}:{request}``).
Each test below runs on real Redis; the collisions run through a real worker.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable

import pytest
import redis

from conftest import running, wait_until, worker_for
from lockgate import AlreadyProcessed, App, current_job
from lockgate.backend.keys import Keys, done_marker_place

TTL_S = 3600


def old_job_claim(task: str, job_id: str) -> str:
    """The claim name of an ``idempotent=True`` task's job as 0.2 and 0.3 wrote it."""
    return f"job:{task}:{job_id}"


def old_step_claim(task: str, job_id: str, step: str) -> str:
    """A step's claim name as 0.2 and 0.3 wrote it (``JobContext.step``)."""
    return f"step:{task}:{job_id}:{step}"


def server_s(rclient: redis.Redis) -> int:
    return int(rclient.time()[0])


def write_old_done_marker(
    rclient: redis.Redis, app: App, name: str, job_id: str | None = None
) -> None:
    """A done marker as 0.3 wrote it: its claim key's member in its bucket, scored by the
    expiry in server seconds (``lua/_done_marker.lua``), the bucket expiring with it; the
    claim placed as 0.3 placed it (a job's in its partition, a step's by its name)."""
    claim, prefix = app.store.layout.claim_place(name, job_id)
    bucket, member = done_marker_place(prefix, claim)
    expiry = server_s(rclient) + TTL_S
    rclient.zadd(bucket, {member: expiry})
    rclient.expireat(bucket, expiry)


def write_old_string_marker(
    rclient: redis.Redis, app: App, name: str, job_id: str | None = None
) -> None:
    """A done marker as 0.2 wrote it: ``d:<token>`` under the claim key."""
    claim, _ = app.store.layout.claim_place(name, job_id)
    rclient.set(claim, f"d:{uuid.uuid4().hex}", ex=TTL_S)


# --- the collisions, run by a real worker ------------------------------------------------


async def test_idempotent_jobs_whose_task_and_id_join_alike_both_run(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    ran: list[tuple[str, str]] = []

    @app.task(name="a", idempotent=True, idempotency_ttl=TTL_S)
    def task_a() -> None:
        ran.append(("a", current_job().job_id))

    @app.task(name="a:b", idempotent=True, idempotency_ttl=TTL_S)
    def task_ab() -> None:
        ran.append(("a:b", current_job().job_id))

    worker = worker_for(app, concurrency=1)
    async with running(worker):
        task_ab.enqueue(job_id="c")
        await wait_until(lambda: worker.processed == 1, message="a:b / c ran")
        task_a.enqueue(job_id="b:c")
        await wait_until(lambda: worker.processed == 2, message="a / b:c settled")
        assert ran == [("a:b", "c"), ("a", "b:c")]
        # Each is done under its own name: a duplicate of either is still skipped.
        task_ab.enqueue(job_id="c")
        task_a.enqueue(job_id="b:c")
        await wait_until(lambda: worker.processed == 4, message="duplicates settled")
    assert ran == [("a:b", "c"), ("a", "b:c")]


async def test_steps_whose_task_id_and_name_join_alike_each_run(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    ran: list[tuple[str, str, str]] = []

    def body(step: str) -> None:
        job = current_job()
        with contextlib.suppress(AlreadyProcessed), job.step(step):
            ran.append((job.task, job.job_id, step))

    @app.task(name="a", idempotency_ttl=TTL_S)
    def task_a(step: str) -> None:
        body(step)

    @app.task(name="a:b", idempotency_ttl=TTL_S)
    def task_ab(step: str) -> None:
        body(step)

    # Under 0.3 all four were the one claim step:a:b:c:d.
    jobs = [(task_ab, "c", "d"), (task_a, "b:c", "d"), (task_a, "b", "c:d"), (task_a, "b:c:d", "")]
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        for n, (task, job_id, step) in enumerate(jobs, 1):
            task.enqueue(step, job_id=job_id)
            await wait_until(lambda n=n: worker.processed == n, message=f"job {n} settled")
    assert ran == [(t.name, job_id, step) for t, job_id, step in jobs]


def test_request_guards_whose_counter_and_request_join_alike_both_count(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    assert app.incr_once("a:b", "c") == (True, 1)
    assert app.incr_once("a", "b:c") == (True, 1)
    # And each is still counted once.
    assert app.incr_once("a:b", "c") == (False, 1)
    assert app.incr_once("a", "b:c") == (False, 1)


def test_the_new_names_differ_for_every_split_of_one_joined_string() -> None:
    jobs = {Keys.job_claim_name(t, i) for t, i in [("a", "b:c"), ("a:b", "c"), ("a:b:c", "")]}
    assert len(jobs) == 3
    steps = {
        Keys.step_claim_name(t, i, s)
        for t, i, s in [("a", "b:c", "d"), ("a:b", "c", "d"), ("a", "b", "c:d"), ("a:b:c", "d", "")]
    }
    assert len(steps) == 4
    keys = Keys("ns")
    assert keys.request("a", "b:c") != keys.request("a:b", "c")
    # Nor can a new name be an old one: their kinds differ.
    assert not Keys.job_claim_name("a", "b").startswith("job:")
    assert not Keys.step_claim_name("a", "b", "c").startswith("step:")


# --- the upgrade: what 0.2 and 0.3 wrote under the old names is honoured ------------------


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("written", ["bucket", "string"])
async def test_a_job_done_under_its_old_name_is_not_run_again(
    make_app: Callable[..., App], rclient: redis.Redis, written: str, partitions: int
) -> None:
    app = make_app(partitions=partitions)
    ran: list[str] = []

    @app.task(name="billing.charge", idempotent=True, idempotency_ttl=TTL_S)
    def charge() -> None:
        ran.append(current_job().job_id)

    write = write_old_done_marker if written == "bucket" else write_old_string_marker
    write(rclient, app, old_job_claim("billing.charge", "order-1"), "order-1")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        charge.enqueue(job_id="order-1")
        charge.enqueue(job_id="order-2")
        await wait_until(lambda: worker.processed == 2, message="both settled")
    assert ran == ["order-2"]
    # New writes go under the new name only; the old marker is left to expire.
    layout = app.store.layout
    new = layout.claim_place(Keys.job_claim_name("billing.charge", "order-2"), "order-2")
    assert rclient.zscore(*done_marker_place(new[1], new[0])) is not None
    old = layout.claim_place(old_job_claim("billing.charge", "order-2"), "order-2")
    assert rclient.zscore(*done_marker_place(old[1], old[0])) is None
    assert not rclient.exists(old[0])


async def test_a_live_claim_under_the_old_name_holds_the_job_back_until_it_lapses(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    ran: list[str] = []

    @app.task(name="charge", idempotent=True, idempotency_ttl=TTL_S)
    def charge() -> None:
        ran.append(current_job().job_id)

    old = app.keys.claim(old_job_claim("charge", "busy-1"))
    rclient.set(old, f"c:{uuid.uuid4().hex}", px=1500)  # a 0.3 worker runs it right now
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        charge.enqueue(job_id="busy-1")
        await wait_until(lambda: worker.processed == 1, message="it ran after the lapse")
        assert not rclient.exists(old)  # it ran only once the old claim was gone
    assert ran == ["busy-1"]
    assert worker.dead == 0


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("written", ["bucket", "string"])
async def test_a_step_done_under_its_old_name_is_not_run_again(
    make_app: Callable[..., App], rclient: redis.Redis, written: str, partitions: int
) -> None:
    app = make_app(partitions=partitions)
    ran: list[str] = []

    @app.task(name="order", idempotency_ttl=TTL_S)
    def order() -> None:
        job = current_job()
        for step in ("email", "receipt"):
            with contextlib.suppress(AlreadyProcessed), job.step(step):
                ran.append(step)

    write = write_old_done_marker if written == "bucket" else write_old_string_marker
    write(rclient, app, old_step_claim("order", "o-1", "email"))
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        order.enqueue(job_id="o-1")
        await wait_until(lambda: worker.processed == 1, message="settled")
    assert ran == ["receipt"]


def test_a_request_counted_under_its_old_guard_is_not_counted_again(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    assert app.incr_once("views", "seed") == (True, 1)
    rclient.set(f"{app.keys.prefix}:request:views:r-1", "1", ex=TTL_S)  # as 0.3 wrote it
    assert app.incr_once("views", "r-1") == (False, 1)
    assert app.incr_once("views", "r-2") == (True, 2)


# --- user strings in log lines -------------------------------------------------------------


async def test_a_job_id_with_a_newline_stays_on_one_log_line(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    forged = "x\nERROR lockgate.worker.loop: forged line"

    @app.task(name="charge", idempotent=True, idempotency_ttl=TTL_S, retries=0)
    def charge() -> None:
        raise ValueError("boom")

    caplog.set_level(logging.INFO, logger="lockgate")
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        charge.enqueue(job_id=forged)
        await wait_until(lambda: worker.dead == 1, message="dead-lettered")
        charge.enqueue(job_id=forged)  # its claim is released: runs and dies again
        await wait_until(lambda: worker.dead == 2, message="dead-lettered twice")
    about = [r for r in caplog.records if r.name.startswith("lockgate") and "x" in r.getMessage()]
    assert about, "no log line names the job"
    for record in about:
        message = record.getMessage()
        assert "\n" not in message and "\r" not in message, message
    assert any("x\\nERROR" in r.getMessage() for r in about)
    # The dead letter's traceback still follows its line, as an exception's does.
    dead = [r for r in about if "dead-letter queue" in r.getMessage()]
    assert dead and all("ValueError: boom" in (r.exc_text or "") for r in dead)
    formatted = logging.Formatter("%(levelname)s %(message)s").format(dead[0])
    assert formatted.splitlines()[1] == "Traceback (most recent call last):"


async def test_with_legacy_markers_the_old_name_gets_a_tagged_marker_that_counts_only_for_its_job(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """A rolling deploy from 0.2 (App(legacy_markers=True)): a job's done marker is also
    written under its 0.2 name, where 0.2 workers look, tagged with its task, so the other
    job of that name (task ``a`` with id ``b:c``, task ``a:b`` with id ``c``) still runs."""
    app = make_app(legacy_markers=True)
    ran: list[tuple[str, str]] = []

    @app.task(name="a", idempotent=True, idempotency_ttl=TTL_S)
    def task_a() -> None:
        ran.append(("a", current_job().job_id))

    @app.task(name="a:b", idempotent=True, idempotency_ttl=TTL_S)
    def task_ab() -> None:
        ran.append(("a:b", current_job().job_id))

    old = app.keys.claim(old_job_claim("a", "b:c"))
    worker = worker_for(app, concurrency=1)
    async with running(worker):
        task_ab.enqueue(job_id="c")
        await wait_until(lambda: worker.processed == 1, message="a:b / c ran")
        marker = rclient.get(old)
        assert marker is not None and marker.startswith(b"d:") and marker.endswith(b":t:a:b")
        task_a.enqueue(job_id="b:c")
        await wait_until(lambda: worker.processed == 2, message="a / b:c settled")
        assert (rclient.get(old) or b"").endswith(b":t:a")  # the last to run tags it
        task_ab.enqueue(job_id="c")  # a duplicate: skipped by its bucketed marker
        await wait_until(lambda: worker.processed == 3, message="the duplicate settled")
    assert ran == [("a:b", "c"), ("a", "b:c")]
    # A worker without legacy_markers honours the tagged marker for its own job only.
    plain = make_app()
    plain_ran: list[str] = []

    @plain.task(name="a", idempotent=True, idempotency_ttl=TTL_S)
    def plain_a() -> None:
        plain_ran.append(current_job().job_id)

    rclient.delete(app.keys.done_marker(app.keys.claim(Keys.job_claim_name("a", "b:c")))[0])
    worker = worker_for(plain, concurrency=1)
    async with running(worker):
        plain_a.enqueue(job_id="b:c")  # done under the old name only, tagged for a
        await wait_until(lambda: worker.processed == 1, message="settled")
    assert plain_ran == []


def test_with_legacy_markers_a_request_guard_is_also_written_under_its_old_name_tagged(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app(legacy_markers=True)
    assert app.incr_once("a:b", "c") == (True, 1)
    assert rclient.get(f"{app.keys.prefix}:request:a:b:c") == b"t:a:b"  # for 0.2 producers
    assert app.incr_once("a", "b:c") == (True, 1)  # the tag is another counter's
    assert (app.incr_once("a:b", "c"), app.incr_once("a", "b:c")) == ((False, 1), (False, 1))
