"""``@app.task(expires=...)``: a job not started within its expiry of enqueue is dropped
unrun (acknowledged, logged, its claim let go), never dead-lettered; expiries no retry or
delay could meet are refused up front."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgspec
import pytest

from conftest import worker_for
from lockgate import App, ConfigError, Message
from lockgate.ops.deadletter import list_dead
from lockgate.ops.inspect import queue_stats


def aged(message: Message, seconds: float) -> Message:
    """The message as if enqueued ``seconds`` ago (the producer's clock says so)."""
    return Message(msgspec.structs.replace(message.job, enqueued=time.time() - seconds))


@pytest.mark.parametrize("backend", ["streams", "sorted"])
async def test_an_expired_job_is_dropped_unrun_and_a_fresh_one_runs(
    make_app: Callable[..., App], backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(backend=backend)
    sent: list[str] = []

    @app.task(expires=60, idempotent=True)
    async def send_otp(user: str) -> None:
        sent.append(user)

    await app.enqueue_many_async([
        aged(send_otp.message("late", job_id="otp:late"), 61),
        aged(send_otp.message("fresh", job_id="otp:fresh"), 5),
    ])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="lockgate.worker.runner"):
        await asyncio.wait_for(worker_for(app).run(burst=True), 30)
    assert sent == ["fresh"]
    assert list_dead(app) == []
    stats = await queue_stats(app)
    assert sum(row.length + row.delayed for row in stats.levels) == 0
    assert any("otp:late" in r.getMessage() and "expired" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    # Its claim was let go, not marked done: the same id enqueued again runs.
    assert (await send_otp.enqueue_async("late", job_id="otp:late")).created
    await asyncio.wait_for(worker_for(app).run(burst=True), 30)
    assert sent == ["fresh", "late"]


def test_a_start_past_the_expiry_is_refused_at_enqueue(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(expires=60)
    def send_otp(user: str) -> None: ...

    with pytest.raises(ConfigError, match=r"'send_otp' expires 60 s .* start 90 s after"):
        send_otp.enqueue("u", delay=90)
    assert send_otp.enqueue("u", delay=30).created


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"expires": 0}, "positive"),
        ({"expires": -5}, "not be negative"),
        ({"expires": 0.5, "backoff": 2.0}, "shorter than its first retry's delay"),
    ],
)
def test_expiries_no_job_could_meet_are_refused_at_declaration(
    make_app: Callable[..., App], options: dict[str, float], message: str
) -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=message):
        app.task(name="otp", **options)(lambda: None)  # type: ignore[call-overload]


def test_a_short_expiry_is_fine_without_retries(make_app: Callable[..., App]) -> None:
    app = make_app()
    task = app.task(name="otp", expires=0.5, backoff=2.0, retries=0)(lambda: None)
    assert task.expires == 0.5
