"""Wire encoding: JSON via msgspec, strict on the way in, never pickle."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from lockgate import SerializationError
from lockgate.core import codec
from lockgate.core.codec import (
    MAX_DEPTH,
    MAX_JOB_ID_BYTES,
    Job,
    check_job_id,
    decode,
    encode,
    nesting_depth,
)


def test_round_trip() -> None:
    job = Job(
        id="job-1",
        task="send",
        queue="mail",
        level="critical",
        args=[1, "two", [3.5, None], {"k": True}],
        kwargs={"to": "ü@example.com", "n": 2**40},
        attempt=3,
        enqueued=1700000000.25,
    )
    data = encode(job)
    assert isinstance(data, bytes)
    assert decode(data) == job
    assert decode(data.decode()) == job


def test_defaults_are_omitted_and_restored() -> None:
    job = Job(id="j", task="t", queue="q", level="low")
    data = encode(job)
    assert b"attempt" not in data and b"args" not in data
    again = decode(data)
    assert (again.args, again.kwargs, again.attempt, again.enqueued) == ([], {}, 1, 0.0)


def test_encoding_is_plain_json() -> None:
    import json

    data = encode(Job(id="j", task="t", queue="q", level="low", args=[1]))
    assert json.loads(data) == {"id": "j", "task": "t", "queue": "q", "level": "low", "args": [1]}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\x80\x81\xfe",
        b"[1, 2]",
        b'{"id": "j"}',
        b'{"id": 1, "task": "t", "queue": "q", "level": "low"}',
        b'{"id": "j", "task": "t", "queue": "q", "level": "low", "attempt": "x"}',
    ],
)
def test_undecodable_data(data: bytes) -> None:
    with pytest.raises(SerializationError, match="undecodable"):
        decode(data)


@pytest.mark.parametrize("arg", [object(), 1 + 2j, len, {(1, 2): 3}])
def test_unencodable_arguments(arg: Any) -> None:
    with pytest.raises(SerializationError, match="job 'j' of task 't'"):
        encode(Job(id="j", task="t", queue="q", level="low", args=[arg]))


def test_job_id_limits() -> None:
    assert check_job_id("a") == "a"
    assert check_job_id("x" * MAX_JOB_ID_BYTES) == "x" * MAX_JOB_ID_BYTES
    assert MAX_JOB_ID_BYTES == 256
    with pytest.raises(SerializationError, match="longer than 256 bytes"):
        check_job_id("x" * (MAX_JOB_ID_BYTES + 1))
    # The limit is in bytes, not characters: 129 two-byte characters are 258 bytes.
    with pytest.raises(SerializationError, match="longer than 256 bytes"):
        check_job_id("é" * 129)
    assert check_job_id("é" * 128) == "é" * 128


@pytest.mark.parametrize("job_id", ["", None, 5, b"bytes"])
def test_job_id_must_be_a_non_empty_string(job_id: Any) -> None:
    with pytest.raises(SerializationError, match="non-empty string"):
        check_job_id(job_id)


def nested(depth: int) -> Any:
    """A list nested ``depth`` deep: 0 is a scalar, 1 is ``[]``."""
    if depth == 0:
        return 0
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def raw_entry(depth: int) -> bytes:
    """A stored job whose one argument is a list nested ``depth`` deep."""
    return (
        b'{"id":"x","task":"t","queue":"default","level":"normal","args":['
        + b"[" * depth
        + b"]" * depth
        + b"]}"
    )


def call_near_recursion_limit(fn: Any, margin: int = 40) -> Any:
    """Call ``fn()`` with the Python stack within ``margin`` frames of the limit."""
    used = 0
    frame = sys._getframe()
    while frame is not None:
        used += 1
        frame = frame.f_back  # type: ignore[assignment]

    def descend(n: int) -> Any:
        return descend(n - 1) if n > 0 else fn()

    return descend(sys.getrecursionlimit() - used - margin)


def test_nesting_depth_counts_lists_and_objects_outside_strings() -> None:
    assert nesting_depth(b"1") == 0
    assert nesting_depth(b"[]") == 1
    assert nesting_depth(b'{"a":[1,{"b":[]}],"c":{}}') == 4
    # Brackets inside strings, escaped quotes and escaped backslashes do not count.
    assert nesting_depth(b'["[[[{{{", "\\"[[[", "\\\\", []]') == 2
    assert nesting_depth(b'{"k\\"[": "]]]]"}') == 1


@pytest.mark.parametrize("depth", [0, 1, MAX_DEPTH])
def test_arguments_up_to_the_depth_limit_round_trip(depth: int) -> None:
    job = Job(id="j", task="t", queue="q", level="low", args=[nested(depth)])
    assert decode(encode(job)) == job


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 5_000])
def test_encode_rejects_arguments_over_the_depth_limit(depth: int) -> None:
    job = Job(id="j", task="t", queue="q", level="low", kwargs={"tree": nested(depth)})
    with pytest.raises(SerializationError, match=f"job 'j' of task 't'.*limit of {MAX_DEPTH}"):
        encode(job)


def test_the_depth_limit_leaves_room_on_the_stack() -> None:
    # Why 64: far below the default recursion limit, so a job at the limit still
    # decodes when the worker is deep in its own call stack.
    assert 8 <= MAX_DEPTH <= sys.getrecursionlimit() // 8


def test_brackets_inside_strings_do_not_count_towards_depth() -> None:
    job = Job(id="j", task="t", queue="q", level="low", args=["[" * 5_000, "{" * 5_000])
    assert decode(encode(job)) == job


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 5_000])
def test_decode_rejects_stored_entries_over_the_depth_limit(depth: int) -> None:
    with pytest.raises(SerializationError, match=f"undecodable.*limit of {MAX_DEPTH}"):
        decode(raw_entry(depth))


def test_decode_deep_in_the_call_stack_fails_as_serialization_error() -> None:
    def attempt(data: bytes) -> BaseException | Job:
        try:
            return decode(data)
        except Exception as e:  # anything else than SerializationError fails the test
            return e

    # Over the limit: refused before msgspec recurses at all.
    over = call_near_recursion_limit(lambda: attempt(raw_entry(5_000)))
    assert isinstance(over, SerializationError), repr(over)
    # Within the limit, but with almost no stack left: msgspec's RecursionError is
    # translated, not raised.
    within = call_near_recursion_limit(lambda: attempt(raw_entry(MAX_DEPTH)), margin=25)
    assert isinstance(within, SerializationError), repr(within)
    assert isinstance(within.__cause__, RecursionError)


def test_encode_deep_in_the_call_stack_fails_as_serialization_error() -> None:
    job = Job(id="j", task="t", queue="q", level="low", args=[nested(MAX_DEPTH)])

    def attempt() -> BaseException | bytes:
        try:
            return encode(job)
        except Exception as e:
            return e

    result = call_near_recursion_limit(attempt, margin=25)
    assert isinstance(result, SerializationError), repr(result)
    assert isinstance(result.__cause__, RecursionError)


@pytest.mark.parametrize(
    "failure", [RecursionError("deep"), ValueError("bad"), MemoryError(), KeyError("k")]
)
def test_any_failure_to_decode_is_a_serialization_error(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Failing:
        def decode(self, data: bytes | str) -> Job:
            raise failure

    monkeypatch.setattr(codec, "_decoder", Failing())
    with pytest.raises(SerializationError, match="undecodable") as caught:
        decode(encode(Job(id="j", task="t", queue="q", level="low")))
    assert caught.value.__cause__ is failure


def test_unencodable_strings_are_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="job 'j' of task 't'"):
        encode(Job(id="j", task="t", queue="q", level="low", args=["\ud800"]))
