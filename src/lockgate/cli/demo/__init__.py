"""``lockgate demo``: the command (:mod:`~lockgate.cli.demo.command`), the scenario it
plays (:mod:`~lockgate.cli.demo.scenario`), what the runs recorded and the table that
shows them (:mod:`~lockgate.cli.demo.report`), and their figure
(:mod:`~lockgate.cli.demo.plot`, the ``plot`` extra)."""
