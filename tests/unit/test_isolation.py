"""run_in_child: real forks, each ending one way, and the child's hygiene.

The bounds on time are loose, against hangs: they tell "waited for the deadline" from
"did not", never measure speed.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import uvloop

from conftest import wait_until, wait_until_sync
from lockgate import App, ConfigError
from lockgate.process import isolation
from lockgate.process.isolation import EXIT_WORK_RAISED, ChildExit, describe, run_in_child

# Nothing listens, and no client probes a socket URL: no test here reaches Redis.
NOWHERE = "unix:///nonexistent/lockgate-unit.sock"
RUNNERS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4, "test-isolation")
    yield pool
    pool.shutdown(wait=True)


def gone(pid: int) -> bool:
    """Whether ``pid`` is no child of ours any more (it was reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def wait_for_file(path: Path, timeout: float = 30) -> None:
    """Block (in a child) until ``path`` exists: the parent's go-ahead."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)


# --- how a child ends -------------------------------------------------------------------


async def test_the_report_comes_back(executor: ThreadPoolExecutor) -> None:
    ended = await run_in_child(lambda: b"hello from " + str(os.getpid()).encode(),
                               timeout=30, executor=executor)  # fmt: skip
    assert ended.report is not None and ended.report.startswith(b"hello from ")
    assert int(ended.report.split()[-1]) != os.getpid()
    assert (ended.reason, ended.timed_out) == ("", False)


async def test_an_empty_report_and_one_larger_than_the_pipe(executor: ThreadPoolExecutor) -> None:
    big = os.urandom(3 * 1024 * 1024 + 7)  # the pipe holds 64 KiB: read while it writes
    empty, large = await asyncio.gather(
        run_in_child(lambda: b"", timeout=30, executor=executor),
        run_in_child(lambda: big, timeout=30, executor=executor),
    )
    assert empty == ChildExit(b"", "")
    assert large == ChildExit(big, "")


async def test_a_child_killed_by_a_signal(executor: ThreadPoolExecutor) -> None:
    def poison() -> bytes:
        os.kill(os.getpid(), signal.SIGKILL)
        return b"never"

    ended = await run_in_child(poison, timeout=30, executor=executor)
    assert ended == ChildExit(None, "killed by signal 9 (SIGKILL)")


async def test_a_child_that_exits_with_a_code(executor: ThreadPoolExecutor) -> None:
    def leave(code: int) -> Callable[[], bytes]:
        def work() -> bytes:
            os._exit(code)

        return work

    three, zero = await asyncio.gather(
        run_in_child(leave(3), timeout=30, executor=executor),
        run_in_child(leave(0), timeout=30, executor=executor),
    )
    assert three == ChildExit(None, "exited with code 3")
    # Code 0 without a report is not taken for an empty report.
    assert zero == ChildExit(None, "exited with code 0 before reporting")


async def test_work_that_raises_exits_with_the_distinctive_code(
    executor: ThreadPoolExecutor, capfd: pytest.CaptureFixture[str]
) -> None:
    def broken() -> bytes:
        return str(1 / 0).encode()

    def not_bytes() -> bytes:
        return "text"  # type: ignore[return-value]

    raised, wrong = await asyncio.gather(
        run_in_child(broken, timeout=30, executor=executor),
        run_in_child(not_bytes, timeout=30, executor=executor),
    )
    for ended in (raised, wrong):
        assert ended.report is None and not ended.timed_out
        assert ended.reason.startswith(f"exited with code {EXIT_WORK_RAISED} ")
    err = capfd.readouterr().err
    assert err.count("lockgate: the work of child") == 2
    assert "ZeroDivisionError: division by zero" in err
    assert "TypeError: a child's work must return bytes, not str" in err


def hang_forever(pid_file: Path) -> bytes:
    """A child's work that never ends; it writes its pid first."""
    pid_file.write_text(str(os.getpid()))
    while True:
        time.sleep(60)


async def test_a_child_over_its_timeout_is_killed_and_reaped(
    executor: ThreadPoolExecutor, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    forever = functools.partial(hang_forever, pid_file)

    started = time.monotonic()
    ended = await run_in_child(forever, timeout=0.3, executor=executor)
    elapsed = time.monotonic() - started
    assert ended == ChildExit(None, "ran over its timeout of 0.3s", timed_out=True)
    assert 0.3 <= elapsed < 10
    assert gone(int(pid_file.read_text()))


async def test_a_grandchild_holding_the_pipe_does_not_hold_back_the_report(
    executor: ThreadPoolExecutor,
) -> None:
    def spawning() -> bytes:
        grandchild = os.fork()
        if grandchild == 0:  # inherits the write end of the pipe and keeps it open
            time.sleep(60)
            os._exit(0)
        return str(grandchild).encode()

    started = time.monotonic()
    ended = await run_in_child(spawning, timeout=30, executor=executor)
    assert ended.report is not None, ended.reason
    os.kill(int(ended.report), signal.SIGKILL)  # not ours to reap: it was the child's
    assert time.monotonic() - started < 10


def test_describe_names_each_end() -> None:
    assert describe(signal.SIGTERM) == "killed by signal 15 (SIGTERM)"
    assert describe(50) == "killed by signal 50 (unknown)"
    assert describe(3 << 8) == "exited with code 3"
    assert describe(EXIT_WORK_RAISED << 8).startswith("exited with code 70 (its work raised")


@pytest.mark.parametrize("timeout", [0, -1.0, True, "2", float("nan")])
async def test_a_timeout_must_be_positive_seconds(
    executor: ThreadPoolExecutor, timeout: Any
) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        await run_in_child(lambda: b"", timeout=timeout, executor=executor)


# --- what the child runs with -----------------------------------------------------------


def run_async_work_in_child(child_runner: str) -> bytes:
    """Work for the child: asyncio.run (or uvloop.run) of a small async task."""

    async def task() -> bytes:
        assert asyncio.get_running_loop() is not None
        parts = await asyncio.gather(asyncio.sleep(0.01, b"a"), asyncio.sleep(0.02, b"b"))
        return b"".join(parts)

    assert threading.active_count() == 1  # the forking thread only
    assert threading.current_thread() is threading.main_thread()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # none: the parent's loop ran on another thread
    result: bytes = RUNNERS[child_runner](task())
    return result + child_runner.encode()


@pytest.mark.parametrize("child_runner", list(RUNNERS))
@pytest.mark.parametrize("parent_runner", list(RUNNERS))
def test_async_work_runs_its_own_loop_in_the_child(parent_runner: str, child_runner: str) -> None:
    async def main() -> ChildExit:
        with ThreadPoolExecutor(2) as pool:
            return await run_in_child(
                lambda: run_async_work_in_child(child_runner), timeout=30, executor=pool
            )

    ended = RUNNERS[parent_runner](main())
    assert ended == ChildExit(b"ab" + child_runner.encode(), "")


@pytest.mark.parametrize("parent_runner", list(RUNNERS))
def test_stop_signals_are_ignored_in_the_child_and_stay_there(
    parent_runner: str,
) -> None:
    caught: list[int] = []

    def survive_sigusr1() -> bytes:
        # The parent loop's handler is inherited; without the reset, its wakeup fd (the
        # parent loop's self-pipe) would carry this signal to the parent.
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        ignored = [signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM)]
        return repr(ignored).encode()

    def die_by(signum: int) -> Callable[[], bytes]:
        # A stop sent to the process group must not kill a run its worker waits for.
        def work() -> bytes:
            os.kill(os.getpid(), signum)
            time.sleep(0.1)
            return b"survived"

        return work

    async def main() -> tuple[ChildExit, ...]:
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
        for signum in signals:
            loop.add_signal_handler(signum, caught.append, signum)
        try:
            with ThreadPoolExecutor(3) as pool:
                ended = await asyncio.gather(
                    run_in_child(survive_sigusr1, timeout=30, executor=pool),
                    run_in_child(die_by(signal.SIGTERM), timeout=30, executor=pool),
                    run_in_child(die_by(signal.SIGINT), timeout=30, executor=pool),
                )
            await asyncio.sleep(0.2)  # time for a stray wake-up to be handled
            return ended
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)

    usr1, term, intr = RUNNERS[parent_runner](main())
    assert usr1 == ChildExit(b"[True, True]", "")
    assert term == ChildExit(b"survived", "")
    assert intr == ChildExit(b"survived", "")
    assert caught == []


async def test_work_sees_the_callers_context(executor: ThreadPoolExecutor) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("the caller's")
    ended = await run_in_child(lambda: var.get().encode(), timeout=30, executor=executor)
    assert ended.report == b"the caller's"


async def test_buffered_output_of_the_parent_is_not_written_twice(
    executor: ThreadPoolExecutor, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest's own stdout writes through; a buffered one, as in production, shows it.
    buffered = io.TextIOWrapper(io.BufferedWriter(io.FileIO(os.dup(1), "w")), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", buffered)
    try:
        print("parent before", end=";")  # sits in the buffer at fork time

        def work() -> bytes:
            print("child", end=";")  # flushed by the child before it leaves
            return b""

        assert (await run_in_child(work, timeout=30, executor=executor)).report == b""
        print("parent after", end=";")
    finally:
        monkeypatch.undo()
        buffered.close()
    assert capfd.readouterr().out == "parent before;child;parent after;"


async def test_each_child_closes_the_pipes_of_the_other_runs(
    executor: ThreadPoolExecutor, tmp_path: Path
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"

    def slow() -> bytes:
        started.touch()
        wait_for_file(release)
        return b"slow"

    # An earlier test's run still ending could free a descriptor number in the snapshot
    # below and have it reused for something the second child inherits: let them end.
    await wait_until(lambda: not isolation._READ_ENDS, message="earlier runs ended")
    first = asyncio.ensure_future(run_in_child(slow, timeout=30, executor=executor))
    await wait_until(started.exists)
    # The parent adds the read end just after the fork: the child may be quicker.
    others = await wait_until(lambda: set(isolation._READ_ENDS), message="the read end")

    def check() -> bytes:
        open_fds = []
        for fd in others:
            try:
                os.fstat(fd)
            except OSError:
                continue
            open_fds.append(fd)
        return repr(open_fds).encode()

    try:
        second = await run_in_child(check, timeout=30, executor=executor)
        assert second == ChildExit(b"[]", "")
        assert not first.done()  # the second run's pipe did not wait for the first child
    finally:
        release.touch()
    assert (await first).report == b"slow"


async def test_twenty_children_at_once_leave_the_loop_free() -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    def nap(i: int) -> Callable[[], bytes]:
        def work() -> bytes:
            time.sleep(1)
            return f"child {i}".encode()

        return work

    beat = asyncio.create_task(heartbeat())
    started = time.monotonic()
    with ThreadPoolExecutor(20, "test-twenty") as pool:
        ended = await asyncio.gather(
            *(run_in_child(nap(i), timeout=30, executor=pool) for i in range(20))
        )
    elapsed = time.monotonic() - started
    stop.set()
    await beat
    assert [e.report for e in ended] == [f"child {i}".encode() for i in range(20)]
    assert elapsed < 10  # one after another would take 20 s
    # The loop kept ticking: a run that blocked it would stop it for a whole second.
    assert len(gaps) > 20 and max(gaps) < 1


# --- cancellation -----------------------------------------------------------------------


async def test_a_cancelled_caller_leaves_the_child_running_and_reaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid_file, release, done_file = tmp_path / "pid", tmp_path / "release", tmp_path / "done"

    def side_effect() -> bytes:
        pid_file.write_text(str(os.getpid()))
        wait_for_file(release)  # the side effect, which a graceful stop must not cut short
        done_file.touch()
        return b"done"

    pool = ThreadPoolExecutor(1)
    caplog.set_level(logging.INFO, logger="lockgate.process.isolation")
    try:
        run = asyncio.ensure_future(run_in_child(side_effect, timeout=30, executor=pool))
        await wait_until(pid_file.exists)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert not done_file.exists()
    finally:
        release.touch()
        await asyncio.to_thread(pool.shutdown, wait=True)  # the thread reaps the child
    assert done_file.exists()
    assert gone(int(pid_file.read_text()))
    assert "abandoned by its caller finished" in caplog.text


async def test_a_run_cancelled_before_its_thread_started_never_forks(tmp_path: Path) -> None:
    marker = tmp_path / "forked"
    release = threading.Event()
    pool = ThreadPoolExecutor(1)
    try:
        busy = pool.submit(release.wait, 30)  # the only thread is taken

        def work() -> bytes:
            marker.touch()
            return b""

        run = asyncio.ensure_future(run_in_child(work, timeout=30, executor=pool))
        await asyncio.sleep(0.05)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        release.set()
        assert busy.result(timeout=30)
    finally:
        release.set()
        await asyncio.to_thread(pool.shutdown, wait=True)
    assert not marker.exists()


# --- lockgate's own locks in the child --------------------------------------------------


async def test_locks_held_by_parent_threads_are_free_in_the_child(
    executor: ThreadPoolExecutor,
) -> None:
    app = App(NOWHERE, namespace="unit")
    parent_client, _ = await app.async_connection()  # a client of the parent's loop
    keeper = app.lease_keeper
    keeper._claims["parent-token"] = object()  # type: ignore[assignment]

    def probe() -> bytes:
        free = app.store._lock.acquire(timeout=2) and keeper._lock.acquire(timeout=2)
        return repr((free, len(keeper._claims), len(app.store._async), keeper._thread)).encode()

    try:
        # Held by this (the loop's) thread while another thread forks.
        with app.store._lock, keeper._lock:
            ended = await run_in_child(probe, timeout=30, executor=executor)
        assert ended == ChildExit(b"(True, 0, 0, None)", "")
        assert keeper._claims == {"parent-token": keeper._claims["parent-token"]}
        assert (await app.async_connection())[0] is parent_client  # the parent's, untouched
    finally:
        keeper._claims.clear()
        await app.aclose()


async def test_the_sync_pool_held_by_a_parent_thread_is_not_waited_on_in_the_child(
    executor: ThreadPoolExecutor,
) -> None:
    """redis-py resets a pool it finds in a new process under the pool's own lock: held by
    a parent thread at fork, that reset would wait for ever. The child gets a new client."""
    app = App(NOWHERE, namespace="unit")
    parent_client, _ = app.sync_connection()
    pool = parent_client.connection_pool

    def probe() -> bytes:
        client, _ = app.sync_connection()  # must not touch the parent's pool
        return repr(client is not parent_client).encode()

    try:
        with pool._lock:  # type: ignore[attr-defined]
            ended = await run_in_child(probe, timeout=10, executor=executor)
        assert ended == ChildExit(b"True", "")
        assert app.sync_connection()[0] is parent_client
    finally:
        app.close()


def test_a_fork_elsewhere_forgets_the_runs_pipes(tmp_path: Path) -> None:
    # Any fork (multiprocessing, a task's own) runs the hook: the pipes of this module's
    # runs are none of its business, and its copy of the lock starts free even when
    # another thread held it at the fork.
    read_end, write_end = os.pipe()
    os.close(write_end)
    with isolation._LOCK:
        isolation._READ_ENDS.add(read_end)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with isolation._LOCK:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    report = tmp_path / "report"
    try:
        assert holding.wait(30)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.fstat(read_end)
                closed = False
            except OSError:
                closed = True
            free = isolation._LOCK.acquire(timeout=1)
            report.write_text(repr((closed, free, isolation._READ_ENDS)))
            os._exit(0)
        wait_until_sync(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid)
    finally:
        release.set()
        holder.join()
        with isolation._LOCK:
            isolation._READ_ENDS.discard(read_end)
        os.close(read_end)
    assert report.read_text() == "(True, True, set())"


async def test_an_abandoned_child_still_meets_its_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid_file = tmp_path / "pid"
    forever = functools.partial(hang_forever, pid_file)

    pool = ThreadPoolExecutor(1)
    try:
        run = asyncio.ensure_future(run_in_child(forever, timeout=0.5, executor=pool))
        await wait_until(pid_file.exists)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    finally:
        await asyncio.to_thread(pool.shutdown, wait=True)
    assert gone(int(pid_file.read_text()))
    assert "ended without a report: ran over its timeout of 0.5s" in caplog.text


async def test_a_failed_fork_raises_and_leaks_no_descriptor(
    executor: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fork() -> int:
        raise BlockingIOError("Resource temporarily unavailable")

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fork", no_fork)
    with pytest.raises(BlockingIOError):
        await run_in_child(lambda: b"", timeout=30, executor=executor)
    assert len(os.listdir("/proc/self/fd")) == before
    assert not isolation._READ_ENDS


def test_a_child_reaped_by_another_waiter(executor: ThreadPoolExecutor) -> None:
    # SIGCHLD ignored: the kernel reaps children itself and waitpid finds none.
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:

        async def main() -> tuple[ChildExit, ...]:
            return tuple(
                await asyncio.gather(
                    run_in_child(lambda: b"reported", timeout=30, executor=executor),
                    run_in_child(lambda: os._exit(3), timeout=30, executor=executor),
                )
            )

        reported, unseen = asyncio.run(main())
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert reported == ChildExit(b"reported", "")
    assert unseen == ChildExit(None, "ended unseen: another waiter reaped it")


def test_a_child_dies_with_its_worker(tmp_path: Path) -> None:
    """A SIGKILLed worker takes its children along: no orphan runs on unsettled."""
    pid_file = tmp_path / "child.pid"
    script = f"""
import asyncio, os, time
from concurrent.futures import ThreadPoolExecutor
from lockgate.process.isolation import run_in_child

def work():
    open({str(pid_file)!r}, "w").write(str(os.getpid()))
    time.sleep(60)
    return b"never"

async def main():
    with ThreadPoolExecutor(1) as pool:
        await run_in_child(work, timeout=None, executor=pool)

asyncio.run(main())
"""
    worker = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        child = int(pid_file.read_text())
        worker.kill()
        worker.wait(timeout=30)
        while _alive(child):
            assert time.monotonic() < deadline, "the child outlived its worker"
            time.sleep(0.01)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie waiting for init to reap it is dead
