"""What a server says about itself at first contact, and whether lockgate can use it (pure).

lockgate's scripts are a Redis Functions library (``FUNCTION LOAD``, ``FCALL``): Redis
7.0 and newer, and Valkey (whose ``HELLO`` reports its own version, 7.2 and up).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.backend.addresses import masked
from lockgate.errors import ConfigError

MINIMUM_VERSION = (7, 0)


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """A server's own account of itself.

    Attributes:
        server: ``redis``, ``valkey``, ...
        version: its version text (``7.0.15``).
        mode: ``standalone``, ``cluster`` or ``sentinel``.
    """

    server: str
    version: str
    mode: str

    @property
    def cluster(self) -> bool:
        """Whether the server is a Redis Cluster node."""
        return self.mode == "cluster"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """The version's leading numbers (``7.0.15`` -> (7, 0, 15)); () when unreadable."""
        numbers = []
        for part in self.version.split("."):
            if not part.isdigit():
                break
            numbers.append(int(part))
        return tuple(numbers)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def facts_from_hello(reply: Sequence[Any] | Mapping[Any, Any]) -> ServerFacts:
    """The facts in a ``HELLO`` reply (a map on RESP3, a flat list of names and values on
    RESP2)."""
    if isinstance(reply, Mapping):
        fields = {_text(name): value for name, value in reply.items()}
    else:
        fields = {_text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
    return ServerFacts(
        server=_text(fields.get("server", "redis")),
        version=_text(fields.get("version", "")),
        mode=_text(fields.get("mode", "standalone")),
    )


def facts_from_info(info: Mapping[str, Any]) -> ServerFacts:
    """The facts in ``INFO server`` (asked of a server too old for HELLO)."""
    return ServerFacts(
        server="redis",
        version=_text(info.get("redis_version", "")),
        mode=_text(info.get("redis_mode", "standalone")),
    )


def check_server(facts: ServerFacts, url: str) -> None:
    """Refuse a server lockgate cannot run on, in one line.

    Raises:
        ConfigError: the server is older than 7.0 (no Functions), or is a Sentinel (which
            holds no data: its URL is ``redis+sentinel://``).
    """
    if facts.mode == "sentinel":
        raise ConfigError(
            f"{masked(url)} is a Redis Sentinel, not a data server: use "
            "redis+sentinel://HOST:PORT/SERVICE_NAME to reach the primary it watches"
        )
    version = facts.version_tuple
    if version and version < MINIMUM_VERSION:
        raise ConfigError(
            f"{masked(url)} runs {facts.server} {facts.version}; lockgate needs Redis 7.0 "
            "or newer (its scripts are a Redis Functions library)"
        )
