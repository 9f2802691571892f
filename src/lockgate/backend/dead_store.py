"""The dead-letter streams' Redis calls: one stream per partition, read as one.

A one-partition namespace has one dead-letter stream and its letters keep their stream
entry ids. A partitioned one has a stream in each partition (a dead job's settle writes
its letter where the job lived, atomically with the ack) and names a letter
``<partition>/<entry id>``; a listing merges the partitions oldest first.

A replay deletes a letter and enqueues its job in one script call that does nothing when
the letter is gone (:meth:`DeadLetters.replay`): the letter lives in its job's partition,
with the job's stream and marker, so one script reaches both.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from lockgate.backend.broker import Broker, Delivery, Outgoing, batches, text
from lockgate.backend.connections import SyncClient
from lockgate.backend.faults import translated
from lockgate.backend.lua import ScriptCall, ScriptName, SyncScripts
from lockgate.backend.partitions import Layout
from lockgate.core.outcome import ErrorInfo

# Dead letters one purge call deletes: milliseconds of work, so other clients barely wait.
PURGE_CHUNK = 1000
# The replay script of each backend's enqueue script: that enqueue, guarded by the letter.
REPLAY_SCRIPTS: Mapping[ScriptName, ScriptName] = {
    "enqueue_stream": "dlq_replay_stream",
    "enqueue_sorted": "dlq_replay_sorted",
}
ENTRY_ID = re.compile(r"\d+(-\d+)?")
GONE = b"gone"  # a replay script's reply when the letter was not there
ReplayOutcome = Literal["enqueued", "taken", "gone", "elsewhere"]


def _order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair (milliseconds, sequence)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


def record(
    delivery: Delivery, reason: str, error: ErrorInfo | None = None
) -> dict[str, str | bytes]:
    """The fields of a dead letter for ``delivery`` (pure)."""
    job = delivery.job
    fields: dict[str, str | bytes] = {
        "job_id": job.id if job else delivery.job_id,
        "task": job.task if job else "",
        "reason": reason,
        "error_type": error.type if error else "",
        "error": error.message if error else (delivery.error or ""),
        "traceback": error.traceback if error else "",
        "attempt": str(job.attempt if job else 0),
        "deliveries": str(delivery.deliveries),
        "queue": delivery.queue,
        "level": job.level if job else "",
        "origin": delivery.source,
        "entry": delivery.ref,
        "enqueued_at": f"{job.enqueued:.3f}" if job else "",
        "failed_at": f"{time.time():.3f}",
    }
    fields["job"] = delivery.raw if delivery.raw is not None else b""
    return fields


class DeadHost(Protocol):
    """What the dead-letter calls use of their store (:class:`lockgate.backend.store.Store`)."""

    url: str
    layout: Layout
    broker: Broker

    def sync_connection(self) -> tuple[SyncClient, SyncScripts]: ...

    def run(
        self, calls: Sequence[ScriptCall], job_ids: Sequence[str] | None = None
    ) -> list[Any]: ...

    def wake_idle(self, counts: Mapping[str, int]) -> None: ...


class DeadLetters:
    """The dead-letter calls of one store (through its sync client)."""

    def __init__(self, store: DeadHost) -> None:
        self._store = store

    def trim_args(self, max_len: int, max_age_ms: int) -> list[int]:
        """ARGV of the scripts that trim the dead-letter streams (pure): ``[max entries,
        max age in ms]``, the entries shared by the partitions' streams; 0 means no
        limit."""
        partitions = self._store.layout.partitions
        return [-(-max_len // partitions), max_age_ms]  # rounded up; 0 stays 0

    def _streams(self) -> list[str]:
        return [keys.dead() for keys in self._store.layout.parts]

    def _place(self, letter_id: str) -> tuple[str, str, str] | None:
        """(stream, entry id, prefix of the letter id) of a letter id, None if malformed
        (an entry id that is no stream id too: a script given one would fail whole)."""
        streams = self._streams()
        if len(streams) == 1:
            part, entry_id, prefix = "0", letter_id, ""
        else:
            part, _, entry_id = letter_id.partition("/")
            prefix = f"{part}/"
        if not (part.isascii() and part.isdigit()) or int(part) >= len(streams):
            return None
        if not ENTRY_ID.fullmatch(entry_id):
            return None
        return streams[int(part)], entry_id, prefix

    def entries(self, count: int = 1000) -> list[Any]:
        """The oldest ``count`` dead letters, oldest first: (letter id, fields) pairs."""
        client, _ = self._store.sync_connection()
        streams = self._streams()
        with translated(self._store.url):
            found: list[list[Any]] = [
                list(client.xrange(stream, count=count) or []) for stream in streams
            ]
        if len(streams) == 1:
            return found[0]
        named = [
            [(f"{part}/{text(entry_id)}", fields) for entry_id, fields in rows]
            for part, rows in enumerate(found)
        ]
        merged = heapq.merge(*named, key=lambda row: _order(row[0].partition("/")[2]))
        return list(merged)[:count]

    def entry(self, letter_id: str) -> list[Any]:
        """The dead letter ``letter_id`` as a one-item list, or an empty one."""
        place = self._place(letter_id)
        if place is None:
            return []
        stream, entry_id, prefix = place
        client, _ = self._store.sync_connection()
        with translated(self._store.url):
            rows: list[Any] = list(client.xrange(stream, min=entry_id, max=entry_id, count=1) or [])
        return [(prefix + text(found), fields) for found, fields in rows]

    def delete(self, letter_id: str) -> int:
        """Delete one dead letter; 1 when it was there."""
        place = self._place(letter_id)
        if place is None:
            return 0
        client, _ = self._store.sync_connection()
        with translated(self._store.url):
            return int(client.xdel(place[0], place[1]))

    def replay(self, letters: Sequence[tuple[str, Outgoing]]) -> list[ReplayOutcome]:
        """Replay dead letters: each one, if it is still there, is deleted and its job
        enqueued in one script call; if it is gone, nothing happens (so two replays of
        one letter never enqueue its job twice). Calls go in round trips of a bounded
        number of letters; in a partitioned namespace, idle workers are woken afterwards
        as an enqueue wakes them.

        Args:
            letters: (letter id, the job to enqueue for it, encoded) pairs; the jobs are
                enqueued now (no delay, no once-only key).

        Returns:
            Per letter, in order: ``enqueued`` (the letter deleted, its job added by this
            call), ``taken`` (a job with its id is queued or running: the letter stays),
            ``gone`` (no such letter: replayed or removed by someone else; nothing done)
            or ``elsewhere`` (the letter is not in its job's partition, which one script
            cannot reach with the job's keys: nothing done).

        Raises:
            ConnectionFailed: Redis cannot be reached.
        """
        outcomes: list[ReplayOutcome] = ["gone"] * len(letters)
        calls: list[ScriptCall] = []
        called: list[int] = []  # the position of each call's letter
        for position, (letter_id, outgoing) in enumerate(letters):
            place = self._place(letter_id)
            if place is None:
                continue  # not a letter id of this namespace: no such letter
            stream, entry_id, _ = place
            if self._store.layout.for_job(outgoing.job.id, outgoing.job.home).dead() != stream:
                outcomes[position] = "elsewhere"
                continue
            (enqueue,) = self._store.broker.plan_enqueue([outgoing]).calls
            calls.append(ScriptCall(
                REPLAY_SCRIPTS[enqueue.script], [stream, *enqueue.keys],
                [entry_id, *enqueue.args],
            ))  # fmt: skip
            called.append(position)
        replies: list[Any] = []
        for batch in batches(len(calls)):
            replies += self._store.run(calls[batch.start : batch.stop])
        added: dict[str, int] = {}
        for position, reply in zip(called, replies, strict=True):
            if reply == GONE:
                continue
            created = reply[0] != 0
            outcomes[position] = "enqueued" if created else "taken"
            if created:
                queue = letters[position][1].job.queue
                added[queue] = added.get(queue, 0) + 1
        self._store.wake_idle(added)
        return outcomes

    def count(self) -> int:
        """How many dead letters there are."""
        client, _ = self._store.sync_connection()
        with translated(self._store.url):
            return sum(int(client.xlen(stream)) for stream in self._streams())

    def trim(self, max_len: int, max_age_ms: int) -> int:
        """Trim dead letters to ``max_len`` entries per stream and ``max_age_ms`` (0: no
        limit), a bounded amount per script call; how many were removed."""
        total = 0
        for stream in self._streams():
            call = ScriptCall("dlq_trim", [stream], [max_len, max_age_ms])
            while removed := int(self._store.run([call])[0]):
                total += removed
        return total

    def purge(self) -> int:
        """Delete every dead letter there is when the purge starts, :data:`PURGE_CHUNK` per
        atomic call (never one DEL that blocks Redis); how many were deleted."""
        client, _ = self._store.sync_connection()
        total = 0
        for stream in self._streams():
            with translated(self._store.url):
                newest: list[Any] = client.xrevrange(stream, count=1) or []
            if not newest:
                continue
            call = ScriptCall("dlq_purge", [stream], [PURGE_CHUNK, text(newest[0][0])])
            while True:
                deleted = int(self._store.run([call])[0])
                total += deleted
                if deleted < PURGE_CHUNK:
                    break
        return total
