"""Lockgate Redis URLs read into deployments: one server, cluster seeds, Sentinels, sockets."""

from __future__ import annotations

import pytest
from redis.connection import parse_url

from lockgate.backend.addresses import parse_address
from lockgate.errors import ConfigError


def test_one_server_with_credentials_db_and_tls_options() -> None:
    url = "rediss://app:p%40ss@cache.local:6380/2?ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem"
    address = parse_address(url)
    assert address.kind == "server" and address.tls
    assert address.hosts == (("cache.local", 6380),)
    assert (address.username, address.password, address.db) == ("app", "p@ss", 2)
    assert address.options == (("ssl_ca_certs", "/ca.pem"), ("ssl_certfile", "/c.pem"))
    # Each node's URL is one the client library reads back to the same settings.
    node = parse_url(address.node_url("cache.local", 6380))
    assert node["host"] == "cache.local" and node["port"] == 6380 and node["db"] == 2
    assert (node["username"], node["password"]) == ("app", "p@ss")
    assert node["ssl_ca_certs"] == "/ca.pem"


def test_defaults_and_no_database_number() -> None:
    address = parse_address("redis://localhost")
    assert (address.kind, address.hosts, address.db, address.password) == (
        "server",
        (("localhost", 6379),),
        None,
        None,
    )


def test_several_hosts_are_cluster_seeds_and_a_node_url_drops_the_db() -> None:
    address = parse_address("redis://:pw@h1:7000,h2:7001,[::1]:7002")
    assert address.kind == "seeds"
    assert address.hosts == (("h1", 7000), ("h2", 7001), ("::1", 7002))
    assert address.node_url("::1", 7002, db=False) == "redis://:pw@[::1]:7002"


def test_sentinel_with_service_db_and_the_sentinels_own_password() -> None:
    url = "redis+sentinel://:data@s1,s2:26380/mymaster/3?sentinel_password=sent&socket_timeout=2"
    address = parse_address(url)
    assert address.kind == "sentinel" and not address.tls
    assert address.hosts == (("s1", 26379), ("s2", 26380))
    assert (address.service, address.db, address.password) == ("mymaster", 3, "data")
    assert address.sentinel_options == (("sentinel_password", "sent"),)
    assert address.options == (("socket_timeout", "2"),)
    assert parse_address("rediss+sentinel://s1/svc").tls


def test_unix_socket() -> None:
    address = parse_address("unix:///run/redis.sock?db=1")
    assert (address.kind, address.path, address.options) == (
        "unix",
        "/run/redis.sock",
        (("db", "1"),),
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://s1:26379", "names its service"),
        ("redis+sentinel://s1:26379/", "names its service"),
        ("redis+sentinel://s1/svc/0/extra", "/SERVICE[/db]"),
        ("http://h:6379", "starts with redis://"),
        ("h:6379", "no scheme"),
        ("redis://h:port", "invalid port"),
        ("redis://h:70000", "invalid port"),
        ("redis://h1,,h2", "empty host"),
        ("redis://h/zero", "whole number"),
        ("redis://h/0/1", "/db"),
        ("redis://h?sentinel_password=x", "redis+sentinel"),
    ],
)
def test_bad_urls_are_one_line_without_the_password(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_address(url.replace("://", "://u:hunter2@", 1) if "://" in url else url)
    message = str(caught.value)
    assert says in message and "\n" not in message and "hunter2" not in message
