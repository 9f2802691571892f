"""Broker boundary helpers: URL masking, error translation, batching, reconnect backoff."""

from __future__ import annotations

import itertools

import pytest
import redis
import redis.asyncio as aioredis

from lockgate import BrokerError, ConfigError, ConnectionFailed, ScriptError
from lockgate.backend.addresses import masked
from lockgate.backend.broker import (
    DelayedJob,
    EnqueuePlan,
    Outgoing,
    batches,
    delayed_job,
    soonest_first,
)
from lockgate.backend.connections import async_client, sync_client
from lockgate.backend.faults import translated
from lockgate.backend.keys import Keys
from lockgate.backend.partitions import Layout
from lockgate.backend.sorted_broker import SortedBroker
from lockgate.backend.stream_broker import StreamBroker
from lockgate.core.codec import Job, encode
from lockgate.core.config import Levels
from lockgate.core.policy import reconnect_delay


def test_masked_hides_only_the_password() -> None:
    assert masked("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert masked("redis://host:6379/0") == "redis://host:6379/0"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
        ("rediss://h/0?ssl_password=s3cret&db=2", "rediss://h/0?ssl_password=***&db=2"),
        ("redis://h/0?db=1&PASSWORD=s3cret", "redis://h/0?db=1&PASSWORD=***"),
        ("redis://h/0?passwd=s3cret&token=s3cret", "redis://h/0?passwd=***&token=***"),
        ("redis://h/0?client_secret=s3cret", "redis://h/0?client_secret=***"),
        (
            "redis://h/0?api_key=s3cret&ssl_keyfile=/k.pem",
            "redis://h/0?api_key=***&ssl_keyfile=/k.pem",
        ),
        ("redis://u:s3cret@h/0?password=s3cret", "redis://u:***@h/0?password=***"),
        ("redis://:p%40ss%3Aword@h/0", "redis://:***@h/0"),
        ("redis://:pa@ss@h/0", "redis://:***@h/0"),
        ("redis://h/0?password=", "redis://h/0?password=***"),
    ],
)
def test_masked_hides_secrets_in_the_query(url: str, expected: str) -> None:
    assert masked(url) == expected
    assert "s3cret" not in masked(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://user@h:6379/0",
        "rediss://h:6380/1?ssl_cert_reqs=none&socket_timeout=2.5&client_name=a%20b",
        "unix:///var/run/redis.sock?db=3",
        "redis://[::1]:6379/0?db=1#frag",
        "redis://h/0?password",
        "not a url",
        "",
    ],
)
def test_masked_leaves_urls_without_secrets_alone(url: str) -> None:
    assert masked(url) == url


def test_masked_handles_unix_urls() -> None:
    assert masked("unix://:s3cret@/tmp/r.sock?db=0") == "unix://:***@/tmp/r.sock?db=0"
    assert (
        masked("unix://u:s3cret@/tmp/r.sock?db=0&password=s3cret")
        == "unix://u:***@/tmp/r.sock?db=0&password=***"
    )
    assert masked("unix:///tmp/r.sock?password=s3cret") == "unix:///tmp/r.sock?password=***"


def test_masked_never_raises_on_a_malformed_url() -> None:
    # urlsplit raises on an unclosed IPv6 bracket; a message about a bad URL must still print.
    assert masked("redis://:s3cret@[::1/0?password=s3cret") == "redis://:***@[::1/0?password=***"


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (redis.ConnectionError("refused"), ConnectionFailed),
        (redis.TimeoutError("slow"), ConnectionFailed),
        (OSError("unreachable"), ConnectionFailed),
        (redis.ResponseError("NOSCRIPT No matching script"), ScriptError),
        (redis.ResponseError("Error running script (call to f_x)"), ScriptError),
        (redis.ResponseError("WRONGTYPE Operation against a key"), BrokerError),
        (redis.RedisError("other"), BrokerError),
    ],
)
def test_translated_maps_redis_errors(raised: Exception, expected: type[Exception]) -> None:
    with pytest.raises(expected) as info, translated("redis://u:pw@h:1/0"):
        raise raised
    assert info.value.__cause__ is raised
    assert "pw" not in str(info.value)


def test_connection_failed_keeps_the_masked_url() -> None:
    with pytest.raises(ConnectionFailed) as info, translated("redis://u:pw@h:1/0"):
        raise redis.ConnectionError("refused")
    assert info.value.url == "redis://u:***@h:1/0"
    assert info.value.reason == "refused"


def test_translated_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), translated("redis://h:1/0"):
        raise KeyError("x")


@pytest.mark.parametrize("factory", [sync_client, async_client])
def test_clients_reject_urls_that_are_not_redis(factory: object) -> None:
    with pytest.raises(ConfigError, match="invalid Redis URL"):
        factory("http://example.com")  # type: ignore[operator]
    for url in ("http://:s3cret@h/0?password=s3cret", "redis://:s3cret@[::1/0?password=s3cret"):
        with pytest.raises(ConfigError, match="invalid Redis URL") as info:
            factory(url)  # type: ignore[operator]
        assert "s3cret" not in str(info.value)
        assert "password=***" in str(info.value)


async def test_async_clients_use_a_blocking_pool_of_the_callers_size() -> None:
    client = async_client("redis://127.0.0.1:1/0", max_connections=7)
    try:
        pool = client.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool)
        assert pool.max_connections == 7
        assert pool.timeout is not None and pool.timeout >= 30  # waits, then fails loudly
        assert pool.connection_kwargs["socket_timeout"] == 5.0
        assert pool.connection_kwargs["socket_connect_timeout"] > 0
        assert pool.connection_kwargs["socket_keepalive"] is True
    finally:
        await client.aclose()
    default = async_client("redis://127.0.0.1:1/0")
    try:
        assert isinstance(default.connection_pool, aioredis.BlockingConnectionPool)
        assert default.connection_pool.max_connections >= 50
    finally:
        await default.aclose()


@pytest.mark.parametrize("size", [0, -1])
def test_async_client_rejects_an_empty_pool(size: int) -> None:
    with pytest.raises(ConfigError, match="max_connections"):
        async_client("redis://127.0.0.1:1/0", max_connections=size)


async def test_unix_urls_get_no_tcp_options() -> None:
    client = async_client("unix:///tmp/nowhere.sock?db=3", cluster=False)
    try:
        kwargs = client.connection_pool.connection_kwargs
        connection_class = client.connection_pool.connection_class
        assert issubclass(connection_class, aioredis.UnixDomainSocketConnection)
        assert (kwargs["path"], kwargs["db"]) == ("/tmp/nowhere.sock", 3)
        assert not {"socket_keepalive", "socket_keepalive_options"} & set(kwargs)
        assert kwargs["socket_connect_timeout"] > 0
        # Building a connection is where a TCP option on a Unix socket raised TypeError.
        client.connection_pool.make_connection()
    finally:
        await client.aclose()
    sync = sync_client("unix:///tmp/nowhere.sock?db=3", cluster=False)
    try:
        assert not {"socket_keepalive", "socket_keepalive_options"} & set(
            sync.connection_pool.connection_kwargs
        )
        sync.connection_pool.make_connection()
    finally:
        sync.close()


def test_the_sync_client_has_connect_and_socket_timeouts() -> None:
    client = sync_client("redis://127.0.0.1:1/0", cluster=False)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_connect_timeout"] > 0
        assert kwargs["socket_timeout"] > 0
    finally:
        client.close()


def test_batches() -> None:
    assert [list(r) for r in batches(5, 2)] == [[0, 1], [2, 3], [4]]
    assert list(batches(0, 2)) == []
    assert [len(r) for r in batches(1001)] == [500, 500, 1]


def test_enqueue_plan_maps_replies_back_to_the_callers_order() -> None:
    plan = EnqueuePlan(calls=[], positions=[[0, 2], [1, 3], [4]])
    # Entry id (streams), 'delayed' (streams, with a delay), 1 (sorted): created; 0: taken.
    replies = [[b"1-0", 0], [0, 1], [b"delayed"]]
    assert plan.created(replies) == [True, False, False, True, True]


def outgoing(job_id: str, queue: str, level: str, delay_ms: int = 0) -> Outgoing:
    job = Job(id=job_id, task="t", queue=queue, level=level)
    return Outgoing(job, f"data-{job_id}".encode(), delay_ms)


def test_stream_plan_sends_marker_stream_delayed_set_and_once_key_per_job() -> None:
    keys = Keys("ns")
    jobs = [outgoing("a", "q", "low"), outgoing("b", "r", "critical", 1500)]
    plan = StreamBroker(Layout("ns"), Levels()).plan_enqueue(jobs)
    (call,) = plan.calls
    assert call.script == "enqueue_stream"
    # A job without a once-only key passes its marker in that place, with a TTL of 0.
    assert list(call.keys) == [
        keys.job("a"), keys.stream("q", "low"), keys.delayed("q", "low"), keys.job("a"),
        keys.job("b"), keys.stream("r", "critical"), keys.delayed("r", "critical"),
        keys.job("b"), keys.wake(),
    ]  # fmt: skip
    assert list(call.args) == [b"data-a", 0, 0, b"data-b", 1500, 0]
    assert plan.positions == [[0, 1]]
    many = StreamBroker(Layout("ns"), Levels()).plan_enqueue(
        [outgoing(f"j{n}", "q", "low") for n in range(501)]
    )
    assert [len(c.keys) for c in many.calls] == [2001, 5]
    assert [len(c.args) for c in many.calls] == [1500, 3]
    assert many.positions == [list(range(500)), [500]]


def test_sorted_plan_groups_jobs_by_queue_with_five_values_each() -> None:
    keys = Keys("ns")
    producer = SortedBroker(keys, Levels(), aging_seconds=1.0)
    jobs = [
        outgoing("a", "q", "low"),
        outgoing("b", "r", "normal"),
        outgoing("c", "q", "critical", 250),
    ]
    plan = producer.plan_enqueue(jobs)
    assert [call.script for call in plan.calls] == ["enqueue_sorted"] * 2
    assert plan.positions == [[0, 2], [1]]
    q_call, r_call = plan.calls
    q = keys.sorted_keys("q")
    assert list(q_call.keys) == [
        q.waiting,
        q.payloads,
        q.ranks,
        q.clock,
        q.wake,
        q.delayed,
        keys.job("a"),
        keys.job("a"),
        keys.job("c"),
        keys.job("c"),
    ]
    assert list(q_call.args) == [
        "a", 0, b"data-a", 0, 0, "c", 2_000_000, b"data-c", 250, 0,
    ]  # fmt: skip
    assert list(r_call.args) == ["b", 1_000_000, b"data-b", 0, 0]
    assert r_call.keys[0] == keys.sorted_waiting("r")


def test_a_delayed_job_is_decoded_or_listed_by_where_it_waits() -> None:
    job = Job(id="a", task="t", queue="q", level="low", attempt=2, enqueued=1_000.5)
    assert delayed_job(encode(job), 2_000_250, "q", "low") == DelayedJob(
        "a", "t", "q", "low", 2, 2_000.25, 1_000.5, "retry: attempt 2"
    )
    assert delayed_job(encode(job), 1, "q", "*", "a").enqueued_at == 1_000.5
    assert delayed_job(b"\xff not a job", 3_000, "q", "low") == DelayedJob(
        "?", "", "q", "low", 0, 3.0, None
    )
    assert delayed_job("{}", 3_000, "q", "*", "b") == DelayedJob("b", "", "q", "*", 0, 3.0, None)
    unstamped = Job(id="c", task="t", queue="q", level="low")
    assert delayed_job(encode(unstamped), 0, "q", "low").enqueued_at is None


def test_soonest_first_sorts_by_due_time_keeping_ties_in_order_and_cuts() -> None:
    jobs = [DelayedJob(name, "t", "q", "low", 1, due, None) for name, due in
            [("late", 9.0), ("tie-1", 5.0), ("early", 1.0), ("tie-2", 5.0)]]  # fmt: skip
    assert [job.id for job in soonest_first(jobs, 3)] == ["early", "tie-1", "tie-2"]
    assert soonest_first([], 3) == []


def test_reconnect_delay_backs_off_to_a_cap() -> None:
    delays = [reconnect_delay(n) for n in range(12)]
    assert delays[0] == 0.1
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert max(delays) == 5.0
    assert reconnect_delay(10**6) == 5.0
