"""Claims made in a child of ``run_in_child`` on real Redis, beside the parent's own.

The child inherits the App with everything the parent held at the fork: its locks (held
here by the parent's loop thread), its claims (which only the parent renews), its pooled
sync connections and its loop's async client. The child must claim with none of them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis

from lockgate import App
from lockgate.process.isolation import run_in_child


async def test_a_child_claims_while_the_parent_holds_claims_and_locks(
    make_app: Callable[..., App], rclient: redis.Redis
) -> None:
    app = make_app()
    async with app.idempotent("parent:async", ttl=60):
        pass  # the parent's loop now has an async client, its pool a connection

    def work() -> bytes:
        inherited_claims = len(app.lease_keeper._claims)
        # A lease of 1 s renewed every third of it: a loaded machine's stall of a few
        # hundred ms (the CI's two cores are shared) must not lapse it.
        with app.idempotent("child:sync", ttl=60, lease=1.0) as claim:
            time.sleep(2.2)  # past the lease: only the child's own renewals keep it
            value = app.client().get(app.keys.claim("child:sync"))

        async def claim_async() -> None:
            try:
                async with app.idempotent("child:async", ttl=60):
                    pass
            finally:
                await app.aclose()

        asyncio.run(claim_async())
        return json.dumps({
            "inherited_claims": inherited_claims,
            "token": claim.token,
            "held_past_lease": value == f"c:{claim.token}".encode(),
            "lost": claim.lost,
        }).encode()  # fmt: skip

    with ThreadPoolExecutor(2) as pool, app.idempotent("parent:sync", ttl=60) as parent_claim:
        # Held by the parent's loop thread while an executor thread forks.
        with app.store._lock, app.lease_keeper._lock:
            ended = await run_in_child(work, timeout=30, executor=pool)
        assert ended.report is not None, ended.reason
        # The parent's claim is untouched and still the parent's to renew.
        parent_key = app.keys.claim("parent:sync")
        assert rclient.get(parent_key) == f"c:{parent_claim.token}".encode()
        assert parent_claim.token in app.lease_keeper._claims

    report = json.loads(ended.report)
    assert report == {
        "inherited_claims": 0,
        "token": report["token"],
        "held_past_lease": True,
        "lost": False,
    }
    seconds, _ = rclient.time()
    for done in ("child:sync", "child:async", "parent:sync"):  # claims gone, markers written
        assert not rclient.exists(app.keys.claim(done)), done
        expiry = rclient.zscore(*app.keys.done_marker(app.keys.claim(done)))
        assert expiry is not None and 50 < expiry - seconds <= 61, done
