"""Settle calls on the wire: a flush's endings of one stream go as one ``settle_many``
call (``lua/settle_many.lua``), one script invocation and one reply for the batch
instead of one per job, each ending applied exactly as its own call would be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis

from lockgate.backend.broker import text, translated_replies
from lockgate.backend.faults import translated
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall, SyncScripts

# Settle calls per ``settle_many`` call: about 15 us of server time each, so a batch
# holds the server for a few milliseconds at most.
SETTLE_BATCH = 200
# A streams ending in the compact form: entry id, job id, final record, claim name,
# claim token, claim action, claim TTL (see lua/settle_many.lua, 'stream_done').
DoneEnding = tuple[Arg, str, Arg, str, Arg, Arg, Arg]


def compact_done(call: ScriptCall) -> tuple[tuple[Any, ...], DoneEnding] | None:
    """A ``settle_stream`` call (as ``StreamConsumer.settle_call`` lays it out) in the
    compact form of ``settle_many``, when it has one (pure): an ending ``done`` with no
    result record and no older claim names. Returns what the calls of one compact batch
    must share (keys, group, consumer, key prefix, done prefix, final TTL) and the
    ending's own values; None for any other call. The job's keys are checked against
    the ones the script will build from the prefix and the job id, so a call that does
    not fit goes whole.
    """
    keys, args = call.keys, call.args
    if call.script != "settle_stream" or len(args) != 18 or args[3] != "done":
        return None
    if len(keys) not in (7, 8) or args[7] or args[9] or args[10] or args[16]:
        return None  # older names' markers, string markers, a retry's job, a result
    stream, marker = keys[0], keys[1]
    prefix = stream.rpartition(":stream:")[0]
    job_id = marker[len(prefix) + 5 :]
    if not prefix or marker != f"{prefix}:job:{job_id}":
        return None
    if keys[5] != f"{prefix}:result:{job_id}" or keys[6] != f"{prefix}:status:{job_id}":
        return None
    # Unused without a claim: the namespace's own, so such endings share a batch with
    # the claimed ones (Keys.done_bucket_prefix).
    claim, done_prefix = "", cast(Arg, f"{prefix}:done:")
    if len(keys) == 8:
        claim, done_prefix = keys[7].removeprefix(f"{prefix}:idem:"), args[8]
        if claim == keys[7]:
            return None
    shared = (*keys[:1], *keys[2:5], args[0], args[1], prefix, done_prefix, args[15])
    return shared, (args[2], job_id, args[14], claim, args[4], args[5], args[6])


def batched_settles(calls: Sequence[ScriptCall]) -> tuple[list[ScriptCall], list[list[int]]]:
    """The settle calls as ``settle_many`` calls, one per script and stream (pure).

    Calls of one stream (or sorted queue: the same first key) share a partition, hence a
    cluster slot, and go into one call, in their order, at most :data:`SETTLE_BATCH` a
    call: the compact form for the streams endings that have one (:func:`compact_done`),
    the whole calls for the others; a call of a script that has no batched form goes as
    it is. Returns the calls to send and, for each, the positions of the calls it carries.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    compact: dict[int, DoneEnding] = {}
    for i, call in enumerate(calls):
        done = compact_done(call)
        if done is not None:
            compact[i] = done[1]
            groups.setdefault(("stream_done", *done[0]), []).append(i)
        else:
            groups.setdefault((call.script, call.keys[0]), []).append(i)
    batches: list[ScriptCall] = []
    spans: list[list[int]] = []
    for group, positions in groups.items():
        script = group[0]
        for start in range(0, len(positions), SETTLE_BATCH):
            span = positions[start : start + SETTLE_BATCH]
            if script not in ("settle_stream", "settle_sorted", "stream_done"):
                batches += [calls[i] for i in span]
                spans += [[i] for i in span]
                continue
            spans.append(span)
            if script == "stream_done":
                args: list[Arg] = ["stream_done", *group[5:]]
                for i in span:
                    args += compact[i]
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
