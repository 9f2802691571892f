"""Integrations that need the whole of lockgate: the top layer.

A module here may import any layer below it (typically the App of :mod:`lockgate.api`),
and nothing imports it but its thin public module at the top of the package, so the
framework it plugs into stays out of every other import. The public paths
``lockgate.django`` (a backend for Django's tasks framework) and ``lockgate.otel``
(the OpenTelemetry instrumentor) are reserved for the first two.
"""
