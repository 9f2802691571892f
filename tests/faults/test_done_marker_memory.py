"""Redis memory per done marker: at most 64 bytes (a string key of its own cost about 190).

100,000 claims are taken and marked done through the scripts ``app.idempotent`` uses
(``idem_claim`` then ``idem_settle`` 'done', pipelined 1,000 at a time), on a private
server that nothing else writes to, and ``used_memory`` is compared before and after.
``pytest -s`` prints the measured bytes per marker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from faults.support import PrivateRedis
from lockgate import App
from lockgate.api.idempotency import Claim
from lockgate.backend.keys import Keys

MARKERS = 100_000
BATCH = 1_000
MAX_BYTES_PER_MARKER = 64


def claims(app: App, kind: str, first: int, count: int) -> list[Claim]:
    """Claims of user keys, or job claims of an ``idempotent=True`` task (with the 0.1 and
    0.2 names they are honoured under, which are not written by default)."""
    if kind == "user":
        return [Claim(app, f"order:{n}") for n in range(first, first + count)]
    return [
        Claim(
            app, Keys.job_claim_name("charge", f"job-{n}"),
            legacy_key=Keys.legacy_job_claim_name(f"job-{n}"), legacy_scope="charge",
            older_key=Keys.older_job_claim_name("charge", f"job-{n}"),
        )
        for n in range(first, first + count)
    ]  # fmt: skip


def mark_done(app: App, batch: list[Claim]) -> None:
    """Claim every key of a batch, then mark each done: two pipelined round trips."""
    _, scripts = app.sync_connection()
    taken = scripts.run_each([claim.claim_call() for claim in batch])
    assert [list(reply) for reply in taken] == [[1, 0]] * len(batch)
    settled = scripts.run_each([claim.settle_call("done", claim.ttl) for claim in batch])
    assert settled == [1] * len(batch)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["user", "job"])
def test_a_done_marker_costs_at_most_64_bytes_of_redis_memory(
    private_redis: Callable[..., PrivateRedis], make_app: Callable[..., App], kind: str
) -> None:
    server = private_redis()
    warm_up = make_app(redis_url=server.url, namespace="warm-up")
    mark_done(warm_up, claims(warm_up, kind, 0, 2))  # the scripts loaded, the client connected
    app = make_app(redis_url=server.url, namespace=uuid.uuid4().hex)
    before = server.used_memory()
    for first in range(0, MARKERS, BATCH):
        mark_done(app, claims(app, kind, first, BATCH))
    used = server.used_memory() - before
    per_marker = used / MARKERS
    print(f"\n{kind} claims: {per_marker:.1f} bytes of Redis memory per done marker "
          f"({MARKERS:,} markers, {used:,} bytes)")  # fmt: skip
    assert per_marker <= MAX_BYTES_PER_MARKER
    # Nothing but the buckets is left: no claim key, nothing under the 0.1 or 0.2 name.
    found = server.client.scan_iter(match=f"{app.keys.prefix}:*", count=10_000)
    buckets = [key for key in found if key != app.keys.partitions().encode()]
    assert len(buckets) <= 16**3
    assert all(key.startswith(app.keys.done_bucket_prefix.encode()) for key in buckets)
    assert server.client.object("encoding", buckets[0]) == b"listpack"
