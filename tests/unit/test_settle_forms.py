"""Which endings go in settle_many's compact form (``compact_ending``, pure): only a
``done`` with nothing the compact form cannot carry; anything else goes whole. (That
both forms leave the same keys is tests/lua/test_settle_scripts.py.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from lockgate.backend.broker import Delivery, Settlement
from lockgate.backend.keys import Keys, status_shard
from lockgate.backend.settling import COMPACT_VALUES, compact_ending
from lockgate.core.codec import Job
from lockgate.core.outcome import Outcome

KEYS = Keys("ns")
CLAIM = KEYS.claim(Keys.job_claim_name("charge", "j1"))


def settlement(**changes: Any) -> Settlement:
    job = Job(id="j1", task="charge", queue="q", level="low", enqueued=1.0)
    base = Settlement(
        Delivery("q", 0, KEYS.stream("q", "low"), "1-1", job, job_id="j1"),
        Outcome("done", claim="done"), claim_key=CLAIM, claim_token="tok", claim_ttl=2.5,
        done_prefix=KEYS.done_bucket_prefix, final=b"{}", final_ttl_ms=1000,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_a_done_ending_with_a_claim_and_one_without_are_compact() -> None:
    claimed = compact_ending(settlement(), KEYS)
    assert claimed is not None and len(claimed) == COMPACT_VALUES
    shard = status_shard("j1")
    assert claimed == ["1-1", "j1", b"{}", shard, Keys.job_claim_name("charge", "j1"), "tok",
                       "done", 2500, b"", ""]  # fmt: skip
    plain = compact_ending(settlement(claim_key=None, claim_token=""), KEYS)
    assert plain == ["1-1", "j1", b"{}", shard, "", "", "keep", 0, b"", ""]
    # No final record kept (App(status_ttl=None)): no shard to compute.
    unkept = compact_ending(settlement(claim_key=None, claim_token="", final=b""), KEYS)
    assert unkept == ["1-1", "j1", b"", "", "", "", "keep", 0, b"", ""]


@pytest.mark.parametrize(
    "changes",
    [
        {"outcome": Outcome("retry", delay=1.0)},
        {"outcome": Outcome("dead", reason="x")},
        {"outcome": Outcome("done", next_job=Job(id="j1", task="c", queue="q", level="low"))},
        {"result": b"5"},
        {"record": {"reason": "x"}},
        {"legacy_markers": True},
        {"legacy_done": "d:tok:t:charge"},
        {"legacy_claim_key": "lockgate:{ns}:idem:job:j1"},
        {"older_claim_key": "lockgate:{ns}:idem:job:charge:j1"},
        {"claim_key": "lockgate:{other}:idem:job/6:charge:j1"},
    ],
    ids=str.split(
        "retry dead next-job result dead-letter string-marker legacy-done 0.1-name 0.2-name "
        "claim-elsewhere"
    ),
)
def test_anything_the_compact_form_cannot_carry_goes_whole(changes: dict[str, Any]) -> None:
    assert compact_ending(settlement(**changes), KEYS) is None


def test_a_job_whose_id_differs_from_its_deliverys_goes_whole() -> None:
    job = Job(id="other", task="charge", queue="q", level="low")
    delivery = Delivery("q", 0, KEYS.stream("q", "low"), "1-1", job, job_id="j1")
    assert compact_ending(settlement(delivery=delivery), KEYS) is None
