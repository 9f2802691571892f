"""The masks of a secret task's arguments and result (lockgate.core.masking)."""

from __future__ import annotations

import pytest

from lockgate.cli.job import job_fields, job_lines
from lockgate.core import codec
from lockgate.core.masking import MASK, mask_args, mask_value, shown_job
from lockgate.core.status import JobInfo
from lockgate.core.tasks import TaskSettings
from lockgate.errors import ConfigError


def test_secret_arguments_are_masked_and_keywords_keep_their_names() -> None:
    args, kwargs = mask_args(["4111 1111", 12], {"email": "a@b.c", "n": 3}, secret=True)
    assert args == [MASK, MASK]
    assert kwargs == {"email": MASK, "n": MASK}


def test_plain_arguments_are_copies_left_as_they_are() -> None:
    given_args, given_kwargs = (1, "x"), {"k": [1]}
    args, kwargs = mask_args(given_args, given_kwargs, secret=False)
    assert (args, kwargs) == ([1, "x"], {"k": [1]})
    kwargs["k"] = 2
    assert given_kwargs == {"k": [1]}


def test_a_value_is_masked_only_when_secret() -> None:
    assert mask_value({"token": "t"}, secret=True) == MASK
    assert mask_value({"token": "t"}, secret=False) == {"token": "t"}
    assert mask_value(None, secret=True) == MASK


def test_the_secret_flag_costs_no_byte_unless_set() -> None:
    plain = codec.Job(id="j", task="t", queue="q", level="high")
    assert b"secret" not in codec.encode(plain)
    secret = codec.Job(id="j", task="t", queue="q", level="high", secret=True)
    assert codec.decode(codec.encode(secret)).secret is True


def test_a_stored_secret_job_is_shown_with_its_arguments_masked() -> None:
    job = codec.Job(id="j", task="t", queue="q", level="high", args=["tok"],
                    kwargs={"email": "a@b.c"}, secret=True)  # fmt: skip
    shown, secret = shown_job(codec.encode(job).decode())
    assert secret
    decoded = codec.decode(shown)
    assert (decoded.args, decoded.kwargs, decoded.id) == ([MASK], {"email": MASK}, "j")


def test_a_plain_job_is_shown_byte_for_byte_even_with_the_flag_in_an_argument() -> None:
    stored = codec.encode(codec.Job(id="j", task="t", queue="q", level="high",
                                    args=['"secret":true'])).decode()  # fmt: skip
    assert shown_job(stored) == (stored, False)
    tricky = codec.encode(codec.Job(id="j", task="t", queue="q", level="high",
                                    kwargs={"x": {"secret": True}})).decode()  # fmt: skip
    assert shown_job(tricky) == (tricky, False)
    assert shown_job("not json") == ("not json", False)
    assert shown_job('{"secret":true, broken') == (MASK, True)


def test_a_secret_task_setting_is_a_bool() -> None:
    assert TaskSettings(secret_args=True).secret_args is True
    assert TaskSettings().secret_args is False
    with pytest.raises(ConfigError, match="secret_args must be True or False"):
        TaskSettings(secret_args="yes")  # type: ignore[arg-type]


def test_lockgate_job_shows_progress_and_masks_a_secret_result() -> None:
    info = JobInfo("j", "done", "t", 1, result={"card": "tok"}, result_kept=True,
                   progress=0.42, progress_note="rows")  # fmt: skip
    lines = job_lines(info, secret=True)
    assert "progress: 42% (rows)" in lines and f'result: "{MASK}"' in lines
    assert job_fields(info)["result"] == {"card": "tok"}
    assert job_lines(JobInfo("j", "running", progress=1.0))[-1] == "progress: 100%"


def test_a_job_of_a_task_the_viewer_declares_secret_is_masked_without_the_flag() -> None:
    stored = codec.encode(codec.Job(id="j", task="t", queue="q", level="high", args=["tok"],
                                    kwargs={"email": "a@b.c"})).decode()  # fmt: skip
    shown, secret = shown_job(stored, declared=True)
    assert secret and "tok" not in shown and "a@b.c" not in shown
    assert codec.decode(shown).args == [MASK]
    assert shown_job("not json", declared=True) == (MASK, True)
