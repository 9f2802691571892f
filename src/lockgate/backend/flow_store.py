"""A flow's records in Redis: staging and committing a flow, reading it, cancelling it,
finishing the queueing a producer left, and the results kept for flows and
``run_step``.

A flow's keys live in its partition (``Job.home`` of its jobs, so a settle reaches its
barriers in one call; see ``lua/_flow.lua``). An enqueue stages the flow's jobs in chunks
under a token of its own (``lua/flow_stage.lua``: each call a few milliseconds of server
time at most), then one commit call makes the stage the flow (``lua/flow_commit.lua``): a
flow is there whole or not at all, and a second enqueue of the same id adds nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import msgspec

from lockgate.backend.broker import Broker, Outgoing, text
from lockgate.backend.faults import translated
from lockgate.backend.job_store import JobHost
from lockgate.backend.keys import Keys
from lockgate.backend.lua import Arg, ScriptCall
from lockgate.core.codec import FLOW_HOME
from lockgate.core.sansio import drive, drive_async
from lockgate.errors import BrokerError

# Jobs staged per flow_stage call: about 5 us of server time each, so a call holds the
# server for a few milliseconds at most.
STAGE_CHUNK = 400
# First jobs queued per commit or release call: each is a whole enqueue (about 10 us).
RELEASE_CHUNK = 300
# A stage outlives a producer that died before its commit this long (then expires).
STAGE_TTL_MS = 3_600_000


class FlowHost(JobHost, Protocol):
    """What the flow calls use of their store (:class:`lockgate.backend.store.Store`):
    what the job calls use, and its broker and wake-ups."""

    @property
    def broker(self) -> Broker: ...

    def wake_idle(self, counts: Mapping[str, int]) -> None: ...

    async def wake_idle_async(self, counts: Mapping[str, int]) -> None: ...


@dataclass(frozen=True, slots=True)
class _Run:
    """A step of an enqueue: run these calls (one round trip)."""

    calls: list[ScriptCall]


@dataclass(frozen=True, slots=True)
class _Wake:
    """A step of an enqueue: wake idle workers (per queue, how many)."""

    counts: Mapping[str, int]


_Do = _Run | _Wake


@dataclass(frozen=True, slots=True)
class StagedJob:
    """One job of a flow on its way in.

    Attributes:
        outgoing: the job, encoded.
        parents: its parents' positions and tasks, in declaration order.
        children: the positions of the jobs that wait for it.
    """

    outgoing: Outgoing
    parents: Sequence[tuple[int, str]]
    children: Sequence[int]


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """What Redis holds of a flow (None from :meth:`Flows.read` when it holds nothing).

    Attributes:
        total: how many jobs it has.
        tasks: each job's task, by position.
        shape: its shape (JSON, see :func:`lockgate.core.flows.assemble`).
        cancelled: whether it was cancelled.
        done: the positions of the jobs that succeeded.
        dead: the positions of the jobs dead-lettered (and not since replayed and done).
        held: the positions of the jobs not yet queued (waiting for their parents).
        parents: each job's parents' positions.
        created: when it was committed (Unix time, the server's clock).
    """

    total: int
    tasks: list[str]
    shape: bytes
    cancelled: bool
    done: set[int]
    dead: set[int]
    held: set[int]
    parents: dict[int, list[int]]
    created: float


@dataclass(frozen=True, slots=True)
class FlowSummary:
    """How far a flow is, in one cheap read: no record (``total`` 0), or its counts."""

    total: int = 0
    done: int = 0
    dead: int = 0
    cancelled: bool = False


def _positions(members: Any) -> set[int]:
    return {int(text(m)) for m in members}


class Flows:
    """The calls of one store about flows."""

    def __init__(self, store: FlowHost) -> None:
        self._store = store

    def keys(self, flow_id: str) -> Keys:
        """The keys of the partition flow ``flow_id`` lives in."""
        return self._store.layout.for_job("", FLOW_HOME + flow_id)

    # enqueue

    def enqueue_calls(
        self, flow_id: str, jobs: Sequence[StagedJob], shape: bytes, tasks: bytes, ttl_ms: int
    ) -> tuple[list[ScriptCall], ScriptCall]:
        """The stage calls and the commit call of a flow (pure)."""
        keys = self.keys(flow_id)
        token = uuid.uuid4().hex
        stage = keys.flow_stage(flow_id, token)
        broker = self._store.broker
        calls = []
        for start in range(0, len(jobs), STAGE_CHUNK):
            args: list[Arg] = [STAGE_TTL_MS, start]
            for position in range(start, min(start + STAGE_CHUNK, len(jobs))):
                job = jobs[position]
                (call,) = broker.plan_enqueue([job.outgoing]).calls
                held = msgspec.msgpack.encode([call.script, call.keys, _texts(call.args)])
                args += [
                    position, held, len(job.parents),
                    msgspec.json.encode(list(job.parents)) if job.parents else "",
                    " ".join(map(str, job.children)),
                ]  # fmt: skip
            calls.append(ScriptCall("flow_stage", [keys.flow(flow_id), stage], args))
        commit = ScriptCall(
            "flow_commit",
            [keys.flow(flow_id), stage, keys.flows_releasing()],
            [flow_id, len(jobs), ttl_ms, RELEASE_CHUNK, shape, token, tasks],
        )
        return calls, commit

    def enqueue(
        self,
        flow_id: str,
        calls: Sequence[ScriptCall],
        commit: ScriptCall,
        job_ids: list[str],
        first: Mapping[str, int],
    ) -> bool:
        """Stage and commit a flow, then queue its first jobs (``first``: how many per
        queue, to wake idle workers of a partitioned namespace); False when a flow with
        this id existed (nothing is added).

        Raises:
            OutcomeUnknown: no reply after a call was sent (enqueue again: it is safe).
            BrokerError: Redis refused, or could not be reached.
        """
        steps = self._enqueue_steps(flow_id, calls, commit, first)
        return drive(steps, lambda do: self._do(do, job_ids))

    async def enqueue_async(
        self,
        flow_id: str,
        calls: Sequence[ScriptCall],
        commit: ScriptCall,
        job_ids: list[str],
        first: Mapping[str, int],
    ) -> bool:
        """Async :meth:`enqueue`."""
        steps = self._enqueue_steps(flow_id, calls, commit, first)
        return await drive_async(steps, lambda do: self._do_async(do, job_ids))

    def _enqueue_steps(
        self,
        flow_id: str,
        calls: Sequence[ScriptCall],
        commit: ScriptCall,
        first: Mapping[str, int],
    ) -> Generator[_Do, Any, bool]:
        """:meth:`enqueue`, sans I/O: it yields the calls to run and the wake-ups."""
        staged = yield _Run(list(calls))
        if not all(int(reply) for reply in staged):
            return False
        (committed,) = yield _Run([commit])
        created, left = (int(v) for v in committed)
        while left > 0:
            (released,) = yield _Run([self._release_call(flow_id)])
            left = int(released)
        if created:
            yield _Wake(first)
        return _committed(created, left)

    def _do(self, do: _Do, job_ids: list[str]) -> Any:
        if isinstance(do, _Run):
            return self._store.run(do.calls, job_ids)
        return self._store.wake_idle(do.counts)

    async def _do_async(self, do: _Do, job_ids: list[str]) -> Any:
        if isinstance(do, _Run):
            return await self._store.run_async(do.calls, job_ids)
        return await self._store.wake_idle_async(do.counts)

    def _release_call(self, flow_id: str) -> ScriptCall:
        keys = self.keys(flow_id)
        return ScriptCall(
            "flow_release", [keys.flow(flow_id), keys.flows_releasing()], [flow_id, RELEASE_CHUNK]
        )

    async def finish_releases(self) -> int:
        """Queue the first jobs of flows whose producer stopped before it had queued them
        all (listed in the releasing sets, at most 10 per partition per call); how many
        flows it finished. A producer still at it loses nothing: both take the jobs
        left by LPOP, each once."""
        client, _ = await self._store.async_connection()
        finished = 0
        for keys in self._store.layout.parts:
            with translated(self._store.url):
                late = await client.zrange(keys.flows_releasing(), 0, 9)
            for flow_id in [text(member) for member in cast(list[bytes], late)]:
                while int((await self._store.run_async([self._release_call(flow_id)]))[0]) > 0:
                    pass
                finished += 1
        return finished

    # reading

    def read(self, flow_id: str) -> FlowRecord | None:
        """All that Redis holds of a flow, in one round trip; None when nothing."""
        client, _ = self._store.sync_connection()
        with translated(self._store.url), client.pipeline(transaction=False) as pipe:
            _read_commands(pipe, self.keys(flow_id), flow_id)
            return _record(pipe.execute())

    async def read_async(self, flow_id: str) -> FlowRecord | None:
        """Async :meth:`read`."""
        client, _ = await self._store.async_connection()
        with translated(self._store.url):
            async with client.pipeline(transaction=False) as pipe:
                _read_commands(pipe, self.keys(flow_id), flow_id)
                return _record(await pipe.execute())

    def summary(self, flow_id: str) -> FlowSummary:
        """How far a flow is (four small reads in one round trip)."""
        client, _ = self._store.sync_connection()
        with translated(self._store.url), client.pipeline(transaction=False) as pipe:
            _summary_commands(pipe, self.keys(flow_id), flow_id)
            return _summary(pipe.execute())

    async def summary_async(self, flow_id: str) -> FlowSummary:
        """Async :meth:`summary`."""
        client, _ = await self._store.async_connection()
        with translated(self._store.url):
            async with client.pipeline(transaction=False) as pipe:
                _summary_commands(pipe, self.keys(flow_id), flow_id)
                return _summary(await pipe.execute())

    def results(self, flow_id: str, positions: Sequence[int | str]) -> list[bytes | None]:
        """The kept results (JSON) of the jobs at ``positions`` (``e<position>``: a dead
        job's result record); None where none is."""
        if not positions:
            return []
        client, _ = self._store.sync_connection()
        base = self.keys(flow_id).flow(flow_id)
        with translated(self._store.url):
            return cast(list[bytes | None], client.hmget(f"{base}:results", list(positions)))

    async def results_async(
        self, flow_id: str, positions: Sequence[int | str]
    ) -> list[bytes | None]:
        """Async :meth:`results`."""
        if not positions:
            return []
        client, _ = await self._store.async_connection()
        base = self.keys(flow_id).flow(flow_id)
        with translated(self._store.url):
            found = await client.hmget(f"{base}:results", list(positions))
        return cast(list[bytes | None], found)

    def parents(self, flow_id: str, position: int) -> list[tuple[int, str]]:
        """The parents (position, task) of the job at ``position``, in declaration order."""
        client, _ = self._store.sync_connection()
        base = self.keys(flow_id).flow(flow_id)
        with translated(self._store.url):
            data = client.hget(f"{base}:parents", str(position))
        return _parents(data)

    async def parents_async(self, flow_id: str, position: int) -> list[tuple[int, str]]:
        """Async :meth:`parents`."""
        client, _ = await self._store.async_connection()
        base = self.keys(flow_id).flow(flow_id)
        with translated(self._store.url):
            data = await client.hget(f"{base}:parents", str(position))
        return _parents(data)

    # trace contexts (lockgate.otel): a flow job's run for the runs that wait for it

    async def record_trace_async(
        self, flow_id: str, position: int, traceparent: str, ttl_ms: int
    ) -> None:
        """Keep the trace context of the run of the job at ``position`` for ``ttl_ms``
        (renewed by each), in a key of its own: links are best effort, never the flow's."""
        client, _ = await self._store.async_connection()
        key = self.keys(flow_id).flow_traces(flow_id)
        with translated(self._store.url):
            async with client.pipeline(transaction=False) as pipe:
                pipe.hset(key, str(position), traceparent)
                pipe.pexpire(key, ttl_ms)
                await pipe.execute()

    async def traces_async(self, flow_id: str, positions: Sequence[int]) -> list[bytes | None]:
        """The trace contexts kept by :meth:`record_trace_async`; None where none is."""
        if not positions:
            return []
        client, _ = await self._store.async_connection()
        key = self.keys(flow_id).flow_traces(flow_id)
        with translated(self._store.url):
            found = await client.hmget(key, [str(p) for p in positions])
        return cast(list[bytes | None], found)

    # cancelling

    def cancel_call(self, flow_id: str) -> ScriptCall:
        """The call that drops a flow's held jobs and marks it cancelled (pure)."""
        keys = self.keys(flow_id)
        return ScriptCall("flow_cancel", [keys.flow(flow_id), keys.flows_releasing()], [flow_id])

    # run_step's results

    def step_result(self, job_id: str, claim_name: str) -> bytes | None:
        """The result a ``run_step`` stored under its claim's name, None when none."""
        client, _ = self._store.sync_connection()
        with translated(self._store.url):
            return cast(bytes | None, client.get(self._step_key(job_id, claim_name)))

    async def step_result_async(self, job_id: str, claim_name: str) -> bytes | None:
        """Async :meth:`step_result`."""
        client, _ = await self._store.async_connection()
        with translated(self._store.url):
            return cast(bytes | None, await client.get(self._step_key(job_id, claim_name)))

    def keep_step_result(
        self, job_id: str, claim_name: str, data: bytes, ttl_ms: int
    ) -> bytes | None:
        """Store a ``run_step`` result for ``ttl_ms`` unless one is stored (a run that
        lost its claim, paused past its lease, must not replace what the run that took
        over stored and went on with): None when this one was stored, else the stored one
        (``SET NX GET``)."""
        client, _ = self._store.sync_connection()
        with translated(self._store.url):
            kept = client.set(
                self._step_key(job_id, claim_name), data, px=ttl_ms, nx=True, get=True
            )
        return cast(bytes | None, kept)

    async def keep_step_result_async(
        self, job_id: str, claim_name: str, data: bytes, ttl_ms: int
    ) -> bytes | None:
        """Async :meth:`keep_step_result`."""
        client, _ = await self._store.async_connection()
        key = self._step_key(job_id, claim_name)
        with translated(self._store.url):
            kept = await client.set(key, data, px=ttl_ms, nx=True, get=True)
        return cast(bytes | None, kept)

    def _step_key(self, job_id: str, claim_name: str) -> str:
        return self._store.layout.for_job(job_id).step_result(claim_name)


def _texts(args: Sequence[Arg]) -> list[str]:
    """Script arguments as text, as ``cmsgpack`` in Redis reads them (it has no binary
    type; an encoded job is JSON, UTF-8)."""
    return [a.decode() if isinstance(a, bytes) else str(a) for a in args]


def _committed(created: int, left: int) -> bool:
    if left < 0:
        raise BrokerError("the flow's stage expired before its commit: enqueue it again")
    return bool(created)


def _parents(data: bytes | str | None) -> list[tuple[int, str]]:
    if not data:
        return []
    return [(int(p), str(t)) for p, t in msgspec.json.decode(data)]


def _read_commands(pipe: Any, keys: Keys, flow_id: str) -> None:
    base = keys.flow(flow_id)
    pipe.hgetall(base)
    pipe.smembers(f"{base}:done")
    pipe.smembers(f"{base}:dead")
    pipe.hkeys(f"{base}:held")
    pipe.hgetall(f"{base}:parents")


def _record(replies: Sequence[Any]) -> FlowRecord | None:
    meta, done, dead, held, parents = replies
    if not meta:
        return None
    fields = {text(k): v for k, v in meta.items()}
    return FlowRecord(
        total=int(fields["total"]),
        tasks=[str(t) for t in msgspec.json.decode(fields.get("tasks", b"[]"))],
        shape=bytes(fields.get("shape", b"0")),
        cancelled=fields.get("cancelled") is not None,
        done=_positions(done),
        dead=_positions(dead),
        held=_positions(held),
        parents={int(text(p)): [q for q, _ in _parents(v)] for p, v in parents.items()},
        created=int(fields.get("created", 0)) / 1000,
    )


def _summary_commands(pipe: Any, keys: Keys, flow_id: str) -> None:
    base = keys.flow(flow_id)
    pipe.hmget(base, ["total", "cancelled"])
    pipe.scard(f"{base}:done")
    pipe.scard(f"{base}:dead")


def _summary(replies: Sequence[Any]) -> FlowSummary:
    (total, cancelled), done, dead = replies
    if total is None:
        return FlowSummary()
    return FlowSummary(int(total), int(done), int(dead), cancelled is not None)
