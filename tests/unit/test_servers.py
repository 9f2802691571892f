"""What a server says at first contact, and which servers lockgate refuses (pure)."""

from __future__ import annotations

import pytest

from lockgate import ConfigError
from lockgate.backend.servers import ServerFacts, check_server, facts_from_hello, facts_from_info

URL = "redis://user:secret@cache:6379/0"


def test_hello_reply_as_a_flat_list() -> None:
    reply = [b"server", b"redis", b"version", b"7.0.15", b"proto", 2, b"id", 7,
             b"mode", b"cluster", b"role", b"master", b"modules", []]  # fmt: skip
    facts = facts_from_hello(reply)
    assert facts == ServerFacts("redis", "7.0.15", "cluster")
    assert facts.cluster and facts.version_tuple == (7, 0, 15)


def test_hello_reply_as_a_map_from_valkey() -> None:
    facts = facts_from_hello({"server": "valkey", "version": "8.0.2", "mode": "standalone"})
    assert (facts.server, facts.version_tuple, facts.cluster) == ("valkey", (8, 0, 2), False)


def test_info_server_of_a_server_without_hello() -> None:
    facts = facts_from_info({"redis_version": "5.0.14", "redis_mode": "standalone"})
    assert facts == ServerFacts("redis", "5.0.14", "standalone")


@pytest.mark.parametrize("version", ["6.2.14", "5.0.14", "6.0.0"])
def test_a_server_older_than_7_is_one_line_naming_its_version(version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_server(ServerFacts("redis", version, "standalone"), URL)
    message = str(caught.value)
    assert f"redis {version}" in message and "7.0 or newer" in message
    assert "secret" not in message and "\n" not in message


@pytest.mark.parametrize("version", ["7.0.0", "7.2.4", "8.0.2", "255.255.255", "unstable"])
def test_7_and_newer_and_unreadable_versions_pass(version: str) -> None:
    check_server(ServerFacts("redis", version, "cluster"), URL)


def test_a_sentinel_is_refused_with_the_url_form_to_use() -> None:
    with pytest.raises(ConfigError, match=r"redis\+sentinel://HOST:PORT/SERVICE_NAME"):
        check_server(ServerFacts("redis", "7.0.15", "sentinel"), URL)
