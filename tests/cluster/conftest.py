"""Fixtures of the cluster tests: one local Redis Cluster (3 primaries, 3 replicas) per
module, of private redis-server processes (see tests/clusters.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clusters import LocalCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A fresh local cluster for the module; killed and deleted at its end."""
    with LocalCluster(primaries=3, replicas=1) as local:
        yield local
