"""The scripts as one Redis Functions library, named by its content (pure: text, no I/O).

Each ``NAME.lua`` script becomes the function ``lockgate_<digest>_NAME`` of the library
``lockgate_<digest>``, where ``<digest>`` is taken from the library's own text: a worker
of another version brings its own library and both run side by side during a rolling
deploy, each calling only its own functions.

A function declares what it may do when Redis is out of memory (``maxmemory`` with
``noeviction``): those that free memory or move a job without adding one (reading,
settling, dead-lettering, heartbeats, reclaim) carry ``allow-oom`` and keep working;
those that add jobs or claims (enqueue, a claim outside a read) carry no flag, so Redis
refuses them whole with OOM and the caller backs off; read-only ones carry ``no-writes``
and are called with ``FCALL_RO``. (Redis 7 scripting, "Script flags":
https://redis.io/docs/latest/develop/interact/programmability/lua-api/#script-flags)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

ScriptName = Literal[
    "enqueue_stream",
    "read_stream",
    "enqueue_sorted",
    "take_sorted",
    "extend_sorted",
    "reclaim_stream",
    "heartbeat_stream",
    "forget_consumers",
    "dlq_purge",
    "dlq_trim",
    "dlq_replay_stream",
    "dlq_replay_sorted",
    "purge_stream",
    "purge_sorted",
    "idem_claim",
    "idem_settle",
    "incr_once",
    "stats_stream",
    "stats_sorted",
    "fair_keys",
    "settle_stream",
    "settle_sorted",
    "job_status",
    "cancel_job",
    "cancel_flags",
    "rate_limit",
    "peek_stream",
    "wake_workers",
    "beat",
    "judge_owner",
    "heartbeat_worker",
    "leave_worker",
    "server_time",
    "settle_many",
    "flow_stage",
    "flow_commit",
    "flow_release",
    "flow_cancel",
    "progress_write",
    "progress_read",
]
Flag = Literal["allow-oom", "no-writes"]

ALLOW_OOM: tuple[Flag, ...] = ("allow-oom",)
NO_WRITES: tuple[Flag, ...] = ("no-writes",)
FLAGS: Mapping[ScriptName, tuple[Flag, ...]] = {
    "enqueue_stream": (),
    "enqueue_sorted": (),
    "idem_claim": (),
    "incr_once": (),
    "read_stream": ALLOW_OOM,
    "take_sorted": ALLOW_OOM,
    "extend_sorted": ALLOW_OOM,
    "reclaim_stream": ALLOW_OOM,
    "heartbeat_stream": ALLOW_OOM,
    "forget_consumers": ALLOW_OOM,
    "dlq_purge": ALLOW_OOM,
    "dlq_trim": ALLOW_OOM,
    # A replay adds a job, as an enqueue does: refused whole under OOM (the letter stays).
    "dlq_replay_stream": (),
    "dlq_replay_sorted": (),
    # Purging waiting jobs frees memory, like purging dead letters.
    "purge_stream": ALLOW_OOM,
    "purge_sorted": ALLOW_OOM,
    "idem_settle": ALLOW_OOM,
    "settle_stream": ALLOW_OOM,
    "settle_sorted": ALLOW_OOM,
    # A flow's stage and commit add jobs, as an enqueue does (after the enqueue scripts:
    # they, and the settles, queue a flow's jobs by the enqueue scripts' bodies).
    "flow_stage": (),
    "flow_commit": (),
    "flow_release": (),
    # Drops a flow's held jobs: frees memory.
    "flow_cancel": ALLOW_OOM,
    "stats_stream": NO_WRITES,
    "stats_sorted": NO_WRITES,
    "fair_keys": NO_WRITES,
    "job_status": NO_WRITES,
    "cancel_flags": NO_WRITES,
    # Cancelling removes a job and writes a small record: refused under OOM like enqueue.
    "cancel_job": (),
    # A start writes a small limiter key, like a claim outside a read: refused under OOM
    # (the job waits and asks again).
    "rate_limit": (),
    # Moves due delayed jobs like a read, then counts.
    "peek_stream": ALLOW_OOM,
    # Sent once an enqueue landed, which must not then fail: at most 64 tiny items a list.
    "wake_workers": ALLOW_OOM,
    # A worker's liveness must be kept under OOM too: one small field per worker.
    "beat": ALLOW_OOM,
    # Reads a liveness set: whether a lapsed claim's holder is dead.
    "judge_owner": NO_WRITES,
    # The registry: a heartbeat, like the stream's, and a clean stop, which frees memory.
    "heartbeat_worker": ALLOW_OOM,
    "leave_worker": ALLOW_OOM,
    "server_time": NO_WRITES,
    # Progress is for people: refused under OOM (the worker logs it and writes it later).
    "progress_write": (),
    "progress_read": NO_WRITES,
    # Last: it calls the settle scripts' bodies, which the library defines before it.
    "settle_many": ALLOW_OOM,
}
INCLUDE = "--#include "
CLOCK_LOCAL = "local clock_us -- per call; in the library, shared by the bodies one call runs"
PREFIX = "lockgate_"
DIGEST_LENGTH = 12


def _text(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


@cache
def source(name: ScriptName) -> str:
    """The text of a script, with each ``--#include FRAGMENT`` line replaced by the
    fragment's text, once (logic several scripts share lives once, in ``_FRAGMENT.lua``;
    a fragment may include others). It reads ``KEYS`` and ``ARGV`` as EVAL gives them."""
    return _expand(name, set())


def _expand(name: str, included: set[str]) -> str:
    out = []
    for line in _text(name).splitlines(keepends=True):
        if not line.startswith(INCLUDE):
            out.append(line)
            continue
        fragment = line[len(INCLUDE) :].strip()
        if fragment not in included:
            included.add(fragment)
            out.append(_expand(fragment, included))
    return "".join(out)


@dataclass(frozen=True)
class Library:
    """The library's name, its code for ``FUNCTION LOAD``, and each script's function."""

    name: str
    code: str
    functions: Mapping[ScriptName, str]

    def read_only(self, script: ScriptName) -> bool:
        """Whether the script's function is called with ``FCALL_RO``."""
        return "no-writes" in FLAGS[script]


@cache
def library() -> Library:
    """The library of this version's scripts (built once per process)."""
    # One clock per call (see _clock.lua): declared once, before the bodies, and reset by
    # each function's entry, so a body another one runs reads the same TIME.
    bodies = [f"{CLOCK_LOCAL}\n"]
    for script in FLAGS:
        # The script's text becomes the body of a Lua function whose parameters are named
        # as EVAL's globals, so the same text serves both (tests EVAL scripts directly).
        text = source(script).replace(CLOCK_LOCAL, "")
        bodies.append(f"local function script_{script}(KEYS, ARGV)\n{text}\nend\n")
    body = "".join(bodies)
    digest = hashlib.sha1(body.encode()).hexdigest()[:DIGEST_LENGTH]
    name = f"{PREFIX}{digest}"
    functions = {script: f"{name}_{script}" for script in FLAGS}
    registrations = [
        f"redis.register_function{{function_name='{functions[script]}', "
        f"callback=function(KEYS, ARGV) clock_us = nil return script_{script}(KEYS, ARGV) end, "
        f"flags={{{', '.join(repr(flag) for flag in FLAGS[script])}}}}}\n"
        for script in FLAGS
    ]
    code = f"#!lua name={name}\n{body}{''.join(registrations)}"
    return Library(name, code, functions)
