"""Cron schedules (lockgate.core.cron) and ``@app.cron`` declarations: no server needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from lockgate import App, ConfigError, Message, WorkerConfig
from lockgate.core.codec import check_job_id
from lockgate.core.cron import MIN_ONCE_TTL, Schedule, stamp

NOWHERE = "redis://127.0.0.1:1/0"  # nothing listens: nothing below may connect
NEW_YORK = ZoneInfo("America/New_York")


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def app() -> App:
    return App(NOWHERE, namespace="unit")


# parsing


@pytest.mark.parametrize(
    "expression",
    ["*/5 * * * *", "0 3 * * MON-FRI", "0 0 L * *", "0 9 * * MON#1", "*/10 * * * * *"],
)
def test_good_expressions_parse(expression: str) -> None:
    schedule = Schedule.parse("report", expression)
    assert (schedule.task, schedule.expression, schedule.tz) == ("report", expression, UTC)


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("61 * * * *", "Bad minute"),
        ("* * *", "Wrong number of fields"),
        ("", "Wrong number of fields"),
        ("@daily", "Wrong number of fields"),
        ("*/0 * * * *", "Bad minute"),
        ("* * 30 2 *", "Bad day-of-month"),
        ("* * * * 8", "Bad day-of-week"),
        ("* * */20 * 1L", "never fires"),
    ],
)
def test_a_bad_expression_is_a_config_error_naming_the_task(expression: str, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"cron task 'nightly_report'.*{why}"):
        Schedule.parse("nightly_report", expression)


def test_an_expression_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"cron task 'report'.* must be a string"):
        Schedule.parse("report", 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "", "../etc/passwd", 5])
def test_an_unknown_time_zone_is_a_config_error_naming_the_task(tz: object) -> None:
    with pytest.raises(ConfigError, match=r"cron task 'report': unknown time zone"):
        Schedule.parse("report", "0 3 * * *", tz)  # type: ignore[arg-type]


def test_time_zones_are_names_or_zoneinfos() -> None:
    assert Schedule.parse("a", "0 3 * * *", "Europe/Paris").tz == ZoneInfo("Europe/Paris")
    assert Schedule.parse("b", "0 3 * * *", NEW_YORK).tz is NEW_YORK
    assert Schedule.parse("c", "0 3 * * *", UTC).tz is UTC
    assert Schedule.parse("d", "0 3 * * *").tz is UTC


# ticks


def test_previous_is_the_latest_tick_at_or_before_now() -> None:
    every5 = Schedule.parse("report", "*/5 * * * *")
    assert every5.previous(at(2024, 1, 1, 3, 7, 12)) == at(2024, 1, 1, 3, 5)
    assert every5.previous(at(2024, 1, 1, 3, 5)) == at(2024, 1, 1, 3, 5)  # a tick is its own
    before = at(2024, 1, 1, 3, 5) - timedelta(microseconds=1)
    assert every5.previous(before) == at(2024, 1, 1, 3, 0)
    assert every5.previous(datetime(2024, 1, 1, 3, 7)) == at(2024, 1, 1, 3, 5)  # naive: UTC


def test_next_is_the_first_tick_after_now() -> None:
    every5 = Schedule.parse("report", "*/5 * * * *")
    assert every5.next(at(2024, 1, 1, 3, 7, 12)) == at(2024, 1, 1, 3, 10)
    assert every5.next(at(2024, 1, 1, 3, 5)) == at(2024, 1, 1, 3, 10)  # strictly after
    assert every5.next(at(2024, 12, 31, 23, 59, 1)) == at(2025, 1, 1)


def test_a_seconds_field_comes_first() -> None:
    every10s = Schedule.parse("ping", "*/10 * * * * *")
    late = at(2024, 1, 1, 3, 7, 25) + timedelta(microseconds=500)
    assert every10s.previous(late) == at(2024, 1, 1, 3, 7, 20)
    assert every10s.next(at(2024, 1, 1, 3, 7, 25)) == at(2024, 1, 1, 3, 7, 30)


def test_ticks_are_read_in_the_time_zone_and_given_in_utc() -> None:
    paris = Schedule.parse("report", "0 9 * * *", "Europe/Paris")
    winter = paris.next(at(2024, 1, 15))
    summer = paris.next(at(2024, 7, 15))
    assert winter == at(2024, 1, 15, 8) and winter.tzinfo is UTC
    assert summer == at(2024, 7, 15, 7)
    assert summer is not None and summer.astimezone(paris.tz).hour == 9


def test_a_daily_tick_in_the_skipped_hour_runs_when_the_clock_jumps() -> None:
    # 2024-03-10 in New York: 02:00 EST jumps to 03:00 EDT; there is no 02:30 that day.
    daily = Schedule.parse("report", "30 2 * * *", NEW_YORK)
    ticks = _ticks(daily, at(2024, 3, 9, 12), 3)
    assert [t.astimezone(NEW_YORK).isoformat() for t in ticks] == [
        "2024-03-10T03:00:00-04:00",
        "2024-03-11T02:30:00-04:00",
        "2024-03-12T02:30:00-04:00",
    ]
    assert daily.previous(at(2024, 3, 10, 15)) == ticks[0]  # looking back agrees


def test_a_daily_tick_in_the_repeated_hour_runs_once() -> None:
    # 2024-11-03 in New York: 01:00-02:00 happens twice (EDT, then EST).
    daily = Schedule.parse("report", "30 1 * * *", NEW_YORK)
    ticks = _ticks(daily, at(2024, 11, 2, 12), 3)
    assert [t.astimezone(NEW_YORK).isoformat() for t in ticks] == [
        "2024-11-03T01:30:00-04:00",
        "2024-11-04T01:30:00-05:00",
        "2024-11-05T01:30:00-05:00",
    ]
    # A scheduler starting in the second 01:30 finds the first one, already enqueued.
    assert daily.previous(at(2024, 11, 3, 6, 40)) == ticks[0]
    assert daily.once_ttl(ticks[0]) == 2 * 25 * 3600  # that day is 25 hours long


def test_a_sub_hourly_schedule_follows_real_time_through_the_repeated_hour() -> None:
    half_hourly = Schedule.parse("sync", "*/30 * * * *", NEW_YORK)
    ticks = _ticks(half_hourly, at(2024, 11, 3, 4, 59), 5)
    assert [t.astimezone(NEW_YORK).strftime("%H:%M%z") for t in ticks] == [
        "01:00-0400", "01:30-0400", "01:00-0500", "01:30-0500", "02:00-0500",
    ]  # fmt: skip
    assert len({half_hourly.job_id(t) for t in ticks}) == 5


def _ticks(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    ticks: list[datetime] = []
    for _ in range(count):
        tick = schedule.next(ticks[-1] if ticks else start)
        assert tick is not None
        ticks.append(tick)
    return ticks


# job ids and once-only keys


def test_a_ticks_job_id_names_the_task_and_the_utc_tick() -> None:
    daily = Schedule.parse("report", "30 2 * * *", NEW_YORK)
    tick = daily.next(at(2024, 1, 1))
    assert tick is not None
    assert stamp(tick) == "2024-01-01T07:30:00Z"
    assert daily.job_id(tick) == "cron:report:2024-01-01T07:30:00Z"
    assert daily.job_id(tick.astimezone(NEW_YORK)) == daily.job_id(tick)
    assert check_job_id(daily.job_id(tick))


def test_a_name_too_long_for_job_ids_is_refused() -> None:
    with pytest.raises(ConfigError, match="too long for job ids"):
        Schedule.parse("x" * 240, "* * * * *")


@pytest.mark.parametrize(
    "expression",
    ["* * * * * *", "*/5 * * * *", "0 * * * *", "0 9 * * 1-5", "0 0 1 * *", "0 0 29 2 *"],
)
def test_the_once_ttl_outlasts_the_gap_to_the_next_tick(expression: str) -> None:
    schedule = Schedule.parse("job", expression, "Europe/Paris")
    tick = schedule.next(at(2024, 3, 1, 17, 3))
    for _ in range(5):
        assert tick is not None
        following = schedule.next(tick)
        assert following is not None
        gap = (following - tick).total_seconds()
        assert schedule.once_ttl(tick) >= max(gap, MIN_ONCE_TTL)
        assert schedule.once_ttl(tick) >= 2 * gap
        tick = following


def test_the_once_ttl_is_at_least_a_minute() -> None:
    every_second = Schedule.parse("ping", "* * * * * *")
    assert every_second.once_ttl(at(2024, 1, 1)) == MIN_ONCE_TTL


# @app.cron


def test_app_cron_registers_a_task_and_its_schedule(app: App) -> None:
    @app.cron("*/5 * * * *", priority="low", queue="reports", tz="Europe/Paris", retries=1)
    def rollup() -> None: ...

    assert app.tasks["rollup"] is rollup
    assert (rollup.queue, rollup.priority, rollup.retry.retries) == ("reports", "low", 1)
    schedule = app.schedules["rollup"]
    assert (schedule.expression, schedule.tz) == ("*/5 * * * *", ZoneInfo("Europe/Paris"))


def test_app_cron_takes_async_functions_and_a_name(app: App) -> None:
    @app.cron("0 3 * * *", name="nightly")
    async def rollup(day: str = "today") -> None: ...

    assert rollup.name == "nightly" and rollup.is_async
    assert set(app.schedules) == {"nightly"}


def test_app_cron_refuses_a_bad_expression_naming_the_task(app: App) -> None:
    with pytest.raises(ConfigError, match=r"cron task 'rollup': bad cron expression"):

        @app.cron("*/5 * * *")
        def rollup() -> None: ...

    assert app.tasks == {} and app.schedules == {}


def test_app_cron_refuses_an_unknown_time_zone(app: App) -> None:
    with pytest.raises(ConfigError, match=r"cron task 'rollup': unknown time zone"):

        @app.cron("0 3 * * *", tz="Europe/Atlantis")
        def rollup() -> None: ...

    with pytest.raises(ConfigError, match=r"cron task 'nightly': unknown time zone"):
        app.cron("0 3 * * *", tz="Europe/Atlantis", name="nightly")(lambda: None)


def test_app_cron_refuses_a_function_that_takes_arguments(app: App) -> None:
    with pytest.raises(ConfigError, match=r"cron task 'rollup' is called with no arguments"):

        @app.cron("0 3 * * *")
        def rollup(day: str) -> None: ...

    assert app.tasks == {} and app.schedules == {}


def test_app_cron_checks_its_arguments_against_the_function(app: App) -> None:
    with pytest.raises(ConfigError, match=r"args=\('a', 'b'\), kwargs=\{\}.*too many"):

        @app.cron("0 3 * * *", args=("a", "b"))
        def rollup(day: str) -> None: ...

    with pytest.raises(ConfigError, match=r"parameter 'limit': 'many' \(str\) does not fit int"):

        @app.cron("0 3 * * *", args=("eu",), kwargs={"limit": "many"})
        def purge(region: str, limit: int = 10) -> None: ...

    with pytest.raises(ConfigError, match=r"args must be a tuple and kwargs a dict"):

        @app.cron("0 3 * * *", args="eu")  # type: ignore[arg-type]
        def cleanup(region: str) -> None: ...

    assert app.tasks == {} and app.schedules == {}

    @app.cron("0 3 * * *", args=("eu",), kwargs={"limit": 5, "priority": "x"})
    def report(region: str, limit: int, priority: str) -> None: ...

    schedule = app.schedules["report"]
    assert (schedule.args, dict(schedule.kwargs)) == (("eu",), {"limit": 5, "priority": "x"})


def test_app_cron_refuses_what_app_task_refuses(app: App) -> None:
    @app.task
    def rollup() -> None: ...

    with pytest.raises(ConfigError, match="already registered"):
        app.cron("0 3 * * *", name="rollup")(lambda: None)
    with pytest.raises(ConfigError, match="unknown priority"):
        app.cron("0 3 * * *", priority="urgent")(lambda: None)
    assert app.schedules == {}


def test_a_messages_once_key_reaches_the_enqueue_script(app: App) -> None:
    @app.cron("0 3 * * *")
    def rollup() -> None: ...

    once = (app.keys.tick("rollup", "2024-01-01T03:00:00Z"), 120_000)
    message = Message(rollup.message(job_id="cron:rollup:2024-01-01T03:00:00Z").job, once=once)
    _, plan = app._plan([message])
    (call,) = plan.calls
    assert once[0] in call.keys and once[1] in call.args


def test_the_worker_scheduler_flag_is_a_bool() -> None:
    assert WorkerConfig().scheduler is True
    assert WorkerConfig(scheduler=False).scheduler is False
    with pytest.raises(ConfigError, match="scheduler must be True or False"):
        WorkerConfig(scheduler="no")  # type: ignore[arg-type]
