"""Recent ends per task, written by a real worker's settle calls and read back through
``lockgate.ops.history``: jobs that succeed, fail once then succeed, and die; the
per-task table's numbers; the cap of 1,000 per task and outcome; the outcome filter;
both backends and a partitioned namespace."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conftest import drain
from lockgate import App
from lockgate.core import history
from lockgate.ops.history import recent_ends, task_names, task_table

LAYOUTS = [
    pytest.param({"backend": "streams"}, id="streams"),
    pytest.param({"backend": "sorted"}, id="sorted"),
    pytest.param({"backend": "streams", "partitions": 3}, id="streams-partitioned"),
]


def tasks_of(app: App) -> dict[str, Any]:
    tries: dict[str, int] = {}

    @app.task(name="ok")
    def ok(n: int) -> int:
        time.sleep(0.002)
        return n

    @app.task(name="flaky", retries=2, backoff=0.01)
    def flaky(n: int) -> int:
        tries[str(n)] = tries.get(str(n), 0) + 1
        if tries[str(n)] == 1:
            raise ValueError(f"first try of {n} fails " + "x" * 300)
        return n

    @app.task(name="doomed", retries=0)
    def doomed(n: int) -> None:
        raise KeyError(f"no such thing {n}")

    return {"ok": ok, "flaky": flaky, "doomed": doomed}


@pytest.mark.parametrize("layout", LAYOUTS)
async def test_a_worker_keeps_each_tasks_recent_ends_and_the_table_sums_them(
    make_app: Callable[..., App], layout: dict[str, Any]
) -> None:
    app = make_app(**layout)
    tasks = tasks_of(app)
    before = time.time()
    ok_ids = [tasks["ok"].enqueue(n).job_id for n in range(6)]
    flaky_ids = [tasks["flaky"].enqueue(n).job_id for n in range(3)]
    doomed_ids = [tasks["doomed"].enqueue(n).job_id for n in range(2)]
    await drain(app)
    after = time.time()

    done = await recent_ends(app, "ok")
    assert sorted(e.job_id for e in done) == sorted(ok_ids)
    assert all(e.outcome == "done" and e.attempt == 1 and e.error == "" for e in done)
    assert all(before <= e.ended_at <= after for e in done)
    assert all(e.run_ms is not None and e.run_ms >= 2 for e in done)
    assert [e.ended_at for e in done] == sorted((e.ended_at for e in done), reverse=True)

    flaky = await recent_ends(app, "flaky")
    retried = [e for e in flaky if e.outcome == "retried"]
    assert sorted(e.job_id for e in retried) == sorted(flaky_ids)
    assert all(e.attempt == 1 for e in retried)
    assert all(e.error.startswith("ValueError: first try of") for e in retried)
    assert all(len(e.error) == history.ERROR_CHARS for e in retried)  # cut
    assert sorted(e.job_id for e in flaky if e.outcome == "done") == sorted(flaky_ids)
    assert {e.attempt for e in flaky if e.outcome == "done"} == {2}
    # The filter: one outcome only.
    assert await recent_ends(app, "flaky", "retried") == retried

    dead = await recent_ends(app, "doomed", "dead")
    assert sorted(e.job_id for e in dead) == sorted(doomed_ids)
    assert all(e.error.startswith("KeyError: 'no such thing") for e in dead)
    assert await recent_ends(app, "doomed", "done") == []

    rows = {row.task: row for row in await task_table(app, now=after)}
    assert set(rows) == {"ok", "flaky", "doomed"}
    assert (rows["ok"].done, rows["ok"].retried, rows["ok"].dead) == (6, 0, 0)
    assert (rows["flaky"].done, rows["flaky"].retried, rows["flaky"].dead) == (3, 3, 0)
    assert (rows["doomed"].done, rows["doomed"].dead) == (0, 2)
    assert rows["ok"].done_rate > 0 and rows["ok"].failed_rate == 0
    assert rows["doomed"].failed_rate > 0 and rows["doomed"].done_rate == 0
    assert rows["ok"].p50_ms is not None and rows["ok"].p99_ms is not None
    assert 2 <= rows["ok"].p50_ms <= rows["ok"].p99_ms
    newest_dead = max(dead, key=lambda e: e.ended_at)
    assert rows["doomed"].last_error == newest_dead.error
    assert rows["doomed"].last_error_at == newest_dead.ended_at
    assert rows["ok"].last_error == "" and rows["ok"].last_error_at is None


async def test_a_task_keeps_its_newest_thousand_ends_of_an_outcome(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    """1,150 jobs: the list was trimmed once it passed 1,100 entries, back to 1,000; the
    readers give the newest 1,000, and the last ones enqueued are among them."""
    app = make_app()

    @app.task(name="many")
    def many(n: int) -> None:
        return None

    ids = [r.job_id for r in app.enqueue_many(many.message(n) for n in range(1150))]
    await drain(app)
    kept = rclient.llen(app.keys.history("many", "d"))
    assert history.KEEP <= kept <= history.KEEP + history.SLACK
    ends = await recent_ends(app, "many", limit=history.KEEP)
    assert len(ends) == history.KEEP
    assert {e.job_id for e in ends} >= set(ids[-history.SLACK :])
    (row,) = await task_table(app)
    assert row.done == history.KEEP


async def test_a_job_of_no_known_task_is_kept_under_a_question_mark(
    make_app: Callable[..., App],
) -> None:
    """A job whose task the worker does not know ends dead under '?': no key per made-up
    name, and the table lists it."""
    producer = make_app()

    @producer.task(name="nobody-runs-me")
    def gone() -> None:
        return None

    job_id = gone.enqueue().job_id
    app = make_app(unknown_task_grace=0)
    await drain(app)
    (end,) = await recent_ends(app, history.UNKNOWN_TASK)
    assert end.job_id == job_id and end.outcome == "dead"
    assert await task_names(app) == [history.UNKNOWN_TASK]


async def test_recent_ends_refuses_an_unknown_outcome_and_a_limit_out_of_range(
    make_app: Callable[..., App],
) -> None:
    from lockgate.errors import ConfigError

    app = make_app()
    with pytest.raises(ConfigError, match="unknown outcome"):
        await recent_ends(app, "t", "lost")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="limit"):
        await recent_ends(app, "t", limit=1001)
