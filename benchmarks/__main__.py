"""``python -m benchmarks``: see ``benchmarks.driver``."""

from benchmarks.driver import main

main()
