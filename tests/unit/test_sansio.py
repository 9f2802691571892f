"""The shells of sans-IO operations (core.sansio): one generator, driven sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest

from lockgate.core.sansio import drive, drive_async


async def _later(value: Any) -> Any:
    await asyncio.sleep(0)
    if isinstance(value, BaseException):
        raise value
    return value


def _drive_sync(steps: Generator[Any, Any, Any]) -> Any:
    return drive(steps, _now)


def _drive_async(steps: Generator[Any, Any, Any]) -> Any:
    return asyncio.run(drive_async(steps, _later))


def _now(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


class _Stop(BaseException):
    """Not an Exception (as KeyboardInterrupt or a cancellation are not)."""


SHELLS: list[Callable[[Generator[Any, Any, Any]], Any]] = [_drive_sync, _drive_async]


@pytest.mark.parametrize("shell", SHELLS, ids=["sync", "async"])
def test_each_reply_goes_back_and_the_return_value_comes_out(
    shell: Callable[[Generator[Any, Any, Any]], Any],
) -> None:
    def steps() -> Generator[Any, Any, list[Any]]:
        first = yield 1
        second = yield first + 1
        return [first, second]

    assert shell(steps()) == [1, 2]


@pytest.mark.parametrize("shell", SHELLS, ids=["sync", "async"])
def test_an_error_is_raised_where_it_was_asked_for_and_can_be_handled_there(
    shell: Callable[[Generator[Any, Any, Any]], Any],
) -> None:
    seen: list[BaseException] = []
    boom = ValueError("boom")

    def steps() -> Generator[Any, Any, str]:
        try:
            yield boom
        except ValueError as e:
            seen.append(e)
            yield "cleanup"
        return "handled"

    assert shell(steps()) == "handled"
    assert seen == [boom]


@pytest.mark.parametrize("error", [ValueError("boom"), _Stop()])
@pytest.mark.parametrize("shell", SHELLS, ids=["sync", "async"])
def test_an_error_not_handled_propagates_itself_after_the_generator_cleaned_up(
    shell: Callable[[Generator[Any, Any, Any]], Any], error: BaseException
) -> None:
    cleaned: list[bool] = []

    def steps() -> Generator[Any, Any, None]:
        try:
            yield error
        finally:
            cleaned.append(True)

    with pytest.raises(type(error)) as raised:
        shell(steps())
    assert raised.value is error
    assert cleaned == [True]


@pytest.mark.parametrize("shell", SHELLS, ids=["sync", "async"])
def test_a_generator_that_asks_for_nothing_returns_at_once(
    shell: Callable[[Generator[Any, Any, Any]], Any],
) -> None:
    def steps() -> Generator[Any, Any, int]:
        return 7
        yield  # a generator

    assert shell(steps()) == 7
