"""Every key lockgate names for a namespace hashes to the namespace's one cluster slot (or,
for a partition of a partitioned namespace, to the partition's), so each script call is
served by one node of a Redis Cluster (no CROSSSLOT, one round trip per node for a
pipeline). No server: the slot is computed as Redis does (CRC16 of the hash tag,
redis.crc.key_slot)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from redis.crc import key_slot

from lockgate import App
from lockgate.backend.keys import Keys, done_marker_place
from lockgate.backend.partitions import Layout, home_of, partition_of, partition_tags

NAMESPACE = "shop-eu"
ARGUMENTS: dict[str, Any] = {
    "queue": "emails", "level": "critical", "key": "pay:{A1}", "name": "views:A1",
    "request_id": "req-7", "job_id": "job-{odd}", "claim_key": "lockgate:{shop-eu}:idem:k",
    "task": "report", "stamp": "2024-01-31T03:00:00Z", "placed": "1-0 emails:critical",
    "minute": 28_424_160, "lane": "export=acme:{x}", "flow_id": "f-{7}",
    "step_claim_name": "step/6:report:3:j-1:charge", "token": "0f3a", "row": 41, "code": "d",
}  # fmt: skip


def slot(key: str | bytes) -> int:
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def key_names(keys: Keys) -> dict[str, list[str]]:
    """Each key-naming method of Keys, called with sample arguments: its key names."""
    names: dict[str, list[str]] = {}
    for name, _ in inspect.getmembers(type(keys)):
        if name.startswith("_") or isinstance(inspect.getattr_static(keys, name), staticmethod):
            continue  # the static helpers name parts of keys, not keys
        value = getattr(keys, name)
        if callable(value):
            parameters = inspect.signature(value).parameters
            value = value(**{p: ARGUMENTS[p] for p in parameters})
        if isinstance(value, str):
            found = [value]
        elif hasattr(value, "__dataclass_fields__"):  # SortedKeys: one queue's keys
            found = list(vars(value).values())
        else:
            found = list(value) if isinstance(value, tuple | list) else []
        found = [v for v in found if isinstance(v, str) and v.startswith("lockgate:")]
        if found:
            names[name] = found
    return names


def test_every_key_name_of_a_namespace_is_in_its_slot() -> None:
    keys = Keys(NAMESPACE)
    names = key_names(keys)
    # The naming methods that exist today are all covered (a new one must be too).
    assert {"stream", "delayed", "claim", "done_marker", "wake", "counter", "request",
            "cooldown", "dead", "job", "sorted_keys", "prefix", "worker", "workers",
            "activity", "partitions", "wakeup", "tick", "result", "status", "cancel_flag",
            "rate_limit", "paused", "place_keys", "job_record_keys",
            "done_bucket_prefix", "fair_stream", "fair_rotation", "fair_jobs", "fair_limits",
            "fair_slots", "fair_holds", "key_rate_limit", "flow", "flow_keys", "flow_traces",
            "flow_stage", "flows_releasing", "step_result", "relayed", "history", "history_tasks",
            "progress"} <= set(names)  # fmt: skip
    expected = slot(keys.prefix)
    for method, values in names.items():
        assert values, method
        for value in values:
            assert slot(value) == expected, (method, value)
    # Done-marker buckets are named inside the scripts from this prefix: same slot.
    for bucket in ("000", "7ff", "fff"):
        assert slot(keys.done_bucket_prefix + bucket) == expected


@pytest.mark.parametrize("backend", ["streams", "sorted"])
def test_every_enqueue_call_touches_one_slot(backend: str) -> None:
    app = App("redis://127.0.0.1:1/0", namespace=NAMESPACE, backend=backend)  # type: ignore[arg-type]

    @app.task(priority="critical")
    def pay(order: str) -> None: ...

    @app.task(priority="low", queue="reports")
    def report(day: str) -> None: ...

    messages = [pay.message(f"o{n}", job_id=f"pay:{{o{n}}}") for n in range(700)]
    messages += [report.message(f"d{n}", delay=5) for n in range(10)]
    _, plan = app._plan(messages)
    assert len(plan.calls) >= 2
    for call in plan.calls:
        assert {slot(key) for key in call.keys} == {slot(app.keys.prefix)}, call.script


def test_place_keys_name_the_keys_a_marker_points_at() -> None:
    keys = Keys(NAMESPACE)
    assert keys.place_keys("1700000000000-3 emails:critical") == [
        keys.stream("emails", "critical"), keys.delayed("emails", "critical")
    ]  # fmt: skip
    assert keys.place_keys("delayed 1700000000000 emails:low") == [
        keys.stream("emails", "low"), keys.delayed("emails", "low")
    ]  # fmt: skip
    q = keys.sorted_keys("emails")
    assert keys.place_keys("sorted emails") == [
        q.payloads, q.inflight, q.delayed, q.deliveries, q.waiting, q.ranks, q.owners
    ]  # fmt: skip
    # lockgate 0.2's markers, and none, name no place.
    assert keys.place_keys("1700000000000-3") == keys.place_keys("delayed") == []
    assert keys.place_keys("") == []


# Tags a partitioned namespace gives Keys: a partition's, a user claim's (one done bucket),
# a counter's and a cooldown's (see lockgate.backend.partitions).
TAGS = [
    *partition_tags(NAMESPACE, 4), f"{NAMESPACE}/c.7ff", f"{NAMESPACE}/n.views:A1",
    f"{NAMESPACE}/k.pay:{{A1}}",
]  # fmt: skip


@pytest.mark.parametrize("tag", TAGS)
def test_every_key_name_of_a_partition_is_in_its_tags_slot(tag: str) -> None:
    keys = Keys(NAMESPACE, tag)
    names = key_names(keys)
    # The same methods name keys as for the namespace itself: none is left out.
    assert set(names) == set(key_names(Keys(NAMESPACE)))
    # The hash tag ends at the tag's first '}' (a cooldown's key may hold one).
    expected = slot(f"{{{tag}}}")
    assert expected != slot(f"{{{NAMESPACE}}}")
    for method, values in names.items():
        for value in values:
            assert value.startswith(f"lockgate:{{{tag}}}"), (method, value)
            assert slot(value) == expected, (method, value)
    for bucket in ("000", "7ff", "fff"):
        assert slot(keys.done_bucket_prefix + bucket) == expected
    # A user claim's prefix without its ':' is its one bucket: still the tag's slot.
    bucket, _ = done_marker_place(keys.done_bucket_prefix.rstrip(":"), keys.claim("k"))
    assert slot(bucket) == expected


def test_every_partitioned_enqueue_call_touches_one_partitions_slot() -> None:
    app = App("redis://127.0.0.1:1/0", namespace=NAMESPACE, partitions=4)

    @app.task(priority="critical")
    def pay(order: str) -> None: ...

    @app.task(priority="low", queue="reports")
    def report(day: str) -> None: ...

    messages = [pay.message(f"o{n}", job_id=f"pay:{{o{n}}}") for n in range(700)]
    messages += [report.message(f"d{n}", delay=5) for n in range(40)]
    jobs, plan = app._plan(messages)
    layout = Layout(NAMESPACE, 4)
    partition_slots = [slot(tag) for tag in partition_tags(NAMESPACE, 4)]
    used = set()
    assert sorted(i for chosen in plan.positions for i in chosen) == list(range(len(jobs)))
    for call, chosen in zip(plan.calls, plan.positions, strict=True):
        (call_slot,) = {slot(key) for key in call.keys}
        part = partition_slots.index(call_slot)
        used.add(part)
        # The call carries only jobs of that partition, and names their markers there.
        for i in chosen:
            assert partition_of(jobs[i].id, 4) == part, jobs[i].id
            assert layout.for_job(jobs[i].id).job(jobs[i].id) in call.keys
    assert used == {0, 1, 2, 3}


def test_a_keyed_job_goes_to_its_keys_partition() -> None:
    """With partitions, a keyed job's enqueue call is its key's partition's: its marker,
    its lane and its key's slots share that partition's slot, whatever its id."""
    app = App("redis://127.0.0.1:1/0", namespace=NAMESPACE, partitions=4)

    @app.task(priority="low", key_by="tenant", key_concurrency=2)
    def export(tenant: str, n: int) -> None: ...

    messages = [export.message(t, n) for t in ("acme", "globex") for n in range(50)]
    jobs, plan = app._plan(messages)
    layout = Layout(NAMESPACE, 4)
    homes = {t: home_of("", t, 4) for t in ("acme", "globex")}
    assert {partition_of(job.id, 4) for job in jobs} == {0, 1, 2, 3}  # ids spread, keys not
    for call, chosen in zip(plan.calls, plan.positions, strict=True):
        (call_slot,) = {slot(key) for key in call.keys}
        for i in chosen:
            keys = layout.parts[homes[jobs[i].key or ""]]
            assert slot(keys.prefix) == call_slot
            assert slot(keys.fair_slots(export.name, jobs[i].key or "")) == call_slot
