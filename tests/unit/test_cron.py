"""Pure tick math of cron schedules: no database, the clock passed in."""

from __future__ import annotations

import datetime as dt

import pytest

from django_strait.rules.cron import (
    ScheduleError,
    check_schedule,
    check_timezone,
    due_ticks,
    latest_tick,
    plan_ticks,
    tick_key,
)

UTC = dt.UTC


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def hhmm(ticks: list[dt.datetime]) -> list[str]:
    return [t.strftime("%m-%d %H:%M") for t in ticks]


def test_due_ticks__every_minute_excludes_after_and_includes_now():
    ticks = due_ticks("* * * * *", "UTC", utc(2024, 5, 1, 12, 0), utc(2024, 5, 1, 12, 3))
    assert hhmm(ticks) == ["05-01 12:01", "05-01 12:02", "05-01 12:03"]


def test_due_ticks__tick_exactly_at_now_is_due():
    assert due_ticks("0 9 * * *", "UTC", utc(2024, 5, 1, 8, 0), utc(2024, 5, 1, 9, 0)) == [
        utc(2024, 5, 1, 9, 0)
    ]


def test_due_ticks__ticks_are_utc():
    ticks = due_ticks("@hourly", "Asia/Kolkata", utc(2024, 5, 1, 0, 0), utc(2024, 5, 1, 2, 0))
    # Kolkata is UTC+05:30: local full hours are at :30 UTC.
    assert ticks == [utc(2024, 5, 1, 0, 30), utc(2024, 5, 1, 1, 30)]
    assert all(t.tzinfo is UTC for t in ticks)


def test_due_ticks__hourly_alias():
    ticks = due_ticks("@hourly", "UTC", utc(2024, 5, 1, 0, 30), utc(2024, 5, 1, 3, 0))
    assert hhmm(ticks) == ["05-01 01:00", "05-01 02:00", "05-01 03:00"]


def test_due_ticks__limit_stops_early():
    ticks = due_ticks("* * * * *", "UTC", utc(2024, 1, 1), utc(2024, 2, 1), limit=5)
    assert len(ticks) == 5


def test_due_ticks__paris_morning_across_spring_forward_keeps_local_nine():
    # 2024-03-31 02:00 CET -> 03:00 CEST: 09:00 local moves from 08:00Z to 07:00Z.
    ticks = due_ticks("0 9 * * *", "Europe/Paris", utc(2024, 3, 29, 12), utc(2024, 4, 1, 12))
    assert hhmm(ticks) == ["03-30 08:00", "03-31 07:00", "04-01 07:00"]


def test_due_ticks__paris_morning_across_fall_back_keeps_local_nine():
    ticks = due_ticks("0 9 * * *", "Europe/Paris", utc(2024, 10, 26, 12), utc(2024, 10, 28, 12))
    assert hhmm(ticks) == ["10-27 08:00", "10-28 08:00"]


def test_due_ticks__time_in_spring_gap_fires_once_at_the_transition():
    # 02:30 does not exist on 2024-03-31 in Paris: it runs when the clock jumps (01:00Z).
    ticks = due_ticks("30 2 * * *", "Europe/Paris", utc(2024, 3, 30, 12), utc(2024, 4, 1, 12))
    assert hhmm(ticks) == ["03-31 01:00", "04-01 00:30"]


def test_due_ticks__fixed_time_repeated_by_fall_back_fires_once():
    # 02:30 happens twice on 2024-10-27 in Paris (00:30Z CEST, 01:30Z CET): a daily job runs once.
    ticks = due_ticks("30 2 * * *", "Europe/Paris", utc(2024, 10, 26, 12), utc(2024, 10, 28, 12))
    assert hhmm(ticks) == ["10-27 00:30", "10-28 01:30"]


def test_due_ticks__hourly_follows_real_time_across_fall_back():
    ticks = due_ticks("@hourly", "Europe/Paris", utc(2024, 10, 26, 22, 30), utc(2024, 10, 27, 2))
    # 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET: one run per real hour.
    assert hhmm(ticks) == ["10-26 23:00", "10-27 00:00", "10-27 01:00", "10-27 02:00"]


def test_due_ticks__hourly_across_spring_forward_has_no_duplicate():
    ticks = due_ticks("0 * * * *", "Europe/Paris", utc(2024, 3, 30, 23, 30), utc(2024, 3, 31, 2))
    assert hhmm(ticks) == ["03-31 00:00", "03-31 01:00", "03-31 02:00"]


def test_latest_tick__at_a_tick_returns_it():
    assert latest_tick("0 9 * * *", "UTC", utc(2024, 5, 1, 9)) == utc(2024, 5, 1, 9)


def test_latest_tick__between_ticks_returns_the_previous():
    at = utc(2024, 5, 1, 8, 59, 59)
    assert latest_tick("0 9 * * *", "UTC", at) == utc(2024, 4, 30, 9)


def test_latest_tick__skips_the_second_occurrence_of_a_fixed_time():
    # Just after 02:30 CET (the repeat), the latest firing tick is 02:30 CEST.
    at = utc(2024, 10, 27, 1, 45)
    assert latest_tick("30 2 * * *", "Europe/Paris", at) == utc(2024, 10, 27, 0, 30)


def test_plan_ticks__first_sight_records_old_tick_without_firing():
    plan = plan_ticks("0 9 * * *", "UTC", last_tick=None, now=utc(2024, 5, 1, 12), grace=60)
    assert plan.fire == ()
    assert plan.last == utc(2024, 5, 1, 9)


def test_plan_ticks__first_sight_fires_a_tick_inside_the_grace_window():
    now = utc(2024, 5, 1, 9, 0, 20)
    plan = plan_ticks("0 9 * * *", "UTC", last_tick=None, now=now, grace=60)
    assert plan.fire == (utc(2024, 5, 1, 9),)
    assert plan.last == utc(2024, 5, 1, 9)


def test_plan_ticks__first_sight_never_fires_a_tick_from_before_the_job_existed():
    now = utc(2024, 5, 1, 9, 0, 20)
    plan = plan_ticks(
        "0 9 * * *", "UTC", last_tick=None, now=now, grace=60, created_at=utc(2024, 5, 1, 9, 0, 5)
    )
    assert plan.fire == ()
    assert plan.last == utc(2024, 5, 1, 9)


def test_plan_ticks__on_time_tick_fires():
    plan = plan_ticks(
        "0 9 * * *", "UTC", last_tick=utc(2024, 4, 30, 9), now=utc(2024, 5, 1, 9, 0, 1), grace=60
    )
    assert plan.fire == (utc(2024, 5, 1, 9),)
    assert plan.skipped_missed == 0
    assert plan.last == utc(2024, 5, 1, 9)


def test_plan_ticks__nothing_due_keeps_last_tick():
    plan = plan_ticks(
        "0 9 * * *", "UTC", last_tick=utc(2024, 5, 1, 9), now=utc(2024, 5, 1, 12), grace=60
    )
    assert plan.fire == ()
    assert plan.last is None


def test_plan_ticks__missed_run_once_fires_only_the_latest_miss():
    # Down from 09:00 to 12:00:30 on an hourly job: 10, 11 and 12 were missed.
    plan = plan_ticks(
        "@hourly",
        "UTC",
        last_tick=utc(2024, 5, 1, 9),
        now=utc(2024, 5, 1, 12, 1, 30),
        grace=60,
        missed="run_once",
    )
    assert plan.fire == (utc(2024, 5, 1, 12),)
    assert plan.skipped_missed == 2
    assert plan.last == utc(2024, 5, 1, 12)


def test_plan_ticks__missed_skip_fires_nothing():
    plan = plan_ticks(
        "@hourly",
        "UTC",
        last_tick=utc(2024, 5, 1, 9),
        now=utc(2024, 5, 1, 12, 1, 30),
        grace=60,
        missed="skip",
    )
    assert plan.fire == ()
    assert plan.skipped_missed == 3
    assert plan.last == utc(2024, 5, 1, 12)


def test_plan_ticks__missed_then_on_time_fires_latest_miss_and_the_on_time_tick():
    plan = plan_ticks(
        "* * * * *",
        "UTC",
        last_tick=utc(2024, 5, 1, 9, 0),
        now=utc(2024, 5, 1, 9, 10, 30),
        grace=60,
        missed="run_once",
    )
    # 09:01..09:09 are older than 60 s: missed; 09:10 is on time.
    assert plan.fire == (utc(2024, 5, 1, 9, 9), utc(2024, 5, 1, 9, 10))
    assert plan.skipped_missed == 8
    assert plan.last == utc(2024, 5, 1, 9, 10)


def test_tick_key__is_the_utc_instant():
    paris = dt.datetime(2024, 5, 1, 9, tzinfo=check_timezone("Europe/Paris"))
    assert tick_key(paris) == "cron:2024-05-01T07:00:00+00:00"


@pytest.mark.parametrize("expression", ["*/5 * * * *", "0 9 * * 1-5", "@daily", " @Hourly "])
def test_check_schedule__accepts(expression):
    assert check_schedule(expression)


@pytest.mark.parametrize(
    "expression", ["61 * * * *", "* * * *", "* * * * * *", "@reboot", "every day", "0 0 30 2 *"]
)
def test_check_schedule__rejects_naming_the_field_and_syntax(expression):
    with pytest.raises(ScheduleError) as caught:
        check_schedule(expression)
    assert caught.value.field == "schedule"
    assert "minute hour day-of-month month day-of-week" in str(caught.value)


@pytest.mark.parametrize("name", ["Europe/Pari", "", "../etc/passwd", "utc"])
def test_check_timezone__rejects_naming_the_field(name):
    with pytest.raises(ScheduleError) as caught:
        check_timezone(name)
    assert caught.value.field == "timezone"
    assert "Europe/Paris" in str(caught.value)
