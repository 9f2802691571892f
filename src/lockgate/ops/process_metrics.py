"""The build, process and Python series of a worker's metrics (see :mod:`lockgate.ops.metrics`).

- ``lockgate_build_info{version,python_version}``: a gauge of 1 (the multiprocess mode has
  no Info metrics), made when scraped by :class:`BuildInfoCollector`, so a supervisor
  serves it without any worker process running;
- one process: prometheus_client's own ``ProcessCollector`` (``process_*``),
  ``PlatformCollector`` (``python_info``) and ``GCCollector`` (``python_gc_*``) on the
  worker's registry (:func:`add_runtime_collectors`);
- ``--processes N``: prometheus_client's multiprocess collector serves no ``process_*`` or
  ``python_gc_*`` series (they belong to one process), so each worker process copies what
  those collectors read of it into gauges with a ``worker`` label, its name
  (:class:`ProcessGauges`, called by its publishing thread). The gauges are ``live``
  ones: a worker process's series go when it exits and the supervisor marks it dead. The
  supervisor adds ``python_info`` and the build info (:func:`add_supervisor_collectors`).

Needs the ``metrics`` extra (prometheus_client).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

from lockgate.errors import MissingExtra

try:
    from prometheus_client import (
        CollectorRegistry,
        Gauge,
        GCCollector,
        PlatformCollector,
        ProcessCollector,
    )
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as e:  # a core install: prometheus_client comes with the metrics extra
    raise MissingExtra("lockgate.ops.process_metrics", "metrics", "prometheus_client") from e
from lockgate.worker.registry import lockgate_version

BUILD_INFO = "lockgate_build_info"
WORKER_LABEL = "worker"


class BuildInfoCollector(Collector):
    """``lockgate_build_info{version,python_version} 1``."""

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            BUILD_INFO, "The lockgate and Python versions running; always 1.",
            labels=["version", "python_version"],
        )  # fmt: skip
        family.add_metric([lockgate_version(), platform.python_version()], 1.0)
        return [family]

    def describe(self) -> Iterable[Metric]:
        return self.collect()  # constant: no I/O


def add_runtime_collectors(registry: CollectorRegistry) -> None:
    """Serve the build info, ``process_*``, ``python_info`` and ``python_gc_*`` of this
    process from ``registry`` (one worker process)."""
    registry.register(BuildInfoCollector())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


def add_supervisor_collectors(registry: CollectorRegistry) -> None:
    """Serve the build info and ``python_info`` from a supervisor's ``registry`` (its worker
    processes run the same lockgate on the same Python); each worker process publishes
    its own process series (:class:`ProcessGauges`)."""
    registry.register(BuildInfoCollector())
    PlatformCollector(registry=registry)


class ProcessGauges:
    """A worker process's own ``process_*`` and ``python_gc_*`` series, labelled with its
    name, in multiprocess gauges (multiprocess mode ``livemostrecent``): call
    :meth:`publish` now and then (a worker process's metrics thread does, twice a second).

    Args:
        worker: the worker's name (``Worker.name``), the value of the ``worker`` label.
    """

    def __init__(self, worker: str) -> None:
        self._worker = worker
        # Read through prometheus_client's own collectors, registered nowhere.
        self._sources: tuple[Collector, ...] = (
            ProcessCollector(registry=None),
            GCCollector(registry=CollectorRegistry()),
        )
        self._gauges: dict[str, Gauge] = {}

    def publish(self) -> None:
        """Write this process's current readings."""
        for source in self._sources:
            for family in source.collect():
                for sample in family.samples:
                    gauge = self._gauges.get(sample.name)
                    if gauge is None:
                        gauge = self._gauges[sample.name] = Gauge(
                            sample.name, family.documentation,
                            [WORKER_LABEL, *sample.labels], registry=None,
                            multiprocess_mode="livemostrecent",
                        )  # fmt: skip
                    gauge.labels(self._worker, *sample.labels.values()).set(sample.value)
