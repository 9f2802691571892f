"""The supervisor's pure restart policy: delays, their reset, and when to give up."""

from __future__ import annotations

import pytest

from lockgate.errors import ConfigError
from lockgate.process.supervisor import GiveUp, Restart, RestartBackoff, RestartPlan, describe_exit

BACKOFF = RestartBackoff()  # 0.5 s doubling to 30 s; stable after 30 s


def test_the_first_death_restarts_at_once_then_the_delay_doubles_up_to_the_cap() -> None:
    delays = [BACKOFF.delay(deaths) for deaths in range(1, 11)]
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert BACKOFF.delay(10_000) == 30.0  # no overflow however long it goes on


def test_a_slot_dying_quickly_backs_off_and_staying_up_starts_it_over() -> None:
    plan = RestartPlan(2)
    assert [plan.died(0, uptime=1.0) for _ in range(4)] == [
        Restart(0.0), Restart(0.5), Restart(1.0), Restart(2.0)
    ]  # fmt: skip
    assert plan.died(1, uptime=1.0) == Restart(0.0)  # each slot counts its own deaths
    assert plan.died(0, uptime=30.0) == Restart(0.0)  # it had stayed up
    assert plan.died(0, uptime=1.0) == Restart(0.5)


def test_every_slot_failing_with_a_configuration_error_gives_up() -> None:
    plan = RestartPlan(3)
    assert plan.died(0, uptime=0.4, config_error=True) == Restart(0.5)  # not at once
    assert plan.died(1, uptime=0.4, config_error=True) == Restart(0.5)
    decision = plan.died(2, uptime=0.4, config_error=True)
    assert isinstance(decision, GiveUp)
    assert "exited with code 2" in decision.reason


def test_a_slot_that_died_otherwise_in_between_keeps_the_others_going() -> None:
    plan = RestartPlan(2)
    assert plan.died(0, uptime=0.4, config_error=True) == Restart(0.5)
    assert plan.died(1, uptime=0.4) == Restart(0.0)  # killed, say: not a config error
    assert plan.died(0, uptime=0.4, config_error=True) == Restart(1.0)
    assert isinstance(plan.died(1, uptime=0.4, config_error=True), GiveUp)


def test_configuration_errors_after_a_child_stayed_up_are_restarted() -> None:
    """Once the configuration has worked, exit 2 (access revoked, Redis away at a
    restart) is retried with backoff rather than taking every worker down."""
    plan = RestartPlan(2)
    assert plan.died(0, uptime=45.0, config_error=True) == Restart(0.0)
    assert plan.died(1, uptime=0.4, config_error=True) == Restart(0.5)
    assert plan.died(0, uptime=0.4, config_error=True) == Restart(1.0)
    assert plan.died(1, uptime=0.4, config_error=True) == Restart(1.0)


def test_a_custom_backoff() -> None:
    plan = RestartPlan(1, RestartBackoff(base=0.1, cap=0.3, stable_after=5.0))
    delays = [plan.died(0, uptime=1.0) for _ in range(5)]
    assert delays == [Restart(0.0), Restart(0.1), Restart(0.2), Restart(0.3), Restart(0.3)]
    assert plan.died(0, uptime=5.0) == Restart(0.0)


def test_a_plan_needs_a_slot() -> None:
    with pytest.raises(ConfigError):
        RestartPlan(0)


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exited with code 0"),
        (2, "exited with code 2"),
        (-9, "killed by signal 9 (SIGKILL)"),
        (-15, "killed by signal 15 (SIGTERM)"),
        (-200, "killed by signal 200 (unknown)"),
    ],
)
def test_describe_exit(code: int, text: str) -> None:
    assert describe_exit(code) == text
