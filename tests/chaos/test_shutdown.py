"""Stopping a worker that runs a sync idempotent task: nothing runs twice, nothing hangs.

Defect 4: a SIGTERM past the grace period used to release the claim of a sync run that
was still going (the thread cannot be stopped), so another worker ran the payment again.
Now the run keeps its claim, the worker waits for it, and it settles (done marker and
ack) when it ends. Defect 12: a second Ctrl-C used to leave the process hanging on the
thread; now it exits at once, the claim is kept until the process is gone and then lapses,
and the interrupted job is redelivered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from conftest import job_ended, wait_until_sync
from lockgate import App
from lockgate.backend.keys import Keys

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent


class Proc:
    """A ``lockgate worker`` subprocess and its log."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


@pytest.fixture
def spawn(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    procs: list[Proc] = []

    def start(*, grace: float = 0.5, visibility: float = 2.0) -> Proc:
        log = tmp_path / f"worker-{len(procs)}.log"
        env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)
        command = [
            sys.executable, "-m", "lockgate", "worker", "shutdown_app:app", "--concurrency",
            "2", "--grace-period", str(grace), "--visibility-timeout", str(visibility),
            "--claim-lease", str(visibility),
        ]  # fmt: skip
        with log.open("wb") as out:
            popen = subprocess.Popen(
                command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        proc = Proc(popen, log)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.kill()
        proc.popen.wait(timeout=30)


def key(namespace: str, name: str) -> str:
    return f"lockgate:{{{namespace}}}:test:{name}"


def started_by(rclient: redis.Redis, namespace: str) -> list[str]:
    return [e.decode() for e in rclient.lrange(key(namespace, "started"), 0, -1)]


def test_sigterm_past_the_grace_period_keeps_the_claim_and_settles_when_the_run_ends(
    make_app: Callable[..., App], namespace: str, rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    app = make_app()

    @app.task(idempotent=True, retries=0)
    def pay(order_id: str) -> None: ...

    pay.enqueue("A1", job_id="pay-A1")
    claim_key = app.keys.claim(Keys.job_claim_name("pay", "pay-A1"))
    first = spawn(grace=0.3, visibility=1.0)
    wait_until_sync(lambda: started_by(rclient, namespace), message="the payment started")
    first.popen.send_signal(signal.SIGTERM)
    # Well past the grace period and several leases: the run still holds its claim.
    second = spawn(grace=0.3, visibility=1.0)
    # Serving (on a loaded machine its start takes a while): it joins the registry after
    # installing its signal handlers, so the SIGTERM below stops it instead of killing it.
    wait_until_sync(
        lambda: second.popen.pid in {w.pid for w in app.store.registry.live_workers_sync()},
        message="the second worker registered",
    )
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        claim = rclient.get(claim_key)
        assert claim is not None and claim.startswith(b"c:"), (claim, first.tail())
        assert len(started_by(rclient, namespace)) == 1, second.tail()
        assert first.popen.poll() is None, first.tail()  # it waits for the thread
        time.sleep(0.05)  # observing a steady state, not synchronising
    rclient.set(key(namespace, "release"), 1)
    assert first.popen.wait(timeout=20) == 0, first.tail()
    assert rclient.zscore(*app.keys.done_marker(claim_key)) is not None  # marked done
    assert job_ended(rclient, app.keys, "pay-A1")  # acked: the id is free
    second.popen.send_signal(signal.SIGTERM)
    assert second.popen.wait(timeout=20) == 0, second.tail()
    assert len(rclient.lrange(key(namespace, "paid"), 0, -1)) == 1
    assert len(started_by(rclient, namespace)) == 1  # the second worker never ran it


def test_a_second_sigint_exits_at_once_and_the_job_is_redelivered_after_the_lease(
    make_app: Callable[..., App], namespace: str, rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    app = make_app()

    @app.task(idempotent=True, retries=0)
    def pay(order_id: str) -> None: ...

    pay.enqueue("A2", job_id="pay-A2")
    claim_key = app.keys.claim(Keys.job_claim_name("pay", "pay-A2"))
    first = spawn(grace=30.0, visibility=1.0)
    wait_until_sync(lambda: started_by(rclient, namespace), message="the payment started")
    first.popen.send_signal(signal.SIGINT)
    time.sleep(0.2)  # two separate Ctrl-C presses
    pressed = time.monotonic()
    first.popen.send_signal(signal.SIGINT)
    first.popen.wait(timeout=10)
    exited_in = time.monotonic() - pressed
    print(f"\nsecond SIGINT -> exit in {exited_in * 1000:.0f} ms")
    assert exited_in < 5.0, first.tail()
    # The interrupted run's claim was kept, not released: it lapses with its lease.
    claim = rclient.get(claim_key)
    assert claim is None or claim.startswith(b"c:"), claim
    assert not job_ended(rclient, app.keys, "pay-A2")  # not acked: it will be redelivered
    rclient.set(key(namespace, "release"), 1)
    second = spawn(grace=5.0, visibility=1.0)
    wait_until_sync(
        lambda: rclient.llen(key(namespace, "paid")) == 1, message="redelivered and paid"
    )
    wait_until_sync(lambda: job_ended(rclient, app.keys, "pay-A2"), message="acked")
    assert rclient.zscore(*app.keys.done_marker(claim_key)) is not None  # marked done
    second.popen.send_signal(signal.SIGTERM)
    assert second.popen.wait(timeout=20) == 0, second.tail()


def test_a_sync_run_left_past_its_timeout_does_not_hold_the_process_at_exit(
    make_app: Callable[..., App], namespace: str, rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    """Its thread cannot be stopped and the interpreter would wait for it at exit: the
    worker exits without it (its claim lapses with the process)."""
    app = make_app()

    @app.task(timeout=0.5, retries=0)
    def stuck(n: int) -> None: ...

    stuck.enqueue(1, job_id="stuck-1")
    first = spawn(grace=0.3, visibility=1.0)
    wait_until_sync(lambda: rclient.llen(key(namespace, "stuck")), message="it started")
    wait_until_sync(lambda: app.client().xlen(app.keys.dead()) == 1, message="timed out")
    stopped = time.monotonic()
    first.popen.send_signal(signal.SIGTERM)
    first.popen.wait(timeout=20)
    exited_in = time.monotonic() - stopped
    print(f"\nSIGTERM with a run past its timeout -> exit in {exited_in * 1000:.0f} ms")
    assert exited_in < 10, first.tail()
    assert "exiting with 1 runs still going" in first.log.read_text(), first.tail()
