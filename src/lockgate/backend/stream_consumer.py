"""One worker's side of the streams backend: its reads, waits, settles, heartbeats
and reclaims on the streams of one partition (:mod:`lockgate.backend.partitioned`
reads several)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.typing import KeyT, StreamIdT

from lockgate.backend.broker import (
    NOT_CLAIMED,
    Delivery,
    Liveness,
    ReadClaim,
    ReadClaims,
    ReadResult,
    Settlement,
    by_source,
    read_claim_args,
    text,
)
from lockgate.backend.connections import AsyncClient, block_ms
from lockgate.backend.faults import translated
from lockgate.backend.keys import GROUP, Keys
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall
from lockgate.backend.settling import STREAM_DONE, compact_ending, settle_async
from lockgate.core import codec
from lockgate.core.codec import Job
from lockgate.core.config import Levels
from lockgate.errors import SerializationError

JOB_FIELD = b"job"


def decode_entry(fields: Sequence[bytes]) -> tuple[Job | None, str | None, str, bytes | None]:
    """Decode a stream entry's flat field list: (job, error, job id for logs, raw job)."""
    values = dict(zip(fields[::2], fields[1::2], strict=False))
    data = values.get(JOB_FIELD)
    if data is None:
        names = ", ".join(text(name) for name in values) or "none"
        return None, f"entry has no 'job' field (fields: {names})", "?", None
    try:
        job = codec.decode(data)
    except SerializationError as e:
        return None, str(e), "?", data
    return job, None, job.id, data


@dataclass(frozen=True, slots=True)
class Read:
    """A read call's layout (stream, queue, level) and its claims' token prefix: what
    :meth:`StreamConsumer.parse_read` needs of it."""

    layout: Sequence[tuple[str, str, int]]
    token: str


class StreamConsumer:
    """One worker's reads, waits, settles, heartbeats and reclaims on its streams (of one
    partition: :mod:`lockgate.backend.partitioned` reads several)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        url: str,
        keys: Keys,
        levels: Levels,
        queues: Sequence[str],
        consumer: str,
        claims: ReadClaims | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self._client = client
        self._claims = claims
        self._liveness = liveness or Liveness.of(30.0)
        self._scripts = AsyncScripts(client)
        self._url = url
        self._keys = keys
        self._levels = levels
        self._queues = list(queues)
        self._consumer = consumer
        self._turn = 0
        self.woken = 0
        self._last_ids: dict[KeyT, StreamIdT] = {}
        self._reclaim_turn = 0
        self._places = {
            keys.stream(queue, level): (queue, index)
            for index, level in enumerate(levels.names)
            for queue in queues
        }
        # Each stream's delivery stream for its keyed jobs (see Keys.fair_stream), both ways.
        self._fair_of = {
            keys.stream(queue, level): keys.fair_stream(queue, level)
            for level in levels.names
            for queue in queues
        }
        self._fair = {fair: stream for stream, fair in self._fair_of.items()}

    def _layout(self) -> list[tuple[str, str, int]]:
        """(stream, queue, level index), highest level first; queues rotate per read."""
        shift = self._turn % len(self._queues)
        self._turn += 1
        queues = self._queues[shift:] + self._queues[:shift]
        return [
            (self._keys.stream(queue, level), queue, index)
            for index, level in enumerate(self._levels.names)
            for queue in queues
        ]

    def _place(self, stream: str) -> tuple[str, int]:
        """The queue and level index of a stream or a delivery stream of this consumer."""
        return self._places[self._fair.get(stream, stream)]

    def home(self, stream: str) -> str:
        """The stream whose jobs ``stream`` delivers: itself, or the level stream of a
        delivery stream of keyed jobs."""
        return self._fair.get(stream, stream)

    def _delivery(self, stream: str, entry_id: bytes, fields: Sequence[bytes]) -> Delivery:
        queue, level = self._place(stream)
        job, error, job_id, raw = decode_entry(fields)
        return Delivery(queue, level, stream, text(entry_id), job, error, job_id, raw)

    async def read(
        self, free: int, quotas: Sequence[int], running: Sequence[str] = ()
    ) -> ReadResult:
        layout = self._layout()
        call, token = self._read_call(layout, free, quotas, [i for _, _, i in layout])
        with translated(self._url):
            reply = await self._scripts.run(call)
        return self.parse_read(reply, layout, token)

    def counted_read_call(self, counts: Sequence[tuple[str, int]]) -> tuple[ScriptCall, Read]:
        """A read of exactly ``counts`` (stream, jobs) of this partition, highest level
        first (a partitioned consumer's plan): each stream is given as a level of its own
        whose quota is its count, so the script's fill pass has nothing left to fill."""
        layout = [(stream, *self._places[stream]) for stream, _ in counts]
        quotas = [count for _, count in counts]
        call, token = self._read_call(layout, sum(quotas), quotas, list(range(len(layout))))
        return call, Read(layout, token)

    def peek_call(self) -> ScriptCall:
        """The call that moves this partition's due delayed jobs and counts the jobs waiting
        in each stream of :attr:`streams` (see ``lua/peek_stream.lua``)."""
        streams = self.streams
        delayed = [self._delayed_of(stream) for stream in streams]
        queues = [self._places[stream][0] for stream in streams]
        return ScriptCall(
            "peek_stream", [*streams, *delayed, self._keys.paused()], [GROUP, *queues]
        )

    @property
    def streams(self) -> list[str]:
        """This consumer's streams, highest level first, queues in their given order."""
        return list(self._places)

    @property
    def delivery_streams(self) -> list[str]:
        """Every stream its jobs are delivered from: :attr:`streams`, then the delivery
        streams of their keyed jobs."""
        return [*self._places, *self._fair]

    def _delayed_of(self, stream: str) -> str:
        queue, level = self._places[stream]
        return self._keys.delayed(queue, self._levels.names[level])

    def _read_call(
        self,
        layout: Sequence[tuple[str, str, int]],
        free: int,
        quotas: Sequence[int],
        stream_levels: Sequence[int],
    ) -> tuple[ScriptCall, str]:
        """A read_stream call over ``layout`` (stream, queue, level) whose streams have the
        given quota indexes, and the token prefix of its claims."""
        streams = [stream for stream, _, _ in layout]
        delayed = [self._delayed_of(stream) for stream in streams]
        token, claim_args = read_claim_args(self._claims)
        args: list[Arg] = [GROUP, self._consumer, free, len(quotas), *quotas]
        args += [index + 1 for index in stream_levels]
        args += [queue for _, queue, _ in layout]
        args += claim_args
        script_keys = [*streams, *delayed, self._keys.wake(), self._keys.paused()]
        return ScriptCall("read_stream", script_keys, args), token

    def parse_read(
        self, reply: Sequence[Any], layout: Sequence[tuple[str, str, int]], token: str
    ) -> ReadResult:
        """What a read_stream call over ``layout`` took (pure, but for the ids an idle wait
        then blocks from)."""
        dry_flags, entries, last_ids, next_due = reply
        streams = [stream for stream, _, _ in layout]
        delivered = [*streams, *(self._fair_of[stream] for stream in streams)]
        levels = len(self._levels.names)
        result = ReadResult(taken=[0] * levels, dry=[True] * levels)
        result.next_due = next_due / 1000 if next_due >= 0 else None
        for k, (_, _, level) in enumerate(layout):
            result.dry[level] = result.dry[level] and dry_flags[k] == 1
        for i in range(0, len(entries), 5):
            delivery = self._delivery(delivered[entries[i] - 1], entries[i + 1], entries[i + 2])
            state = entries[i + 3]
            if state != NOT_CLAIMED:
                claim_token = f"{token}:{delivery.ref}"
                delivery.claim = ReadClaim(claim_token, state, entries[i + 4] / 1000)
            result.deliveries.append(delivery)
            result.taken[delivery.level] += 1
        # A paused queue's streams come back without a last id (''): their new jobs must
        # not wake this worker; a resume XADDs the wake stream instead.
        self._last_ids = {
            stream: text(last)
            for stream, last in zip([*streams, self._keys.wake()], last_ids, strict=False)
            if last
        }
        return result

    async def wait_for_work(self, timeout: float) -> None:
        if not self._last_ids:
            return
        with translated(self._url):
            if await self._client.xread(dict(self._last_ids), count=1, block=block_ms(timeout)):
                self.woken += 1

    def _marker(self, delivery: Delivery) -> str:
        return self._keys.job(delivery.job.id if delivery.job else delivery.job_id)

    def settle_call(self, settlement: Settlement) -> ScriptCall:
        """The settle call of an ending: in the compact form when it has one (see
        :func:`compact_ending`), else whole (:meth:`whole_settle_call`)."""
        compact = compact_ending(settlement, self._keys)
        if compact is None:
            return self.whole_settle_call(settlement)
        queue, level = self._place(settlement.delivery.source)
        shared: list[Arg] = [
            GROUP, self._consumer, self._keys.prefix,
            settlement.done_prefix or self._keys.done_bucket_prefix, settlement.final_ttl_ms,
        ]  # fmt: skip
        keys = [
            settlement.delivery.source, self._keys.delayed(queue, self._levels.names[level]),
            self._keys.dead(), self._keys.wake(),
        ]  # fmt: skip
        return ScriptCall("settle_many", keys, [STREAM_DONE, *shared, *compact])

    def whole_settle_call(self, settlement: Settlement) -> ScriptCall:
        """The ``settle_stream`` call of any ending (``lua/settle_stream.lua``)."""
        delivery, outcome = settlement.delivery, settlement.outcome
        queue, level = self._place(delivery.source)
        keys = [
            delivery.source, self._marker(delivery),
            self._keys.delayed(queue, self._levels.names[level]), self._keys.dead(),
            self._keys.wake(), self._keys.result(delivery.job_id), self._keys.statuses(),
        ]  # fmt: skip
        keys += settlement.claim_keys(self._keys)
        following = outcome.next_job
        args: list[Arg] = [
            GROUP, self._consumer, delivery.ref, outcome.kind, *settlement.claim_args(),
            codec.encode(following) if following is not None else b"",
            max(0, round(outcome.delay * 1000)), *settlement.end_args(),
        ]  # fmt: skip
        return ScriptCall("settle_stream", keys, args)

    async def settle(self, calls: Sequence[ScriptCall]) -> list[Any]:
        return await settle_async(self._scripts, self._url, calls)

    async def reclaim(self, min_idle: float, running: Sequence[str] = ()) -> Delivery | None:
        # Rotate the order so a stream with a steady trickle cannot hide another's.
        streams = self.delivery_streams
        shift = self._reclaim_turn % len(streams)
        self._reclaim_turn += 1
        streams = streams[shift:] + streams[:shift]
        args: list[Arg] = [
            GROUP, self._consumer, max(1, round(min_idle * 1000)), *self._liveness.args,
            *running,
        ]  # fmt: skip
        with translated(self._url):
            index, entry_id, fields, count, _ = await self._scripts.run(
                ScriptCall("reclaim_stream", [self._keys.liveness(), *streams], args)
            )
        if not index:
            return None
        delivery = self._delivery(streams[index - 1], entry_id, fields)
        delivery.deliveries = int(count)
        return delivery

    async def forget_consumers(self, min_idle: float) -> int:
        args: list[Arg] = [GROUP, max(1, round(min_idle * 1000)), self._consumer]
        with translated(self._url):
            removed = await self._scripts.run(
                ScriptCall("forget_consumers", self.delivery_streams, args)
            )
        return int(removed)

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> None:
        calls = [
            ScriptCall(
                "heartbeat_stream", [stream], [GROUP, self._consumer, *[d.ref for d in group]]
            )
            for stream, group in by_source(deliveries).items()
        ]
        if calls:
            with translated(self._url):
                await self._scripts.run_all(calls)

    @property
    def liveness_keys(self) -> list[str]:
        """Where this worker's liveness beats go (its partition's liveness set)."""
        return [self._keys.liveness()]

    def place(self, stream: str) -> tuple[str, int]:
        """The queue and level index of one of this consumer's streams."""
        return self._place(stream)

    @property
    def url(self) -> str:
        """The Redis URL (for error messages)."""
        return self._url

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
        await self._client.aclose()
