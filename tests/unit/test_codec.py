"""Wire encoding: JSON via msgspec, strict on the way in, never pickle."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate import SerializationError
from lockgate.codec import MAX_JOB_ID_BYTES, Job, check_job_id, decode, encode


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
