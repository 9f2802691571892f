"""A flow as ``lockgate flow`` and the dashboard show it: its jobs, which of them were
queued (and so have a job record to look at), the dead letter of each dead one, and
which flow a job id belongs to.

The flow itself comes from [App.flow][lockgate.App.flow]; dead letters from
:func:`lockgate.ops.deadletter.list_dead`, searched among the oldest :data:`LETTER_SCAN`
only, so a page never reads an unbounded dead-letter queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lockgate.api.app import App
from lockgate.api.flows import FlowInfo, FlowJob
from lockgate.core import flows
from lockgate.ops import deadletter

__all__ = ["LETTER_SCAN", "FlowJobView", "FlowView", "flow_of_job", "flow_view", "split_job_id"]

# Dead letters read (oldest first) to find those of a flow's dead jobs.
LETTER_SCAN = 1000
# The states of a job that was queued, whatever its parents' states say now.
QUEUED_STATES = frozenset({"delayed", "running", "done", "dead"})


@dataclass(frozen=True, slots=True)
class FlowJobView:
    """One job of a flow, as shown.

    Attributes:
        job: the job as [App.flow][lockgate.App.flow] tells it.
        queued: whether it was queued (every job it waits on succeeded), so that it has a
            job record; False for a job still held back by its parents.
        letter: the id of its dead letter, for a dead job whose letter was found.
    """

    job: FlowJob
    queued: bool
    letter: str | None = None


@dataclass(frozen=True, slots=True)
class FlowView:
    """A flow, as shown.

    Attributes:
        info: what [App.flow][lockgate.App.flow] tells of it.
        jobs: its jobs, in declaration order.
        letters_searched: how many dead letters were read to find the dead jobs'
            letters (0: no job is dead, none was read).
        letters_complete: whether those were all the dead letters there are (when not,
            a dead job's letter may be among the newer ones).
    """

    info: FlowInfo
    jobs: tuple[FlowJobView, ...]
    letters_searched: int = 0
    letters_complete: bool = True

    @property
    def missing_letters(self) -> int:
        """Dead jobs whose letter was not found among the letters searched."""
        return sum(view.job.state == "dead" and view.letter is None for view in self.jobs)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the flow's id, state, creation time (ISO 8601 or None) and
        jobs (id, task, state, waits_on, dead_letter)."""
        created = self.info.created_at
        return {
            "flow_id": self.info.flow_id,
            "state": self.info.state,
            "created_at": created.isoformat() if created is not None else None,
            "jobs": [
                {
                    "id": view.job.id,
                    "task": view.job.task,
                    "state": view.job.state,
                    "waits_on": list(view.job.waits_on),
                    "dead_letter": view.letter,
                }
                for view in self.jobs
            ],
        }


def split_job_id(job_id: str) -> tuple[str, int] | None:
    """The flow id and position a job id of a flow would have (``<flow id>.<n>``), or
    None when ``job_id`` has no such form (pure: whether the flow exists is not asked)."""
    flow_id, _, position = job_id.rpartition(flows.SEPARATOR)
    if not flow_id or not position.isascii() or not position.isdigit():
        return None
    if job_id != flows.job_id(flow_id, int(position)):  # "x.07" is no job of flow "x"
        return None
    return flow_id, int(position)


def _queued(job: FlowJob, states: dict[str, str]) -> bool:
    """Whether ``job`` was queued: a job is queued once every job it waits on succeeded
    (the flow's roots at once); a job held back and then cancelled with its flow never
    was."""
    if job.state in QUEUED_STATES:
        return True
    return all(states.get(parent) == "done" for parent in job.waits_on)


def flow_view(app: App, flow_id: str, letter_scan: int = LETTER_SCAN) -> FlowView:
    """What is known of flow ``flow_id``, with the dead letters of its dead jobs.

    Args:
        app: the flow's App.
        flow_id: the flow's id.
        letter_scan: the most dead letters read (oldest first) to find the dead jobs'.

    Returns:
        The view; its ``info.state`` is ``unknown`` (and it has no jobs) for a flow never
        enqueued or expired.

    Raises:
        ConnectionFailed: Redis cannot be reached.
    """
    info = app.flow(flow_id)
    states: dict[str, str] = {job.id: job.state for job in info.jobs}
    letters: dict[str, str] = {}
    searched, complete = 0, True
    dead = {job.id for job in info.jobs if job.state == "dead"}
    if dead:
        found = deadletter.list_dead(app, letter_scan)
        searched, complete = len(found), len(found) < letter_scan
        for letter in found:
            if letter.job_id in dead:
                letters.setdefault(letter.job_id, letter.id)  # the oldest, if replayed twice
    jobs = tuple(FlowJobView(job, _queued(job, states), letters.get(job.id)) for job in info.jobs)
    return FlowView(info, jobs, searched, complete)


def flow_of_job(app: App, job_id: str) -> str | None:
    """The flow job ``job_id`` belongs to: the flow its id names (``<flow id>.<n>``),
    when that flow is known and has a job at that position; else None.

    One cheap read (the flow's counts), and none for an id of no flow's form.

    Raises:
        ConnectionFailed: Redis cannot be reached.
        AccessDenied: the user may not read the flow's records.
    """
    split = split_job_id(job_id)
    if split is None:
        return None
    flow_id, position = split
    summary = app.store.flows.summary(flow_id)
    return flow_id if position < summary.total else None
