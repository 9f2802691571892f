"""Enqueue when the caller's database transaction commits: Django and psycopg 3.

The documented path of :mod:`lockgate.integrations.transactions`, which holds the code."""

from lockgate.integrations.transactions import (
    ACCEPTED,
    APPLICATION_NAME,
    EXIT_WAIT,
    FIRST_POLL,
    IDLE_CLOSE,
    MAX_POLL,
    RETRY_FIRST,
    RETRY_MAX,
    STATUS_QUERY,
    CommitWatcher,
    DjangoConnection,
    django_connection,
    drain,
    enqueue_on_commit,
)

__all__ = [
    "ACCEPTED",
    "APPLICATION_NAME",
    "EXIT_WAIT",
    "FIRST_POLL",
    "IDLE_CLOSE",
    "MAX_POLL",
    "RETRY_FIRST",
    "RETRY_MAX",
    "STATUS_QUERY",
    "CommitWatcher",
    "DjangoConnection",
    "django_connection",
    "drain",
    "enqueue_on_commit",
]
