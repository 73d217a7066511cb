"""The cron scheduler duty against the real database, with ``now`` passed in."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from django_strait.duties.scheduler import Scheduler
from django_strait.models import Job, JobRun
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

UTC = dt.UTC


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def scheduled(schedule: str = "0 9 * * *", *, last_tick: dt.datetime | None, **fields) -> Job:
    job = make_job(schedule=schedule, **fields)
    Job.objects.filter(pk=job.pk).update(schedule_last_tick=last_tick)
    return job


def keys(job: Job) -> list[str]:
    return sorted(JobRun.objects.filter(job=job).values_list("idempotency_key", flat=True))


def last_tick(job: Job) -> dt.datetime | None:
    return Job.objects.get(pk=job.pk).schedule_last_tick


def test_run_once__due_tick_fires_one_run_with_the_tick_key():
    job = scheduled(last_tick=utc(2024, 4, 30, 9))
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2))
    assert result.led
    assert result.counts["fired"] == 1
    assert result.counts["jobs"] == 1
    run = JobRun.objects.get(job=job)
    assert run.idempotency_key == "cron:2024-05-01T09:00:00+00:00"
    assert run.payload == {"scheduled_for": "2024-05-01T09:00:00+00:00"}
    assert run.status == "queued"
    assert last_tick(job) == utc(2024, 5, 1, 9)


def test_run_once__nothing_due_fires_nothing():
    job = scheduled(last_tick=utc(2024, 5, 1, 9))
    result = Scheduler().run_once(utc(2024, 5, 1, 15))
    assert result.counts["fired"] == 0
    assert keys(job) == []
    # Looking at a job is not news: the worker logs a round only when something happened.
    assert (result.counts["jobs"], result.happened) == (1, False)


def test_run_once__a_fired_tick_is_news():
    scheduled(last_tick=utc(2024, 4, 30, 9))
    assert Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2)).happened


def test_run_once__twice_for_the_same_tick_makes_one_run():
    job = scheduled(last_tick=utc(2024, 4, 30, 9))
    now = utc(2024, 5, 1, 9, 0, 2)
    first = Scheduler().run_once(now)
    second = Scheduler().run_once(now)
    assert (first.counts["fired"], second.counts["fired"]) == (1, 0)
    assert keys(job) == ["cron:2024-05-01T09:00:00+00:00"]


def test_run_once__second_host_with_a_stale_last_tick_reuses_the_run():
    # Host B read the job before host A advanced it: the idempotency key makes one run.
    job = scheduled(last_tick=utc(2024, 4, 30, 9))
    now = utc(2024, 5, 1, 9, 0, 2)
    Scheduler().run_once(now)
    Job.objects.filter(pk=job.pk).update(schedule_last_tick=utc(2024, 4, 30, 9))
    again = Scheduler().run_once(now)
    assert again.counts["fired"] == 0
    assert keys(job) == ["cron:2024-05-01T09:00:00+00:00"]
    assert last_tick(job) == utc(2024, 5, 1, 9)


def test_run_once__same_tick_key_on_two_jobs_makes_two_runs():
    a = scheduled(last_tick=utc(2024, 4, 30, 9))
    b = scheduled(last_tick=utc(2024, 4, 30, 9))
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2))
    assert result.counts["fired"] == 2
    assert keys(a) == keys(b) == ["cron:2024-05-01T09:00:00+00:00"]


def test_run_once__missed_ticks_run_once_fires_the_latest():
    job = scheduled("@hourly", last_tick=utc(2024, 5, 1, 6), schedule_missed="run_once")
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 30))
    assert result.counts["fired"] == 1
    assert result.counts["skipped_missed"] == 2  # 07:00 and 08:00
    assert keys(job) == ["cron:2024-05-01T09:00:00+00:00"]
    assert last_tick(job) == utc(2024, 5, 1, 9)


def test_run_once__missed_ticks_skip_fires_none_and_moves_on():
    job = scheduled("@hourly", last_tick=utc(2024, 5, 1, 6), schedule_missed="skip")
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 30))
    assert result.counts["fired"] == 0
    assert result.counts["skipped_missed"] == 3
    assert keys(job) == []
    assert last_tick(job) == utc(2024, 5, 1, 9)
    # The next on-time tick fires as usual.
    assert Scheduler().run_once(utc(2024, 5, 1, 10, 0, 5)).counts["fired"] == 1


def test_run_once__overlap_skip_skips_while_a_run_is_active():
    job = scheduled(last_tick=utc(2024, 4, 30, 9), schedule_overlap="skip")
    make_run(job, status="executing")
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2))
    assert result.counts["fired"] == 0
    assert result.counts["skipped_overlap"] == 1
    assert JobRun.objects.filter(job=job).count() == 1
    assert last_tick(job) == utc(2024, 5, 1, 9)


def test_run_once__overlap_skip_fires_when_only_finished_runs_exist():
    job = scheduled(last_tick=utc(2024, 4, 30, 9), schedule_overlap="skip")
    make_run(job, status="completed")
    make_run(job, status="dead_letter")
    assert Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2)).counts["fired"] == 1


def test_run_once__overlap_allow_fires_beside_an_active_run():
    job = scheduled(last_tick=utc(2024, 4, 30, 9), schedule_overlap="allow")
    make_run(job, status="queued")
    assert Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2)).counts["fired"] == 1


def test_run_once__paris_nine_oclock_moves_to_seven_utc_after_spring_forward():
    # 09:00 Paris is 08:00Z on 2024-03-30 (CET) and 07:00Z on 2024-03-31 (CEST):
    # at 07:59:30Z the tick is an hour old (a fixed +01:00 would still be waiting).
    job = scheduled(timezone="Europe/Paris", last_tick=utc(2024, 3, 30, 8), schedule_missed="skip")
    result = Scheduler().run_once(utc(2024, 3, 31, 7, 59, 30))
    assert (result.counts["fired"], result.counts["skipped_missed"]) == (0, 1)
    assert last_tick(job) == utc(2024, 3, 31, 7)


def test_run_once__paris_tick_fires_on_time_after_dst_change():
    job = scheduled(timezone="Europe/Paris", last_tick=utc(2024, 3, 30, 8))
    nothing = Scheduler().run_once(utc(2024, 3, 31, 6, 59, 59))
    fired = Scheduler().run_once(utc(2024, 3, 31, 7, 0, 1))
    assert (nothing.counts["fired"], fired.counts["fired"]) == (0, 1)
    run = JobRun.objects.get(job=job)
    assert run.idempotency_key == "cron:2024-03-31T07:00:00+00:00"


def test_run_once__disabled_job_does_not_fire_and_drops_its_ticks():
    job = scheduled(last_tick=utc(2024, 4, 28, 9), enabled=False)
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2))
    assert result.counts["fired"] == 0
    assert result.counts["jobs"] == 0
    assert keys(job) == []
    # Resumed later: the pause is not a miss, nothing catches up.
    Job.objects.filter(pk=job.pk).update(enabled=True)
    assert Scheduler().run_once(utc(2024, 5, 1, 12)).counts["fired"] == 0
    assert keys(job) == []


def test_run_once__jobs_without_schedule_are_ignored():
    job = make_job()
    result = Scheduler().run_once(utc(2024, 5, 1, 9))
    assert result.counts["jobs"] == 0
    assert last_tick(job) is None


def test_run_once__first_sight_records_the_latest_tick_without_firing_the_past():
    job = scheduled("* * * * *", last_tick=None)
    now = timezone.now() + dt.timedelta(minutes=5)
    result = Scheduler().run_once(now)
    # The latest minute is less than 60 s old and after the job was created: on time.
    assert result.counts["fired"] == 1
    assert last_tick(job) == now.replace(second=0, microsecond=0)
    assert JobRun.objects.filter(job=job).count() == 1


def test_run_once__first_sight_of_an_old_daily_tick_fires_nothing():
    job = scheduled("0 0 1 1 *", last_tick=None)
    result = Scheduler().run_once(timezone.now() + dt.timedelta(days=400))
    assert result.counts["fired"] == 0
    assert last_tick(job) is not None


def test_run_once__bad_stored_timezone_is_counted_and_others_still_fire():
    bad = scheduled(last_tick=utc(2024, 4, 30, 9), timezone="Mars/Olympus")
    good = scheduled(last_tick=utc(2024, 4, 30, 9))
    result = Scheduler().run_once(utc(2024, 5, 1, 9, 0, 2))
    assert result.counts["errors"] == 1
    assert result.counts["fired"] == 1
    assert (keys(bad), keys(good)) == ([], ["cron:2024-05-01T09:00:00+00:00"])


def test_from_settings__reads_scheduler_interval(settings):
    settings.STRAIT = {**settings.STRAIT, "SCHEDULER_INTERVAL": "5s"}
    scheduler = Scheduler.from_settings()
    assert scheduler.interval == 5.0
    assert scheduler.grace_seconds == 60.0
    assert Scheduler(interval=45).grace_seconds == 90.0


def test_scheduler__rejects_bad_options_naming_them():
    with pytest.raises(ValueError, match="interval"):
        Scheduler(interval=0)
    with pytest.raises(ValueError, match="grace"):
        Scheduler(grace=-1)


def job_errors(**fields) -> dict[str, list[str]]:
    job = Job(name="cron-check", handler="tests.testapp.jobs.noop", **fields)
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    return caught.value.message_dict


def test_job_clean__rejects_a_bad_cron_naming_the_field_and_syntax():
    errors = job_errors(schedule="61 * * * *")
    assert list(errors) == ["schedule"]
    assert "minute hour day-of-month month day-of-week" in errors["schedule"][0]
    assert "@hourly" in errors["schedule"][0]


def test_job_clean__rejects_a_bad_timezone_naming_the_field():
    errors = job_errors(schedule="@daily", timezone="Europe/Pari")
    assert list(errors) == ["timezone"]
    assert "Europe/Paris" in errors["timezone"][0]


def test_job_clean__accepts_cron_and_alias_with_a_zone():
    for schedule in ("*/5 * * * 1-5", "@weekly"):
        Job(
            name="cron-ok",
            handler="tests.testapp.jobs.noop",
            schedule=schedule,
            timezone="Asia/Tokyo",
        ).full_clean()
