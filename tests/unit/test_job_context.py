"""JobContext: a worker's run builds it with ``of_run``, which must give exactly what the
constructor gives (every field, the same defaults, still frozen)."""

from __future__ import annotations

import dataclasses

import pytest

from lockgate.core.context import Holder, JobContext


def test_of_run_sets_every_field_as_the_constructor_does() -> None:
    holder = Holder("c1", 1000, 500)
    values = dict(app="app", retry_window=3.0, idempotency_ttl=60.0, holder=holder, steps=None)
    built = JobContext("j", "t", "q", "low", 2, 1.5, **values)  # type: ignore[arg-type]
    fast = JobContext.of_run("j", "t", "q", "low", 2, 1.5, **values)  # type: ignore[arg-type]
    for field in dataclasses.fields(JobContext):
        assert getattr(fast, field.name) == getattr(built, field.name), field.name
    assert set(vars(fast)) == {field.name for field in dataclasses.fields(JobContext)}


def test_of_run_gives_each_run_its_own_lists_and_stays_frozen() -> None:
    def run() -> JobContext:
        return JobContext.of_run(
            "j", "t", "q", "low", 1, 0.0, app=None, retry_window=0.0, idempotency_ttl=1.0,
            holder=None, steps=None,
        )  # fmt: skip

    first, second = run(), run()
    first.request_cancel()
    first.done_markers.append(1.0)
    first.claimed_keys.add("k")
    assert first.cancelled and not second.cancelled
    assert second.done_markers == [] and second.claimed_keys == set()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.attempt = 3  # type: ignore[misc]
