"""Free TCP ports for the tests' private servers, safe when several test processes pick
ports at once (``make test`` runs pytest-xdist workers; other runs may share the machine).

A port from ``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, so
another process's next outgoing connection may take it between the pick and the
server's bind (or while a test has its server down for a restart on the same port), and
another test process may be handed the same one. Here a port is picked at random below
the ephemeral range, in a band of the xdist worker's own (``PYTEST_XDIST_WORKER``), and
checked free by binding it; with ``bus=True`` its cluster bus port (+10,000) too. A
server that still cannot bind its port (another program took it) is started again on
another one by its caller.
"""

from __future__ import annotations

import os
import random
import socket

# Servers' ports; cluster buses at +10,000 (20,000-29,999): all below the ephemeral range
# (32,768-60,999 by default on Linux), and below 55,536 as a bus port must be.
LOW, HIGH = 10_000, 20_000
BUS_OFFSET = 10_000
TRIES = 1_000


def _band() -> range:
    """This process's ports: the xdist worker's share of ``LOW``-``HIGH``, else all."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2:
        return range(LOW, HIGH)
    index = int(worker[2:]) % count
    size = (HIGH - LOW) // count
    return range(LOW + index * size, LOW + (index + 1) * size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, bus: bool = False, taken: frozenset[int] | set[int] = frozenset()) -> int:
    """A loopback port nothing listens on now, outside ``taken``; with ``bus``, whose
    cluster bus port (+10,000) is free and outside ``taken`` too.

    Raises:
        RuntimeError: none found in this process's band (it is all in use).
    """
    band = _band()
    for _ in range(TRIES):
        port = random.choice(band)
        if port in taken or (bus and port + BUS_OFFSET in taken):
            continue
        if _bindable(port) and (not bus or _bindable(port + BUS_OFFSET)):
            return port
    raise RuntimeError(f"no free port in {band.start}-{band.stop - 1} after {TRIES} tries")
