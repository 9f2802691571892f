"""The masks of a secret task's arguments and result (lockgate.core.masking)."""

from __future__ import annotations

from lockgate.core import codec
from lockgate.core.masking import MASK, mask_args, mask_value


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
