"""A private Redis-compatible server for the demo, ``worker --embedded`` and tests.

The documented path of :mod:`lockgate.integrations.embedded`, which holds the code."""

from lockgate.integrations.embedded import (
    BUNDLE,
    EXIT_PARENT_GONE,
    PATH_BINARIES,
    START_TIMEOUT,
    STOP_TIMEOUT,
    EmbeddedServer,
    Fsync,
    ServerBinary,
    bundled_binary,
    choose_binary,
    find_binary,
    free_port,
    redis_url_or_embedded,
)

__all__ = [
    "BUNDLE",
    "EXIT_PARENT_GONE",
    "PATH_BINARIES",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "EmbeddedServer",
    "Fsync",
    "ServerBinary",
    "bundled_binary",
    "choose_binary",
    "find_binary",
    "free_port",
    "redis_url_or_embedded",
]
