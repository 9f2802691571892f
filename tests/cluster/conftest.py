"""Fixtures of the cluster tests: one local Redis Cluster (3 primaries, 3 replicas) per
module, of private redis-server processes (see tests/clusters.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from cluster.ledger import DSN
from clusters import LocalCluster
from lockgate.integrations.postgres import init_schema


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A fresh local cluster for the module; killed and deleted at its end."""
    with LocalCluster(primaries=3, replicas=1) as local:
        yield local


@pytest.fixture
def ledger() -> Iterator[str]:
    """A run id in the effects table; its rows are deleted afterwards."""
    init_schema(DSN)
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS cluster_effects (run text, n int)")
    run = uuid.uuid4().hex
    yield run
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("DELETE FROM cluster_effects WHERE run = %s", (run,))
