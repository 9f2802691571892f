"""Fixtures of the fault tests: private redis-servers, and an app and worker on one.

The shared server on 6379 is never faulted: every test here starts its own server with
:func:`private_redis` and may kill, pause, flush, fill or reconfigure it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from faults.support import PrivateRedis


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[..., PrivateRedis]]:
    """Factory: ``private_redis(**options)`` starts a private ``redis-server`` and returns it.

    Options are ``redis.conf`` directives with underscores for dashes, e.g.
    ``private_redis(appendonly="yes", appendfsync="always")`` or
    ``private_redis(maxmemory="4mb", maxmemory_policy="noeviction")``; the defaults are
    ``save ""`` and ``appendonly no``. Every server is killed and its clients closed at
    teardown.
    """
    servers: list[PrivateRedis] = []

    def start(**options: object) -> PrivateRedis:
        server = PrivateRedis(tmp_path / f"redis-{len(servers)}", options)
        servers.append(server)
        try:
            return server.start()
        except RuntimeError:
            # The free port was taken between the probe and the start: once more elsewhere.
            server.close()
            server = PrivateRedis(tmp_path / f"redis-{len(servers)}-again", options)
            servers.append(server)
            return server.start()

    yield start
    for server in servers:
        server.close()
