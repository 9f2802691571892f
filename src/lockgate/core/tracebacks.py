"""Tracebacks as a task's author reads them: from the task's own frame. Pure, no I/O.

A failed run's traceback would open with the frames that ran the task: the runner's, the
thread pool's or asyncio's, up to six of them before the first line the user wrote. The
text kept for dead letters, job statuses and logs leaves those leading frames out, in
every exception of the chain; the frames the task itself reached (lockgate's included,
when it called lockgate) stay. A traceback made of such frames alone (an error of
lockgate's own, arguments that did not fit) is kept whole.
"""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

# Frames that run a task: lockgate's package, and the standard library's (asyncio, the
# thread pool), though not what was installed beside it (site-packages may sit inside).
_PACKAGE = str(Path(__file__).resolve().parent.parent) + "/"
_PATHS = sysconfig.get_paths()
_STDLIB = tuple({_PATHS["stdlib"] + "/", _PATHS["platstdlib"] + "/"})
_INSTALLED = tuple({_PATHS["purelib"] + "/", _PATHS["platlib"] + "/"})


def _machinery(filename: str) -> bool:
    if filename.startswith(_PACKAGE):
        return True
    return filename.startswith(_STDLIB) and not filename.startswith(_INSTALLED)


def _trimmed(stack: traceback.StackSummary) -> traceback.StackSummary:
    for index, frame in enumerate(stack):
        if not _machinery(frame.filename):
            return traceback.StackSummary.from_list(stack[index:]) if index else stack
    return stack  # nothing but lockgate's and the stdlib's: keep it all


def format_error(error: BaseException) -> str:
    """The text of an exception and its chain (``__cause__``, ``__context__``, the members
    of an exception group), each traceback from its first frame that is neither
    lockgate's nor the standard library's.

    Args:
        error: the exception.

    Returns:
        What ``traceback.format_exception(error)`` gives, without those leading frames.
    """
    formatted = traceback.TracebackException.from_exception(error)
    pending, seen = [formatted], set()
    while pending:
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        each.stack = _trimmed(each.stack)
        pending.extend(e for e in (each.__cause__, each.__context__) if e is not None)
        pending.extend(each.exceptions or ())
    return "".join(formatted.format())
