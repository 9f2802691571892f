"""The script tests' shared set-up."""

from __future__ import annotations

import pytest
import redis

from conftest import serving_forever
from lockgate.backend.keys import Keys


@pytest.fixture
def liveness_of_old(rclient: redis.Redis, keys: Keys) -> None:
    """Workers named by these tests never beat: each counts as dead once its job is idle
    past the min idle or its lease lapsed, as before liveness. The liveness tests
    (test_liveness_scripts.py) write the hash themselves."""
    serving_forever(rclient, keys)
