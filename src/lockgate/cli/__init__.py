"""The ``lockgate`` command line (``lockgate.cli:main``, also ``python -m lockgate``).

:mod:`lockgate.cli.main` owns the click group and adds every command to it; the commands
live in modules of their own, one per command or command group, and never import it back.
"""

from lockgate.cli.main import main

__all__ = ["main"]
