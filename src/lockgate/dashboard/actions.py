"""What the dashboard's buttons do: each action checks its form fields, says what it is
about to do (the confirmation page), then does it and says what it did.

Every action changes state, so the web layer only reaches one through a POST that passed
the access check, the read-only check and the CSRF check, and runs it only once its
confirmation was sent (``confirm=yes``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from lockgate.api.app import App
from lockgate.core.status import CancelOutcome
from lockgate.ops import deadletter, queues
from lockgate.ops.inspect import queue_stats

Form = Mapping[str, str]
ALL_LETTERS = 1_000_000  # as `lockgate dlq replay --all`: every letter there is


class Refused(Exception):
    """An action's form does not name something that exists (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Action:
    """One button's action.

    Attributes:
        fields: the form fields it needs (besides the CSRF token and the confirmation).
        back: the page shown after it ran (``overview``, ``dead``, ``job``).
        describe: the confirmation's question, e.g. "Replay 3 dead letters of task x?".
        run: does it; returns what it did, in one line.
    """

    fields: tuple[str, ...]
    back: str
    describe: Callable[[App, Form], Awaitable[str]]
    run: Callable[[App, Form], Awaitable[str]]


def _queue(app: App, form: Form) -> str:
    queue = form["queue"]
    if queue not in app.queues:
        raise Refused(f"queue {queue!r} is not served by this app")
    return queue


def _level(app: App, form: Form) -> str | None:
    level = form.get("level") or None
    if level is not None and level not in app.levels.names:
        raise Refused(f"level {level!r} is not declared by this app")
    return level


async def _letter(app: App, form: Form) -> deadletter.DeadLetter:
    letter = await run_in_threadpool(deadletter.show_dead, app, form["entry_id"])
    if letter is None:
        raise Refused(f"no dead letter with id {form['entry_id']!r}")
    return letter


async def _letters(app: App, task: str | None) -> list[deadletter.DeadLetter]:
    letters = await run_in_threadpool(deadletter.list_dead, app, ALL_LETTERS)
    return [letter for letter in letters if task is None or letter.task == task]


async def _replayed(app: App, letters: list[deadletter.DeadLetter]) -> str:
    results = await run_in_threadpool(deadletter.replay, app, letters)
    # Only what this replay enqueued counts; letters gone meanwhile (another replay took
    # them) are counted apart, and the first few that stay say why.
    done = sum(result.outcome == "enqueued" for result in results)
    gone = sum(result.outcome == "gone" for result in results)
    notes = [f"{gone} gone: {deadletter.DETAILS['gone']}"] if gone else []
    notes += [
        f"{r.job_id}: {r.outcome} {r.detail}".rstrip()
        for r in results
        if r.outcome not in ("enqueued", "gone")
    ][:3]
    line = f"replayed {done} of {len(results)} dead letters"
    return f"{line} ({'; '.join(notes)})" if notes else line


async def _describe_replay(app: App, form: Form) -> str:
    letter = await _letter(app, form)
    return f"Replay dead letter {letter.id} (job {letter.job_id}, task {letter.task})?"


async def _run_replay(app: App, form: Form) -> str:
    return await _replayed(app, [await _letter(app, form)])


async def _describe_replay_task(app: App, form: Form) -> str:
    count = len(await _letters(app, form["task"]))
    return f"Replay the {count} dead letters of task {form['task']}?"


async def _run_replay_task(app: App, form: Form) -> str:
    return await _replayed(app, await _letters(app, form["task"]))


async def _describe_replay_all(app: App, form: Form) -> str:
    return f"Replay all {await run_in_threadpool(deadletter.count_dead, app)} dead letters?"


async def _run_replay_all(app: App, form: Form) -> str:
    return await _replayed(app, await _letters(app, None))


async def _describe_purge_dead(app: App, form: Form) -> str:
    count = await run_in_threadpool(deadletter.count_dead, app)
    return f"Delete all {count} dead letters? They cannot be replayed afterwards."


async def _run_purge_dead(app: App, form: Form) -> str:
    return f"purged {await run_in_threadpool(deadletter.purge, app)} dead letters"


async def _describe_pause(app: App, form: Form) -> str:
    queue = _queue(app, form)
    return f"Pause queue {queue}? It keeps accepting jobs; workers take none from it."


async def _run_pause(app: App, form: Form) -> str:
    return await _switch(app, form, queues.pause, "paused")


async def _describe_resume(app: App, form: Form) -> str:
    return f"Resume queue {_queue(app, form)}? Workers take its jobs again."


async def _run_resume(app: App, form: Form) -> str:
    return await _switch(app, form, queues.resume, "resumed")


async def _switch(
    app: App, form: Form, switch: Callable[[App, str], Awaitable[None]], done: str
) -> str:
    """Pause or resume the form's queue; what was done, for the page."""
    queue = _queue(app, form)
    await switch(app, queue)
    return f"{done} queue {queue}"


async def _describe_purge_queue(app: App, form: Form) -> str:
    queue, level = _queue(app, form), _level(app, form)
    stats = await queue_stats(app, (queue,))
    waiting = sum(r.waiting for r in stats.levels if level is None or r.level in (level, "*"))
    where = f"queue {queue}" + (f", level {level}" if level else "")
    return f"Delete the {waiting} waiting jobs of {where}? Running and delayed jobs stay."


async def _run_purge_queue(app: App, form: Form) -> str:
    queue, level = _queue(app, form), _level(app, form)
    purged = await queues.purge(app, queue, level=level)
    return f"purged {purged} waiting jobs of queue {queue}" + (f", level {level}" if level else "")


async def _describe_cancel(app: App, form: Form) -> str:
    info = await app.job_async(form["job_id"])
    return f"Cancel job {info.id} ({info.status}, task {info.task or '?'})?"


async def _run_cancel(app: App, form: Form) -> str:
    job_id = form["job_id"]
    outcome = await app.cancel_async(job_id)
    if outcome is CancelOutcome.CANCELLED:
        return f"cancelled job {job_id}"
    if outcome is CancelOutcome.CANCELLING:
        return f"job {job_id} is running: its worker was told to stop it"
    if outcome is CancelOutcome.ENDED:
        return f"job {job_id} was not cancelled: it had ended"
    return f"job {job_id} was not cancelled: it is unknown"


ACTIONS: dict[str, Action] = {
    "replay": Action(("entry_id",), "dead", _describe_replay, _run_replay),
    "replay-task": Action(("task",), "dead", _describe_replay_task, _run_replay_task),
    "replay-all": Action((), "dead", _describe_replay_all, _run_replay_all),
    "purge-dead": Action((), "dead", _describe_purge_dead, _run_purge_dead),
    "pause": Action(("queue",), "overview", _describe_pause, _run_pause),
    "resume": Action(("queue",), "overview", _describe_resume, _run_resume),
    "purge-queue": Action(("queue",), "overview", _describe_purge_queue, _run_purge_queue),
    "cancel": Action(("job_id",), "job", _describe_cancel, _run_cancel),
}
