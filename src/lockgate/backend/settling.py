"""Settle calls on the wire: a flush's endings of one stream go as one ``settle_many``
call (``lua/settle_many.lua``), one script invocation and one reply for the batch
instead of one per job, each ending applied exactly as its own call would be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockgate.backend.broker import Settlement, text, translated_replies
from lockgate.backend.faults import translated
from lockgate.backend.keys import Keys, status_shard
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall, SyncScripts

# Settle calls per ``settle_many`` call: about 15 us of server time each, so a batch
# holds the server for a few milliseconds at most.
SETTLE_BATCH = 200
# The compact form of a streams ending (see lua/settle_many.lua, 'stream_done'): a
# settle_many call of one ending, which batched_settles merges with the others of its
# stream. KEYS: the stream, its delayed set, the dead-letter stream, the wake stream;
# ARGV: 'stream_done', group, consumer, key prefix, done-marker buckets' prefix, final
# record TTL (what a batch shares once), then the ending's own values (COMPACT_VALUES).
STREAM_DONE = "stream_done"
SHARED_ARGS = 5
# Entry id, job id, final record, its status shard, claim name, claim token, claim action,
# claim TTL, history entry, its task.
COMPACT_VALUES = 10


def compact_ending(settlement: Settlement, keys: Keys) -> list[Arg] | None:
    """The values of a streams ending in the compact form, when it has one (pure): an
    ending ``done`` with no retry, result record, dead letter, string marker or older claim
    names, whose job id names its keys, and whose claim (if any) is one of ``keys``'
    claim keys (:meth:`Keys.claim`). The script builds the job's keys
    (``<prefix>:job:<id>``, ``:result:``, ``:statuses``), the claim's
    (``<prefix>:idem:<name>``) and the history's (``<prefix>:ends:d:<task>``,
    ``<prefix>:ends``) as Keys does. None for any
    other ending: it goes whole.
    """
    delivery, outcome = settlement.delivery, settlement.outcome
    if outcome.kind != "done" or outcome.next_job is not None or settlement.result:
        return None
    if settlement.legacy_markers or settlement.legacy_done or settlement.record:
        return None
    if settlement.debounced or settlement.holds_slot or settlement.flow is not None:
        return None
    job = delivery.job
    if job is not None and job.id != delivery.job_id:
        return None  # the marker and the records would be named by different ids
    claim, token, action, ttl = "", "", "keep", 0
    if settlement.claim_key is not None:
        if settlement.legacy_claim_key is not None or settlement.older_claim_key is not None:
            return None
        idem = keys.claim("")
        if not settlement.claim_key.startswith(idem):
            return None
        claim, token = settlement.claim_key[len(idem) :], settlement.claim_token
        action, ttl = outcome.claim, max(1, round(settlement.claim_ttl * 1000))
    job_id, final = delivery.job_id, settlement.final
    shard = status_shard(job_id) if final else ""
    return [
        delivery.ref, job_id, final, shard, claim, token, action, ttl,
        settlement.history_entry, settlement.history_task,
    ]  # fmt: skip


def compact(call: ScriptCall) -> bool:
    """Whether a settle call is in the compact form (see :func:`compact_ending`)."""
    return call.script == "settle_many" and call.args[0] == STREAM_DONE


def batched_settles(calls: Sequence[ScriptCall]) -> tuple[list[ScriptCall], list[list[int]]]:
    """The settle calls as ``settle_many`` calls, one per script and stream (pure).

    Calls of one stream (or sorted queue: the same first key) share a partition, hence a
    cluster slot, and go into one call, in their order, at most :data:`SETTLE_BATCH` a
    call: the compact form for the streams endings that have one (:func:`compact_ending`),
    the whole calls for the others; a call of a script that has no batched form goes as
    it is. Returns the calls to send and, for each, the positions of the calls it carries.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, call in enumerate(calls):
        if compact(call):
            shared = call.args[1 : 1 + SHARED_ARGS]
            groups.setdefault((STREAM_DONE, *call.keys, *shared), []).append(i)
        else:
            groups.setdefault((call.script, call.keys[0]), []).append(i)
    batches: list[ScriptCall] = []
    spans: list[list[int]] = []
    for group, positions in groups.items():
        script = group[0]
        for start in range(0, len(positions), SETTLE_BATCH):
            span = positions[start : start + SETTLE_BATCH]
            if script not in ("settle_stream", "settle_sorted", STREAM_DONE):
                batches += [calls[i] for i in span]
                spans += [[i] for i in span]
                continue
            spans.append(span)
            if script == STREAM_DONE:
                args: list[Arg] = [STREAM_DONE, *group[5:]]
                for i in span:
                    args += calls[i].args[1 + SHARED_ARGS :]
                batches.append(ScriptCall("settle_many", list(group[1:5]), args))
                continue
            keys: list[str] = []
            args = [script]
            for i in span:
                keys += calls[i].keys
                args += [len(calls[i].keys), len(calls[i].args), *calls[i].args]
            batches.append(ScriptCall("settle_many", keys, args))
    return batches, spans


def unbatched(
    calls: Sequence[ScriptCall], replies: Sequence[Any], spans: Sequence[Sequence[int]], count: int
) -> list[Any]:
    """Each settle call's reply from the replies to :func:`batched_settles`' ``calls`` (pure):
    a batch's error becomes each of its calls' error, a call that raised inside a batch
    (``{-1, message}``) a ``ResponseError``."""
    out: list[Any] = [None] * count
    for call, reply, span in zip(calls, replies, spans, strict=True):
        if call.script != "settle_many":
            out[span[0]] = reply
            continue
        for k, i in enumerate(span):
            if isinstance(reply, BaseException):
                out[i] = reply
            elif int(reply[k][0]) == -1:
                out[i] = redis.ResponseError(text(reply[k][1]))
            else:
                out[i] = reply[k]
    return out


def settle_sync(scripts: SyncScripts, url: str, calls: Sequence[ScriptCall]) -> list[Any]:
    """Apply settle calls through a sync client (a pool thread's path), one round trip.

    Returns:
        Per call, its reply or the lockgate error it met.
    """
    batches, spans = batched_settles(calls)
    with translated(url):
        replies = scripts.run_each(batches)
    return translated_replies(unbatched(batches, replies, spans, len(calls)), url)


async def settle_async(scripts: AsyncScripts, url: str, calls: Sequence[ScriptCall]) -> list[Any]:
    """Apply settle calls through a worker's async client, one round trip.

    Returns:
        Per call, its reply or the lockgate error it met.
    """
    batches, spans = batched_settles(calls)
    with translated(url):
        replies = await scripts.run_each(batches)
    return translated_replies(unbatched(batches, replies, spans, len(calls)), url)
