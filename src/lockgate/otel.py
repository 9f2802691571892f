"""OpenTelemetry tracing of lockgate's enqueues and runs (the ``otel`` extra; see the
Tracing page of the docs).

The documented path of :mod:`lockgate.integrations.otel`, which holds the code::

    from lockgate.otel import LockgateInstrumentor

    LockgateInstrumentor().instrument(tracer_provider=None)  # the global provider
"""

from lockgate.integrations.otel import LockgateInstrumentor

__all__ = ["LockgateInstrumentor"]
