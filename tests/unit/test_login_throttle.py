"""How many wrong tokens a client may try (lockgate.dashboard.throttle, pure)."""

from __future__ import annotations

from lockgate.dashboard.throttle import LoginThrottle, client_key


def test_a_client_is_held_back_after_its_attempts_until_the_oldest_ages_out() -> None:
    throttle = LoginThrottle(attempts=3, window=60)
    for now in (100.0, 110.0):
        throttle.failed("10.0.0.1", now)
        assert throttle.wait("10.0.0.1", now) == 0
    throttle.failed("10.0.0.1", 120.0)
    assert throttle.wait("10.0.0.1", 120.0) == 40.0  # until the failure at 100 is 60 s old
    assert throttle.wait("10.0.0.1", 159.5) == 0.5
    assert throttle.wait("10.0.0.1", 160.0) == 0  # two failures left in the window
    throttle.failed("10.0.0.1", 161.0)
    assert throttle.wait("10.0.0.1", 161.0) == 9.0  # 110, 120, 161: until 110 ages out


def test_other_clients_are_not_held_back() -> None:
    throttle = LoginThrottle(attempts=2, window=60)
    throttle.failed("10.0.0.1", 0.0)
    throttle.failed("10.0.0.1", 1.0)
    assert throttle.wait("10.0.0.1", 1.0) > 0
    assert throttle.wait("10.0.0.2", 1.0) == 0


def test_failures_older_than_the_window_are_forgotten() -> None:
    throttle = LoginThrottle(attempts=2, window=60)
    throttle.failed("10.0.0.1", 0.0)
    throttle.failed("10.0.0.1", 61.0)
    assert throttle.wait("10.0.0.1", 61.0) == 0  # one failure within the last 60 s
    assert throttle.wait("10.0.0.1", 200.0) == 0
    assert throttle.wait("10.0.0.1", 200.0) == 0  # forgotten, asked again


def test_the_clients_remembered_are_bounded_the_stalest_forgotten_first() -> None:
    throttle = LoginThrottle(attempts=1, window=60, max_clients=2)
    throttle.failed("a", 0.0)
    throttle.failed("b", 1.0)
    throttle.failed("a", 2.0)  # "a" failed last now: "b" is the stalest
    throttle.failed("c", 3.0)
    assert throttle.wait("a", 3.0) > 0
    assert throttle.wait("b", 3.0) == 0
    assert throttle.wait("c", 3.0) > 0


def test_an_ipv6_client_counts_as_its_64_an_ipv4_one_as_itself() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::7")
    assert client_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:10.0.0.1") == "10.0.0.1" == client_key("10.0.0.1")
    assert client_key("10.0.0.1") != client_key("10.0.0.2")
    assert client_key("testclient") == "testclient"  # not an address: as it is
