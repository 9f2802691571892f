"""Stored tracebacks start at the task's own frame: the leading frames of lockgate and of
the standard library (asyncio, the thread pool) that ran it are left out; the chain stays."""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lockgate
from lockgate.core.outcome import ErrorInfo
from lockgate.core.tracebacks import format_error

PACKAGE = Path(lockgate.__file__).parent
RUNNER = PACKAGE / "worker" / "runner.py"
POOL = Path(sysconfig.get_paths()["stdlib"]) / "concurrent" / "futures" / "thread.py"


def frames_of(text: str) -> list[str]:
    return [line.split('"')[1] for line in text.splitlines() if line.startswith('  File "')]


def code_at(path: Path, source: str, name: str) -> Callable[..., Any]:
    """A function whose code claims to live at ``path`` (its frames show that file)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace[name]  # type: ignore[no-any-return]


def hop(path: Path) -> Callable[..., Any]:
    """A frame at ``path`` on the way: calls its first argument with the others."""
    return code_at(path, "def hop(call, *rest):\n    return call(*rest)\n", "hop")


# The runner's frame catches what the run raised, as the worker's does.
catch = code_at(
    RUNNER,
    "def catch(call, *rest):\n    try:\n        call(*rest)\n"
    "    except BaseException as e:\n        return e\n    raise AssertionError('no error')\n",
    "catch",
)


def task() -> None:
    try:
        {}["missing"]
    except KeyError as e:
        raise ValueError("no such order") from e


def test_leading_lockgate_and_stdlib_frames_are_left_out() -> None:
    error = catch(hop(POOL), hop(RUNNER), task)
    text = format_error(error)
    assert frames_of(text)[0] == __file__
    first = next(line for line in text.splitlines() if line.startswith("  File"))
    assert first.endswith(", in task")
    # The chain is kept, the cause's own frames too.
    assert "KeyError: 'missing'" in text
    assert "The above exception was the direct cause of the following exception" in text
    assert text.rstrip().endswith("ValueError: no such order")
    assert str(PACKAGE) not in text and str(POOL) not in text
    assert ErrorInfo.of(error).traceback == text


def test_frames_after_the_task_stay_wherever_they_are() -> None:
    """Only the leading frames go: lockgate or stdlib code the task calls is its own."""
    inner = hop(PACKAGE / "api" / "task.py")

    def calls_lockgate() -> None:
        inner(plain)

    def plain() -> None:
        raise ValueError("no chain")

    text = format_error(catch(hop(POOL), calls_lockgate))
    assert frames_of(text)[:3] == [__file__, str(PACKAGE / "api" / "task.py"), __file__]


def test_an_error_of_lockgate_alone_keeps_every_frame() -> None:
    """Nothing of the user's ran (arguments that do not fit, say): nothing is left out."""
    fail = code_at(PACKAGE / "core" / "arguments.py",
                   "def fail():\n    raise TypeError('no')\n", "fail")  # fmt: skip
    text = format_error(catch(hop(RUNNER), fail))
    assert frames_of(text) == [str(RUNNER), str(RUNNER), str(PACKAGE / "core" / "arguments.py")]
    assert ErrorInfo.of(RuntimeError("never raised")).traceback == "RuntimeError: never raised\n"
