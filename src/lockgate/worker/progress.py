"""The worker's progress writer: what its runs report with ``current_job().set_progress``.

A report only records the job's latest value on the writer's board
(:class:`lockgate.core.progress.ProgressBoard`); this loop, one of the worker's supervised
helpers, takes what changed every :data:`~lockgate.core.progress.FLUSH_EVERY` seconds
and writes it in one call per partition, all in one round trip. A write that fails puts
its values back (unless newer ones came) and raises: the worker logs it and runs the loop
again. It writes what is left once more when the worker stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from lockgate.core.progress import (
    FLUSH_EVERY,
    ProgressBoard,
    encode_progress,
    progress_ttl_ms,
)


class ProgressStore(Protocol):
    """Where progress goes (:class:`lockgate.backend.job_store.Jobs`)."""

    async def write_progress(self, values: Mapping[str, bytes], ttl_ms: int) -> None: ...


class ProgressWriter:
    """Writes the progress a worker's runs record (see the module).

    Args:
        store: where to write.
        status_ttl_ms: how long the App keeps an ended job's status, in ms.

    Attributes:
        board: where the runs record (``JobContext.progress``).
        written: progress values written so far (one per job and flush).
    """

    def __init__(self, store: ProgressStore, status_ttl_ms: int) -> None:
        self.board = ProgressBoard()
        self.written = 0
        self._store = store
        self._ttl_ms = progress_ttl_ms(status_ttl_ms)

    async def flush(self) -> int:
        """Write what was recorded since the last flush; how many jobs' values.

        Raises:
            BrokerError: the write failed (the values wait for the next flush).
        """
        pending = self.board.take()
        if not pending:
            return 0
        try:
            values = {job_id: encode_progress(progress) for job_id, progress in pending.items()}
            await self._store.write_progress(values, self._ttl_ms)
        except BaseException:
            self.board.put_back(pending)
            raise
        self.written += len(pending)
        return len(pending)

    async def run(self, closing: asyncio.Event) -> None:
        """Flush every ``FLUSH_EVERY`` seconds until ``closing`` is set, then once more."""
        while not closing.is_set():
            await self.flush()
            await asyncio.sleep(FLUSH_EVERY)
        await self.flush()
