"""The worker registry: which workers serve a namespace right now, and what they did.

Everything here runs on the server's clock (Redis ``TIME``, read by the registry's
scripts), never a worker's or a reader's: one host's clock minutes off must neither hide
the other workers nor lose its counts. Each worker keeps an entry
(:meth:`lockgate.backend.keys.Keys.worker`: its :class:`WorkerInfo` as JSON, ``started_at`` and
``last_heartbeat`` in server time) that expires :data:`EXPIRES_AFTER` seconds after its
last heartbeat, and its name in an index (:meth:`lockgate.backend.keys.Keys.workers`, a sorted
set scored by that expiry in Unix seconds) that readers go through: a name whose entry
expired is skipped, and the heartbeats remove names whose score is :data:`SWEEP_AFTER`
seconds old. A clean stop removes the entry at once; a worker that was killed drops out
when its entry expires.

The worker's helper loop ``registry`` (:meth:`Registry.run`) sends, every
:data:`HEARTBEAT_EVERY` seconds and in one round trip, the heartbeat and the activity
counts its :class:`~lockgate.worker.activity.ActivityRecorder` made since the last one, placed
in the server's minutes (see :mod:`lockgate.worker.activity`). Counts that could not be sent
(Redis down) are kept for the next try. The worker sends what it knows as durations (how
long ago it started, how old each minute's counts are), which its clock's error does not
touch. The scripts (``lua/heartbeat_worker.lua``, ``lua/leave_worker.lua``) call only
commands of the README's ACL list (TIME, SET, DEL, ZADD, ZREM, ZREMRANGEBYSCORE,
PEXPIREAT), so a restricted worker user needs nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lockgate.backend.keys import Keys
from lockgate.backend.lua import Arg, ScriptCall
from lockgate.core.activity import CANDIDATES, KEEP_MINUTES, MINUTE, Batch, Counts
from lockgate.core.logs import get_logger

log = get_logger(__name__)
# Index entries this much past their expiry (server clock) are removed by the next
# heartbeat (a name's entry, which expires by itself, is what says whether it is live).
SWEEP_AFTER = 300.0
JOBS_LISTED = 500  # the running jobs a heartbeat names at most (with their starts)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker, as its last heartbeat described it.

    Attributes:
        name: the worker's name (host, pid and a random suffix).
        host: the host it runs on.
        pid: its process id.
        queues: the queues it serves.
        concurrency: how many jobs it runs at once at most.
        running: how many jobs it was running at its last heartbeat.
        started_at: when it started (UTC, the server's clock).
        last_heartbeat: when it last told the registry it lives (UTC, the server's clock).
        version: its lockgate version.
        jobs: the jobs it was running at its last heartbeat (at most
            :data:`JOBS_LISTED`), each as its id and when its run started (Unix time, the
            worker's clock).
    """

    name: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    running: int
    started_at: datetime
    last_heartbeat: datetime
    version: str
    jobs: tuple[tuple[str, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (times in ISO 8601)."""
        return {
            "name": self.name, "host": self.host, "pid": self.pid,
            "queues": list(self.queues), "concurrency": self.concurrency,
            "running": self.running, "started_at": self.started_at.isoformat(),
            "last_heartbeat": self.last_heartbeat.isoformat(), "version": self.version,
        }  # fmt: skip


def entry_fields(info: WorkerInfo) -> str:
    """A registry entry's value without its times, which the heartbeat script adds on
    the server's clock (see :func:`heartbeat_call`): a JSON object (``jobs`` only while
    it runs some: ``[[job id, start], ...]``, starts in ms of the worker's clock)."""
    fields: dict[str, Any] = {
        "name": info.name, "host": info.host, "pid": info.pid, "queues": list(info.queues),
        "concurrency": info.concurrency, "running": info.running, "version": info.version,
    }  # fmt: skip
    if info.jobs:
        fields["jobs"] = [[job_id, round(started * 1000)] for job_id, started in info.jobs]
    return json.dumps(fields)


def _activity(keys: Keys, batches: Sequence[Batch]) -> tuple[list[str], list[Arg]]:
    """The candidate keys and the arguments of the counts (see ``lua/_activity.lua``)."""
    found: list[str] = []
    args: list[Arg] = [len(batches)]
    for batch in batches:
        found += [keys.activity(batch.first + i) for i in range(CANDIDATES)]
        args += [batch.first, batch.age_ms, len(batch.counters)]
        for name, amount in batch.counters.items():
            args += [name, amount]
    return found, args


KEEP_MS = KEEP_MINUTES * MINUTE * 1000  # an activity minute's key, after the minute ends


def heartbeat_call(
    keys: Keys, info: WorkerInfo, expires: float, batches: Sequence[Batch]
) -> ScriptCall:
    """The heartbeat of ``info`` with ``batches`` of counts (pure). Its entry expires in
    ``expires`` seconds; ``info``'s times (the worker's clock) give only how long ago
    it started."""
    activity_keys, counts = _activity(keys, batches)
    started_ms = max(0, round((info.last_heartbeat - info.started_at).total_seconds() * 1000))
    return ScriptCall(
        "heartbeat_worker", [keys.worker(info.name), keys.workers(), *activity_keys],
        [info.name, entry_fields(info), started_ms, max(1, round(expires * 1000)),
         round(SWEEP_AFTER * 1000), KEEP_MS, *counts],
    )  # fmt: skip


def leave_call(keys: Keys, name: str, batches: Sequence[Batch]) -> ScriptCall:
    """Worker ``name``'s clean stop with its last ``batches`` of counts (pure)."""
    activity_keys, counts = _activity(keys, batches)
    return ScriptCall(
        "leave_worker",
        [keys.worker(name), keys.workers(), *activity_keys],
        [name, KEEP_MS, *counts],
    )


def placed(reply: Any, batches: Sequence[Batch]) -> tuple[int, Counts]:
    """The server's time (ms) in a registry script's reply, and the counts it did not
    place (by the worker's minute): its guess of the server's minute was off."""
    now, *unplaced = (int(item) for item in reply)
    left: Counts = {}
    for number in unplaced:
        batch = batches[number - 1]
        left[batch.minute] = dict(batch.counters)
    return now, left


def decode(value: bytes | str) -> WorkerInfo | None:
    """A registry entry read back; None when it is not one (logged at DEBUG)."""
    try:
        fields = json.loads(value)
        return WorkerInfo(
            name=str(fields["name"]), host=str(fields["host"]), pid=int(fields["pid"]),
            queues=tuple(str(queue) for queue in fields["queues"]),
            concurrency=int(fields["concurrency"]), running=int(fields["running"]),
            started_at=datetime.fromtimestamp(float(fields["started_at"]), UTC),
            last_heartbeat=datetime.fromtimestamp(float(fields["last_heartbeat"]), UTC),
            version=str(fields["version"]),
            jobs=tuple((str(i), float(ms) / 1000) for i, ms in fields.get("jobs", ())),
        )  # fmt: skip
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        log.debug("not a worker registry entry: %r (%r)", value, e)
        return None
