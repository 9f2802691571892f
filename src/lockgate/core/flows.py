"""Workflows as values: ``chain``, ``group`` and ``then``, and their plan (pure: no I/O).

A flow is a tree of steps; each leaf is a [Message][lockgate.Message]. Its plan numbers
the leaves in declaration order (depth first, as written) and gives each the leaves it
waits for: a chain's step waits for the last jobs of the step before it (a group's last
jobs are all its members' last jobs), a group's members wait for nothing more than the
group does. ``flow.then(step)`` is a chain of the two. The backend keeps, per job, how
many of its parents have not yet succeeded (its barrier) and moves it in the parents'
settle calls (see ``backend/lua/_flow.lua``).

A flow's result has the flow's shape: a job's own result, a chain's last step's, a
group's list of its steps' results.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, cast

import msgspec

from lockgate.core.message import Message
from lockgate.core.records import decode_as
from lockgate.errors import ConfigError

# A job of a flow is named <flow id><SEPARATOR><its position in declaration order>.
SEPARATOR = "."


class Chain:
    """Steps run one after another: each starts once the one before it succeeded
    (``lockgate.chain(a, b, c)``)."""

    kind: Literal["chain", "group"] = "chain"

    def __init__(self, *steps: Step) -> None:
        if not steps:
            raise ConfigError(f"{self.kind}() needs at least one step")
        for step in steps:
            if not isinstance(step, Message | Chain):
                raise ConfigError(
                    f"a step of a {self.kind} is a Message (task.message(...)), a chain or "
                    f"a group, not {type(step).__name__}"
                )
        self.steps: tuple[Step, ...] = steps

    def then(self, step: Step) -> Chain:
        """This flow, then ``step`` once every job of it succeeded (a chord when this is a
        group)."""
        return Chain(self, step)

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.steps))})"


class Group(Chain):
    """Steps run side by side (``lockgate.group(a, b, c)``)."""

    kind: Literal["chain", "group"] = "group"


Step: TypeAlias = Message | Chain


def chain(*steps: Step) -> Chain:
    """Run ``steps`` one after another; each starts after the one before it succeeded.

    Raises:
        ConfigError: no step, or a step that is not a Message, chain or group.
    """
    return Chain(*steps)


def group(*steps: Step) -> Group:
    """Run ``steps`` side by side.

    Raises:
        ConfigError: no step, or a step that is not a Message, chain or group.
    """
    return Group(*steps)


# A flow's shape, stored with it: a job's position, or [kind, [shapes...]].
Shape: TypeAlias = int | list[Any]


@dataclass(frozen=True, slots=True)
class FlowNode:
    """One job of a planned flow.

    Attributes:
        message: the job, with its id and flow fields set.
        parents: the positions of the jobs it waits for, in declaration order.
        children: the positions of the jobs that wait for it.
    """

    message: Message
    parents: tuple[int, ...]
    children: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """A flow ready to store: its jobs in declaration order, and its shape."""

    flow_id: str
    nodes: tuple[FlowNode, ...]
    shape: Shape

    @property
    def roots(self) -> list[int]:
        """The jobs that wait for nothing: they are queued when the flow is."""
        return [i for i, node in enumerate(self.nodes) if not node.parents]

    @property
    def job_ids(self) -> list[str]:
        """Every job's id, in declaration order."""
        return [node.message.job.id for node in self.nodes]

    def shape_json(self) -> bytes:
        """The shape, encoded (kept with the flow, for its result)."""
        return msgspec.json.encode(self.shape)


@dataclass
class _Builder:
    flow_id: str
    messages: list[Message] = field(default_factory=list)
    parents: list[list[int]] = field(default_factory=list)

    def add(self, step: Step, after: Sequence[int]) -> tuple[Shape, list[int]]:
        """Add ``step``, its first jobs waiting for ``after``; its shape and last jobs."""
        if isinstance(step, Message):
            if step.named:
                raise ConfigError(
                    f"job {step.job.id!r} of task {step.job.task!r} has its own job_id: "
                    "the ids of a flow's jobs derive from the flow's id (give "
                    "enqueue_flow a flow_id instead)"
                )
            position = len(self.messages)
            job = msgspec.structs.replace(
                step.job, id=job_id(self.flow_id, position), flow=self.flow_id
            )
            self.messages.append(replace(step, job=job))
            self.parents.append(list(after))
            return position, [position]
        shapes: list[Shape] = []
        if isinstance(step, Group):
            last: list[int] = []
            for member in step.steps:
                shape, ends = self.add(member, after)
                shapes.append(shape)
                last += ends
            return ["group", shapes], last
        ends = list(after)
        for member in step.steps:
            shape, ends = self.add(member, ends)
            shapes.append(shape)
        return ["chain", shapes], ends


def plan(flow: Step, flow_id: str) -> FlowPlan:
    """The jobs of ``flow`` under ``flow_id``, with who waits for whom (pure).

    Raises:
        ConfigError: a step given its own ``job_id``, or a flow that is not a chain, group
            or Message.
    """
    if not isinstance(flow, Message | Chain):
        raise ConfigError(
            f"enqueue_flow takes a chain, a group or a Message, not {type(flow).__name__}"
        )
    builder = _Builder(flow_id)
    shape, _ = builder.add(flow, [])
    children: list[list[int]] = [[] for _ in builder.messages]
    for child, parents in enumerate(builder.parents):
        for parent in parents:
            children[parent].append(child)
    nodes = tuple(
        FlowNode(message, tuple(parents), tuple(kids))
        for message, parents, kids in zip(builder.messages, builder.parents, children, strict=True)
    )
    return FlowPlan(flow_id, nodes, shape)


def job_id(flow_id: str, position: int) -> str:
    """The id of the job at ``position`` (declaration order) of flow ``flow_id``."""
    return f"{flow_id}{SEPARATOR}{position}"


def position_of(job: str, flow_id: str) -> int:
    """The position of job ``job`` in flow ``flow_id`` (the inverse of :func:`job_id`)."""
    return int(job[len(flow_id) + len(SEPARATOR) :])


def assemble(shape: Shape, results: Sequence[Any]) -> Any:
    """A flow's result from its jobs' results (by position), in the flow's shape: a job's
    own, a chain's last step's, a group's list of its steps'."""
    if isinstance(shape, int):
        return results[shape]
    kind, steps = cast(tuple[str, list[Shape]], shape)
    if kind == "chain":
        return assemble(steps[-1], results)
    return [assemble(step, results) for step in steps]


def returns_of(fn: Callable[..., Any]) -> Any:
    """The type a stored result of ``fn`` decodes to: its return annotation, else Any."""
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:  # an annotation that does not resolve here: take it as it is
        return Any


def decode_result(data: bytes | None, returns: Any) -> Any:
    """A kept result (JSON) as its type says; None when there is none."""
    if data is None:
        return None
    return decode_as(data, returns)


def decode_shape(data: bytes) -> Shape:
    """A stored shape."""
    return cast(Shape, msgspec.json.decode(data))
