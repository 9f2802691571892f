"""The project's Django tasks: sync, async, raising, taking the context, prioritised,
on another queue; and a plain function a job may name but a worker must not run."""

from __future__ import annotations

import asyncio
from typing import Any

try:  # Django 6
    from django.tasks import TaskContext, task
except ImportError:  # Django 4.2-5.2 with the django-tasks backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]

CALLED: list[str] = []  # what plain() was asked to do (it must never be)


class Boom(Exception):
    """What fail() raises."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def greet(name: str) -> str:
    await asyncio.sleep(0)
    return f"hello {name}"


@task
def fail(message: str) -> None:
    raise Boom(message)


@task(takes_context=True)
def introspect(context: TaskContext, tag: str) -> dict[str, Any]:
    return {
        "tag": tag,
        "attempt": context.attempt,
        "id": context.task_result.id,
        "status": str(context.task_result.status),
        "worker_ids": context.task_result.worker_ids,
    }


@task(priority=60)
def urgent(n: int) -> int:
    return n


@task(priority=-60)
def eventually(n: int) -> int:
    return n


@task(queue_name="emails")
def send(to: str) -> str:
    return f"sent to {to}"


def plain() -> None:
    CALLED.append("plain")


@task
def django_ready() -> bool:
    """Whether Django was set up in the process running it (a worker's startup hook)."""
    from django.apps import apps

    return apps.ready
