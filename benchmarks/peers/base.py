"""The interface every library's adapter implements, and what it says about itself."""

from __future__ import annotations

import os
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

Kind = Literal["noop", "low"]
LOW_JOB_SECONDS = 0.001


@dataclass(frozen=True)
class Profile:
    """How a library is configured here; printed with the results.

    Attributes:
        concurrency: jobs one worker process runs at once.
        worker: the worker command, as a user would type it.
        config: the settings that differ from the library's defaults, and why.
        bulk: how ``enqueue_bulk`` sends jobs (its bulk API, or what stands in for one).
        priorities: how critical jobs get ahead of low ones in one worker.
        delivery: when a job is acknowledged, and what a crash loses.
    """

    concurrency: int
    worker: str
    config: str
    bulk: str
    priorities: str
    delivery: str


class Adapter(ABC):
    """One library: enqueue jobs, and the command that starts one worker process.

    The three tasks every adapter registers: ``noop`` (reports to ``probe.noop_done``),
    ``low`` (sleeps 1 ms at low priority, reports to ``probe.low_done``) and
    ``critical(sent)`` (reports its wait to ``probe.critical_started``).
    """

    name: ClassVar[str]
    distribution: ClassVar[str]  # the PyPI name whose version is reported
    profile: ClassVar[Profile]
    has_bulk_api: ClassVar[bool] = True

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect (producers that need it)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Disconnect."""

    def library_version(self) -> str | None:
        """The library's version when it is no Python distribution (a Node package)."""
        return None

    @abstractmethod
    async def enqueue_one(self, n: int, kind: Kind) -> None:
        """Enqueue ``n`` jobs of ``kind``, one call per job."""

    @abstractmethod
    async def enqueue_bulk(self, n: int, kind: Kind) -> None:
        """Enqueue ``n`` jobs of ``kind`` through the library's bulk API."""

    @abstractmethod
    async def enqueue_critical(self, sent: float) -> None:
        """Enqueue one critical job; ``sent`` is now, by the wall clock."""

    @abstractmethod
    def worker_command(self) -> list[str]:
        """argv that runs one worker process for the three tasks."""


def env(name: str) -> str:
    """A setting the runner passes to adapters and their workers."""
    return os.environ[name]


def namespace() -> str:
    """This run's name for queues, namespaces and prefixes (``BENCH_NS``)."""
    return os.environ.get("BENCH_NS", "bench")


def python() -> str:
    """The interpreter of this library's environment."""
    return sys.executable
