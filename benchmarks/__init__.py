"""Benchmarks: lockgate and its peers against one Redis, in one run (``python -m benchmarks``).

The driver (``driver``) runs in the project's environment; every library runs in its own
virtual environment (``benchmarks/.venv-<peer>``) through ``runner``, one subprocess per
measurement, so the peers' dependencies never meet. Modules that the runner, the peers and
their workers import (``probe``, ``roundtrips``, ``procs``, ``peers``) use the standard
library and redis-py only.
"""
