"""``python -m lockgate`` runs the CLI."""

from lockgate.cli import main

main()
