"""Settle calls on the wire: a flush's endings of one stream go as one ``settle_many``
call (``lua/settle_many.lua``), one script invocation and one reply for the batch
instead of one per job, each ending applied exactly as its own call would be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockgate.backend.broker import text, translated_replies
from lockgate.backend.faults import translated
from lockgate.backend.lua import Arg, AsyncScripts, ScriptCall, SyncScripts

# Settle calls per ``settle_many`` call: about 15 us of server time each, so a batch
# holds the server for a few milliseconds at most.
SETTLE_BATCH = 200


def batched_settles(calls: Sequence[ScriptCall]) -> tuple[list[ScriptCall], list[list[int]]]:
    """The settle calls as ``settle_many`` calls, one per script and stream (pure).

    Calls of one stream (or sorted queue: the same first key) share a partition, hence a
    cluster slot, and go into one call, in their order, at most :data:`SETTLE_BATCH` a
    call; a call of a script that has no batched form goes as it is. Returns the calls
    to send and, for each, the positions of the calls it carries.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for i, call in enumerate(calls):
        groups.setdefault((call.script, call.keys[0]), []).append(i)
    batches: list[ScriptCall] = []
    spans: list[list[int]] = []
    for (script, _), positions in groups.items():
        for start in range(0, len(positions), SETTLE_BATCH):
            span = positions[start : start + SETTLE_BATCH]
            if script not in ("settle_stream", "settle_sorted"):
                batches += [calls[i] for i in span]
                spans += [[i] for i in span]
                continue
            keys: list[str] = []
            args: list[Arg] = [script]
            for i in span:
                keys += calls[i].keys
                args += [len(calls[i].keys), len(calls[i].args), *calls[i].args]
            batches.append(ScriptCall("settle_many", keys, args))
            spans.append(span)
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
