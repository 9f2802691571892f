"""Waiting for a job's result (``App.wait_result``, ``EnqueueResult.result`` and their
async forms), written once, sans I/O (see :mod:`lockgate.core.sansio`).

A wait that times out says so; when no live worker serves the job's queue (none is
running, or none was started with that queue: ``--queues``), it says that too, since
then the job would wait for ever, whatever the timeout. The live workers are read from
the worker registry (:mod:`lockgate.backend.registry_store`), once, at the timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

from lockgate.backend.registry import WorkerInfo
from lockgate.backend.registry_store import RegistryStore
from lockgate.core.sansio import drive, drive_async
from lockgate.core.status import JobInfo, Poll, answer, settled
from lockgate.errors import LockgateError

Step = tuple[Any, ...]  # what to do: "job" (job_id), "sleep" (seconds) or "workers" ()


class WaitStore(Protocol):
    """What a wait uses of the App's store."""

    @property
    def registry(self) -> RegistryStore: ...


class Waiter(Protocol):
    """What a wait uses of the App (:class:`lockgate.App`)."""

    @property
    def store(self) -> WaitStore: ...

    def job(self, job_id: str) -> JobInfo: ...

    async def job_async(self, job_id: str) -> JobInfo: ...


def wait_result(app: Waiter, job_id: str, timeout: float | None) -> Any:
    """Wait for job ``job_id`` to end and return its result.

    Raises:
        TimeoutError: it did not end within ``timeout`` seconds (the message says when
            no live worker serves its queue).
        JobFailed: it was dead-lettered.
        JobCancelled: it was cancelled, or expired.
        ResultUnavailable: it is unknown, or it ended done and no result is kept.
    """
    calls: dict[str, Callable[..., Any]] = {
        "job": app.job, "sleep": time.sleep, "workers": app.store.registry.live_workers_sync,
    }  # fmt: skip
    return drive(_wait_steps(job_id, timeout), lambda step: calls[step[0]](*step[1:]))


async def wait_result_async(app: Waiter, job_id: str, timeout: float | None) -> Any:
    """Async :func:`wait_result`."""
    calls: dict[str, Callable[..., Any]] = {
        "job": app.job_async, "sleep": asyncio.sleep, "workers": app.store.registry.live_workers,
    }  # fmt: skip

    async def do(step: Step) -> Any:
        return await calls[step[0]](*step[1:])

    return await drive_async(_wait_steps(job_id, timeout), do)


def _wait_steps(job_id: str, timeout: float | None) -> Generator[Step, Any, Any]:
    poll = Poll(timeout, job_id)
    while not settled(info := (yield ("job", job_id))):
        try:
            pause = poll.next_wait()
        except TimeoutError as e:
            workers: list[WorkerInfo] | None = None
            if info.queue:
                try:
                    workers = yield ("workers",)
                except LockgateError:
                    pass  # the registry cannot be read: the timeout alone is what is known
            raise TimeoutError(f"{e}{unserved(info.queue, workers)}") from None
        yield ("sleep", pause)
    return answer(info)


def unserved(queue: str, workers: Sequence[WorkerInfo] | None) -> str:
    """What a timeout's message adds about ``queue`` (pure): that no live worker serves
    it, or nothing (some worker does, or the workers are not known)."""
    if workers is None or not queue or any(queue in info.queues for info in workers):
        return ""
    if workers:
        served = sorted({name for info in workers for name in info.queues})
        why = f"the live workers serve {', '.join(served)}"
    else:
        why = "no worker is running"
    return f": no live worker serves its queue {queue!r} ({why})"
