"""A job's status, result and cancellation: the store's calls about one job by its id.

Each reads the job's marker (in the partition of its id, then in the others: a job with a
fairness key lives in its key's), then calls its script with the keys of the place the
marker names (every key a script touches arrives in KEYS); the script checks the marker
did not change meanwhile (it answers :data:`MOVED`), else the two steps run again. The
cancel flags a worker reads for its running jobs are here too, and the jobs' progress
(``current_job().set_progress``), kept in the partition of each job's id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lockgate.backend.broker import text
from lockgate.backend.connections import AsyncClient, SyncClient
from lockgate.backend.faults import translated
from lockgate.backend.keys import GROUP, status_shard
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall, SyncScripts
from lockgate.backend.partitions import Layout, home_of, partition_of

# A running job's cancel flag names its take, so a stale one never reaches a later run of
# the id; an hour covers a worker that looks late (it looks every fraction of a second).
CANCEL_FLAG_MS = 3_600_000
MOVED = "moved"  # a job's marker changed between the read and the script: read again
UNKNOWN = "unknown"  # no marker, no record: not in this partition


class JobHost(Protocol):
    """What the job calls use of their store (:class:`lockgate.backend.store.Store`)."""

    url: str
    layout: Layout

    def sync_connection(self) -> tuple[SyncClient, SyncScripts]: ...

    async def async_connection(self) -> tuple[AsyncClient, AsyncScripts]: ...

    def run(
        self, calls: Sequence[ScriptCall], job_ids: Sequence[str] | None = None
    ) -> list[Any]: ...

    async def run_async(
        self, calls: Sequence[ScriptCall], job_ids: Sequence[str] | None = None
    ) -> list[Any]: ...


class Jobs:
    """The calls of one store about single jobs: status, cancellation, cancel flags."""

    def __init__(self, store: JobHost) -> None:
        self._store = store

    def _status_call(self, job_id: str, placed: str, part: int) -> ScriptCall:
        keys = self._store.layout.parts[part]
        names = [keys.job(job_id), keys.result(job_id), keys.statuses(), keys.status(job_id)]
        args: list[Arg] = [GROUP, placed, job_id, status_shard(job_id)]
        return ScriptCall("job_status", [*names, *keys.place_keys(placed)], args)

    def _progress_calls(self, job_ids: Sequence[str]) -> dict[int, list[str]]:
        """The ids of ``job_ids`` by the partition of each id, where its progress is."""
        layout, groups = self._store.layout, dict[int, list[str]]()
        for job_id in job_ids:
            groups.setdefault(partition_of(job_id, layout.partitions), []).append(job_id)
        return groups

    def _progress_read(self, part: int, job_ids: Sequence[str]) -> ScriptCall:
        keys = self._store.layout.parts[part]
        return ScriptCall("progress_read", [keys.progress(i) for i in job_ids], [])

    def _cancel_call(
        self, job_id: str, placed: str, part: int, record: bytes, record_ttl_ms: int
    ) -> ScriptCall:
        keys = self._store.layout.parts[part]
        names = [keys.job(job_id), keys.cancel_flag(job_id), keys.statuses()]
        args: list[Arg] = [
            GROUP, record, record_ttl_ms, CANCEL_FLAG_MS, placed, job_id, status_shard(job_id)
        ]  # fmt: skip
        return ScriptCall("cancel_job", [*names, *keys.place_keys(placed)], args)

    def _search_order(self, job_id: str) -> list[int]:
        """The partitions to look for a job in: its id's first (where a job without a
        fairness key lives), then the others (a keyed job lives in its key's, see
        :func:`~lockgate.backend.partitions.home_of`)."""
        layout = self._store.layout
        first = partition_of(job_id, layout.partitions)
        return [first, *(p for p in range(layout.partitions) if p != first)]

    def _marker(self, job_id: str) -> tuple[str, int]:
        """The job's marker value ('' none) and the partition it is in (the id's when
        none is)."""
        client, _ = self._store.sync_connection()
        order = self._search_order(job_id)
        with translated(self._store.url):
            for part in order:
                placed = client.get(self._store.layout.parts[part].job(job_id))
                if placed is not None:
                    return text(placed), part
        return "", order[0]

    async def _marker_async(self, job_id: str) -> tuple[str, int]:
        client, _ = await self._store.async_connection()
        order = self._search_order(job_id)
        with translated(self._store.url):
            for part in order:
                placed = await client.get(self._store.layout.parts[part].job(job_id))
                if placed is not None:
                    return text(placed), part
        return "", order[0]

    def status(self, job_id: str) -> list[Any]:
        """Where job ``job_id`` is, and its final and result records (see
        ``lua/job_status.lua``); with several partitions, an ended job's records are
        looked for in each until one has them."""
        while True:
            placed, part = self._marker(job_id)
            parts = [part] if placed else self._search_order(job_id)
            progress = self._progress_read(self._search_order(job_id)[0], [job_id])
            for part in parts:
                calls = [self._status_call(job_id, placed, part), progress]
                reply, (kept,) = self._store.run(calls)
                if text(reply[0]) != UNKNOWN:
                    break
            if text(reply[0]) != MOVED:
                return [*reply, kept]

    async def status_async(self, job_id: str) -> list[Any]:
        """Async :meth:`status`."""
        while True:
            placed, part = await self._marker_async(job_id)
            parts = [part] if placed else self._search_order(job_id)
            progress = self._progress_read(self._search_order(job_id)[0], [job_id])
            for part in parts:
                calls = [self._status_call(job_id, placed, part), progress]
                reply, (kept,) = await self._store.run_async(calls)
                if text(reply[0]) != UNKNOWN:
                    break
            if text(reply[0]) != MOVED:
                return [*reply, kept]

    def cancel(self, job_id: str, record: bytes, record_ttl_ms: int) -> str:
        """Cancel job ``job_id``: ``cancelled`` (removed; ``record`` kept as its final
        record), ``running`` (its worker is told) or ``gone`` (see
        ``lua/cancel_job.lua``)."""
        while True:
            placed, part = self._marker(job_id)
            call = self._cancel_call(job_id, placed, part, record, record_ttl_ms)
            if (answer := text(self._store.run([call])[0])) != MOVED:
                return answer

    async def cancel_async(self, job_id: str, record: bytes, record_ttl_ms: int) -> str:
        """Async :meth:`cancel`."""
        while True:
            placed, part = await self._marker_async(job_id)
            call = self._cancel_call(job_id, placed, part, record, record_ttl_ms)
            if (answer := text((await self._store.run_async([call]))[0])) != MOVED:
                return answer

    async def cancel_requests(self, jobs: Sequence[tuple[str, str | None]]) -> list[str]:
        """The cancel flags of running jobs (id and fairness key each: the flag is in the
        job's partition, where its marker is), in one read: per job, the take it names,
        "" when none."""
        layout = self._store.layout
        # One call per partition (a script's keys share one slot), in one round trip.
        groups: dict[int, list[int]] = {}
        for position, (job_id, key) in enumerate(jobs):
            groups.setdefault(home_of(job_id, key, layout.partitions), []).append(position)
        calls = [
            ScriptCall(
                "cancel_flags", [layout.parts[part].cancel_flag(jobs[i][0]) for i in positions], []
            )
            for part, positions in groups.items()
        ]
        found = [""] * len(jobs)
        replies = await self._store.run_async(calls)
        for positions, values in zip(groups.values(), replies, strict=True):
            for position, value in zip(positions, values, strict=True):
                found[position] = text(value)
        return found

    async def cancel_request(self, job_id: str, key: str | None = None) -> str:
        """The cancel flag of one job (of fairness key ``key``): the take it names, ""
        when none."""
        return (await self.cancel_requests([(job_id, key)]))[0]

    async def progress(self, job_ids: Sequence[str]) -> list[Any]:
        """The stored progress of jobs (each the JSON ``[value, note]``, or None when none
        is kept), in one call per partition, all in one round trip."""
        groups = self._progress_calls(job_ids)
        replies = await self._store.run_async(
            [self._progress_read(part, ids) for part, ids in groups.items()]
        )
        found: dict[str, Any] = {}
        for ids, values in zip(groups.values(), replies, strict=True):
            found.update(zip(ids, values, strict=True))
        return [found[job_id] or None for job_id in job_ids]

    async def write_progress(self, values: Mapping[str, bytes], ttl_ms: int) -> None:
        """Write jobs' progress (job id -> the JSON ``[value, note]``), each kept
        ``ttl_ms``, in one call per partition, all in one round trip."""
        groups = self._progress_calls(list(values))
        layout = self._store.layout
        calls = [
            ScriptCall(
                "progress_write",
                [layout.parts[part].progress(i) for i in ids],
                [ttl_ms, *(values[i] for i in ids)],
            )
            for part, ids in groups.items()
        ]
        await self._store.run_async(calls)
