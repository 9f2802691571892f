"""Idempotency claims across crashes: owners SIGKILLed mid-claim, a Redis server restarted.

A claim whose owner died stops being renewed and expires with its lease, so the job runs
again (the lesson's plain SET NX would skip it forever) and completes once. With the
PostgreSQL claim, a Redis server that lost everything still lets no duplicate through.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql

from conftest import delete_namespace, job_ended, wait_until_sync
from lockgate import AlreadyProcessed, App, ClaimBusy, ConnectionFailed
from lockgate.backend.keys import GROUP, Keys
from lockgate.core.codec import encode
from lockgate.integrations.embedded import EmbeddedServer
from lockgate.integrations.postgres import TABLE, init_schema, is_claimed

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent
DSN = os.environ.get("LOCKGATE_PG_DSN", "host=127.0.0.1 dbname=test user=postgres")


class Proc:
    """A child process and its log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.popen = popen
        self.log = log

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)
        assert self.popen.returncode == -signal.SIGKILL


@pytest.fixture
def spawn(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start child processes (cwd: this directory, the test's Redis and namespace)."""
    procs: list[Proc] = []
    env = dict(os.environ, LOCKGATE_REDIS_URL=redis_url, LOCKGATE_TEST_NAMESPACE=namespace)

    def start(*args: str) -> Proc:
        log = tmp_path / f"proc-{len(procs)}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, *args], cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append(Proc(popen, log))
        return procs[-1]

    yield start
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.kill()
        proc.popen.wait(timeout=30)


def worker(spawn: Callable[..., Proc], *options: str) -> Proc:
    return spawn(
        "-m", "lockgate", "--log-level", "WARNING", "worker", "claims_app:app",
        "--concurrency", "2", "--visibility-timeout", "1", "--claim-lease", "1",
        "--grace-period", "5", *options,
    )  # fmt: skip


def test_an_idempotent_job_whose_worker_was_killed_runs_again_and_completes_once(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    app = make_app()

    @app.task(idempotent=True, retries=0)
    def complete_order(order_id: str) -> None: ...

    def key(name: str) -> str:
        return f"{app.keys.prefix}:test:{name}"

    message = complete_order.message("A1", job_id="order-A1")
    app.enqueue_many([message])
    claim_key = app.keys.claim(Keys.job_claim_name("complete_order", "order-A1"))

    first = worker(spawn)
    wait_until_sync(
        lambda: rclient.llen(key("started:order-A1")) or first.popen.poll() is not None,
        message="the first worker started the job",
    )
    assert first.popen.poll() is None, first.tail()
    claim = rclient.get(claim_key)
    assert claim is not None and claim.startswith(b"c:"), claim  # claimed, not done
    first.kill()
    assert rclient.lrange(key("completed"), 0, -1) == []

    second = worker(spawn)
    try:
        wait_until_sync(
            lambda: rclient.llen(key("completed")) or second.popen.poll() is not None,
            message="the second worker completed the job",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}\nsecond worker's log:\n{second.tail()}") from None
    assert second.popen.poll() is None, second.tail()
    stream = app.keys.stream("default", "normal")
    wait_until_sync(lambda: job_ended(rclient, app.keys, "order-A1"), message="acked")
    assert rclient.zscore(*app.keys.done_marker(claim_key)) is not None  # marked done
    starts = [entry.decode().split(":") for entry in rclient.lrange(key("started:order-A1"), 0, -1)]
    assert len(starts) == 2
    assert int(starts[0][0]) == first.popen.pid
    assert int(starts[1][1]) == second.popen.pid  # redelivered: in a child of the second

    # A late redelivery of the same entry (a lost ack): acknowledged, not run again.
    rclient.xadd(stream, {"job": encode(message.job)})
    wait_until_sync(
        lambda: rclient.xlen(stream) == 0 or second.popen.poll() is not None,
        message="the redelivery was acked",
    )
    second.popen.send_signal(signal.SIGTERM)
    assert second.popen.wait(timeout=30) == 0, second.tail()
    assert rclient.lrange(key("completed"), 0, -1) == [b"order-A1"]
    assert rclient.get(key("runs:order-A1")) == b"2"
    assert rclient.xpending(stream, GROUP)["pending"] == 0
    assert rclient.xlen(app.keys.dead()) == 0


HOLDER = """
import sys
import threading
from lockgate import App

url, namespace, key, lease = sys.argv[1:]
app = App(redis_url=url, namespace=namespace)
client = app.client()
with app.idempotent(key, lease=float(lease)):
    client.set(f"lockgate:{{{namespace}}}:test:inside", 1)
    threading.Event().wait()
"""


def test_a_claim_whose_owner_was_killed_expires_with_its_lease(
    make_app: Callable[..., App],
    redis_url: str,
    namespace: str,
    rclient: redis.Redis,
    spawn: Callable[..., Proc],
) -> None:
    app = make_app()
    holder = spawn("-c", HOLDER, redis_url, namespace, "email:A1", "3")
    wait_until_sync(
        lambda: (
            rclient.exists(f"lockgate:{{{namespace}}}:test:inside")
            or holder.popen.poll() is not None
        ),
        message="the holder is inside the block",
    )
    assert holder.popen.poll() is None, holder.tail()
    holder.kill()
    redis_key = app.keys.claim("email:A1")
    # The dead owner's claim is still live for the rest of its lease: a duplicate backs
    # off (it neither runs nor is told the work is done).
    with pytest.raises(ClaimBusy) as busy, app.idempotent("email:A1"):
        pytest.fail("ran while the dead owner's lease was live")
    assert busy.value.delay is not None and 0 < busy.value.delay <= 3
    wait_until_sync(lambda: not rclient.exists(redis_key), message="the lease expired")
    ran: list[int] = []
    with app.idempotent("email:A1"):
        ran.append(1)
    assert ran == [1]
    assert rclient.zscore(*app.keys.done_marker(redis_key)) is not None  # marked done


def holder_name(rclient: redis.Redis, app: App, pid: int) -> bytes:
    """The consumer name of the live worker whose process is ``pid``."""
    names = [name for name in rclient.zrange(app.keys.liveness(), 0, -1) if b"~" not in name]
    (name,) = [name for name in names if name.endswith(b"-%d" % pid) or b"-%d-" % pid in name]
    return name


def test_a_claim_held_by_a_killed_worker_is_taken_over_once_the_worker_is_judged_dead(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    """A claim made in a worker's run outlives its lease while its worker lives; once
    the worker is killed (its liveness lapses while the other worker beats), a caller
    judges it dead and takes the claim over: not stuck for its long hold."""
    app = make_app()

    @app.task(retries=0)
    def hold_key(key: str) -> None: ...

    holding = f"{app.keys.prefix}:test:holding"
    workers = [worker(spawn), worker(spawn)]
    hold_key.enqueue("email:B2")
    wait_until_sync(lambda: rclient.llen(holding), message="a worker holds the claim")
    pid = int(rclient.lindex(holding, 0) or 0)
    (holder,) = [proc for proc in workers if proc.popen.pid == pid]
    value = rclient.get(app.keys.claim("email:B2")) or b""
    assert value.startswith(b"c:w") and value.endswith(b"." + holder_name(rclient, app, pid))
    holder.kill()
    ran: list[str] = []

    def take() -> bool:
        with contextlib.suppress(ClaimBusy), app.idempotent("email:B2", lease=1.0):
            ran.append("taken")
        return bool(ran)

    wait_until_sync(take, timeout=30, message="the dead worker's claim taken over")
    assert ran == ["taken"]
    with pytest.raises(AlreadyProcessed), app.idempotent("email:B2"):
        pytest.fail("ran twice")


def test_a_frozen_workers_claim_is_taken_over_and_its_late_settle_is_refused(
    make_app: Callable[..., App], rclient: redis.Redis, spawn: Callable[..., Proc]
) -> None:
    """A worker SIGSTOPped past its liveness lease while it holds a claim counts as dead:
    a caller takes the claim over. Resumed (SIGCONT), the worker leaves its block: its
    settle finds the claim another's and changes nothing (fenced), and it says so."""
    app = make_app()

    @app.task(retries=0)
    def hold_until_go(key: str) -> None: ...

    prefix = f"{app.keys.prefix}:test"
    holder = worker(spawn)
    # A live worker beats, so the frozen one can be judged dead; it serves another queue,
    # or it would reclaim the frozen worker's job and, running it, take the claim over
    # itself before a slow caller (a loaded machine).
    worker(spawn, "--queues", "elsewhere")
    hold_until_go.enqueue("email:C3")
    wait_until_sync(lambda: rclient.llen(f"{prefix}:holding"), message="a worker holds it")
    assert int(rclient.lindex(f"{prefix}:holding", 0) or 0) == holder.popen.pid
    holder.popen.send_signal(signal.SIGSTOP)
    ran: list[str] = []
    try:

        def take() -> bool:
            with contextlib.suppress(ClaimBusy), app.idempotent("email:C3", lease=1.0):
                ran.append("taken")
            return bool(ran)

        wait_until_sync(take, timeout=30, message="the frozen worker's claim taken over")
    finally:
        holder.popen.send_signal(signal.SIGCONT)
    rclient.set(f"{prefix}:go", 1)
    wait_until_sync(lambda: rclient.llen(f"{prefix}:left"), message="the holder left its block")
    wait_until_sync(
        lambda: "was taken over before done" in holder.log.read_text(errors="replace"),
        message="the holder said its settle was refused",
    )
    assert ran == ["taken"]
    with pytest.raises(AlreadyProcessed), app.idempotent("email:C3"):
        pytest.fail("ran again")


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    """A server of this test's own, without persistence: a restart loses everything."""
    with EmbeddedServer() as embedded:
        yield embedded


@pytest.fixture
def pg_key() -> Iterator[str]:
    key = f"test-{uuid.uuid4().hex}:pay:A1"
    init_schema(DSN)
    yield key
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {} WHERE key = %s").format(sql.Identifier(TABLE)), (key,))


def call_after_restart(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; a pooled connection from before the restart may fail once."""
    try:
        return fn()
    except ConnectionFailed:
        return fn()


def test_postgres_still_blocks_duplicates_after_redis_lost_everything(
    make_app: Callable[..., App], server: EmbeddedServer, pg_key: str
) -> None:
    namespace = uuid.uuid4().hex
    app = make_app(redis_url=server.url, namespace=namespace)
    client = redis.Redis.from_url(server.url)
    effects: list[str] = []
    try:
        with psycopg.connect(DSN) as conn:
            with conn.transaction(), app.idempotent(pg_key, conn=conn):
                effects.append("charged")
            # Refilled by the first duplicate.
            with pytest.raises(AlreadyProcessed), conn.transaction():
                with app.idempotent(pg_key, conn=conn):
                    effects.append("duplicate before the crash")
            done_marker = app.keys.done_marker(app.keys.claim(pg_key))
            assert client.zscore(*done_marker) is not None

            server.kill()  # no persistence: claims and done markers are gone
            server.start()
            client.close()
            assert client.dbsize() == 0

            def duplicate() -> None:
                with conn.transaction(), app.idempotent(pg_key, conn=conn):
                    effects.append("duplicate after the crash")

            with pytest.raises(AlreadyProcessed):
                call_after_restart(duplicate)
            assert client.zscore(*done_marker) is not None, "marker not refilled"
            # Refilled: Redis alone stops the next one.
            with pytest.raises(AlreadyProcessed), app.idempotent(pg_key):
                effects.append("duplicate without the database")
            with conn.transaction():
                assert is_claimed(conn, pg_key)
        assert effects == ["charged"]
    finally:
        client.close()
        delete_namespace(server.url, namespace)
