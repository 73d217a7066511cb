"""Retention by whole days of history, on a runs table partitioned by status class.

Skipped where the runs table is plain (SQLite; PostgreSQL with
``STRAIT_PARTITION_RUNS=false``): there the pruner deletes row by row, which
tests/integration/test_pruner.py covers on both layouts.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction

from django_strait.duties.pruner import Pruner
from django_strait.models import JobRun, RunAttempt, RunHold, WebhookDelivery
from django_strait.storage import backend
from django_strait.storage.postgres.layout import ATTEMPTS, HISTORY, RUNS, make_ranges, ranges_of
from tests.conftest import psycopg_connection, wait_for_a_lock_wait
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)

NOW = dt.datetime.now(dt.UTC)
#: A day forty days back, past the default retention of thirty.
OLD = (NOW - dt.timedelta(days=40)).date()
AT = dt.datetime.combine(OLD, dt.time(12), dt.UTC)


@pytest.fixture(autouse=True)
def partitioned():
    if connection.vendor != "postgresql":
        pytest.skip("history is kept by day on PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [RUNS])
        if cursor.fetchone()[0] != "p":
            pytest.skip("the runs table is plain in this run (STRAIT_PARTITION_RUNS=false)")


def on_old_day(run: JobRun) -> JobRun:
    """Finish ``run`` and its attempts on the old day."""
    JobRun.objects.filter(pk=run.pk).update(finished_at=AT)
    RunAttempt.objects.filter(run=run).update(finished_at=AT)
    return run


def make_old_day() -> None:
    """Make the old day's ranges now: its rows move out of the default partitions."""
    with transaction.atomic(), connection.cursor() as cursor:
        make_ranges(cursor, [OLD])


def tables_of_old_day() -> list[str]:
    with connection.cursor() as cursor:
        return [name for parent in (HISTORY, ATTEMPTS)
                for day, name in ranges_of(cursor, parent).items() if day == OLD]  # fmt: skip


def exists(*runs: JobRun) -> list[bool]:
    return [JobRun.objects.filter(pk=r.pk).exists() for r in runs]


def test_run_once__drops_a_day_past_retention_whole_and_keeps_what_must_stay():
    job = make_job(webhook_url="https://hooks.example.com/x")
    gone = [on_old_day(make_run(job, status=s)) for s in ("completed", "discarded", "canceled")]
    RunHold.objects.create(run=gone[0], reason="limit.concurrency", started_at=AT,
                           last_held_at=AT, until=AT)  # fmt: skip
    WebhookDelivery.objects.create(run=gone[0], event="run.completed", url=job.webhook_url,
                                   status="delivered")  # fmt: skip
    owing = on_old_day(make_run(job, status="completed"))
    WebhookDelivery.objects.create(run=owing, event="run.completed", url=job.webhook_url)
    # Runs not in history whose attempts ended that day: a dead letter, a run still retrying.
    dead = on_old_day(make_run(job, status="dead_letter"))
    retrying = make_run(job, status="queued", attempts=1)
    RunAttempt.objects.filter(run=retrying).update(finished_at=AT)
    make_old_day()
    assert len(tables_of_old_day()) == 2

    result = Pruner().run_once(NOW)

    assert result.counts["days_dropped"] == 1
    assert result.counts["deleted"] == 3
    assert exists(*gone, owing, dead, retrying) == [False, False, False, True, True, True]
    assert tables_of_old_day() == []
    assert not RunAttempt.objects.filter(run_id__in=[r.pk for r in gone]).exists()
    assert RunAttempt.objects.filter(run__in=[owing, dead, retrying]).count() == 3
    assert not RunHold.objects.exists()
    assert list(WebhookDelivery.objects.values_list("run_id", flat=True)) == [owing.pk]
    # Kept back, in the default partition now: it goes row by row once its webhook is sent.
    WebhookDelivery.objects.update(status="delivered")
    assert Pruner().run_once(NOW).counts["deleted"] == 1
    assert exists(owing) == [False]


def test_run_once__keeps_the_attempts_of_runs_that_finished_on_a_later_day():
    # A run retried for days: its first attempt ended on the old day, the run ten days
    # ago; a run replayed since the old day and finished again now.
    job = make_job()
    gone = on_old_day(make_run(job, status="completed"))
    across = make_run(job, status="completed", attempts=2)
    RunAttempt.objects.filter(run=across, number=1).update(
        started_at=AT - dt.timedelta(hours=1), finished_at=AT
    )
    later = NOW - dt.timedelta(days=10)
    RunAttempt.objects.filter(run=across, number=2).update(started_at=later, finished_at=later)
    JobRun.objects.filter(pk=across.pk).update(finished_at=later)
    replayed = make_run(job, status="completed", attempts=2)
    RunAttempt.objects.filter(run=replayed, number=1).update(started_at=AT, finished_at=AT)
    make_old_day()

    result = Pruner().run_once(NOW)

    assert result.counts["days_dropped"] == 1
    assert exists(gone, across, replayed) == [False, True, True]
    assert sorted(RunAttempt.objects.filter(run=across).values_list("number", flat=True)) == [1, 2]
    assert RunAttempt.objects.filter(run=replayed).count() == 2
    assert not RunAttempt.objects.filter(run_id=gone.pk).exists()


def test_run_once__a_day_with_runs_of_a_job_that_keeps_them_longer_waits_for_it():
    short, long = make_job(), make_job(retention_days=90)
    short_run = on_old_day(make_run(short, status="completed"))
    long_run = on_old_day(make_run(long, status="completed"))
    make_old_day()

    result = Pruner().run_once(NOW)

    assert result.counts == {"deleted": 1, "batches": 1, "days_dropped": 0,
                             "kept_for_webhooks": 0}  # fmt: skip
    assert exists(short_run, long_run) == [False, True]
    assert len(tables_of_old_day()) == 2


def test_prune_command__dry_run_names_the_whole_days_and_drops_nothing():
    job = make_job()
    runs = [on_old_day(make_run(job, status="completed")) for _ in range(2)]
    make_old_day()
    out = StringIO()

    call_command("strait_prune", "--dry-run", stdout=out)

    assert f"{OLD}\twhole day\t2" in out.getvalue()
    assert "Would drop 2 run(s) in whole days and delete 0 run(s) row by row." in out.getvalue()
    assert exists(*runs) == [True, True]


def test_run_once__finishes_a_day_that_an_earlier_round_detached_and_left():
    job = make_job()
    run = on_old_day(make_run(job, status="completed"))
    make_old_day()
    storage = backend()
    [day] = storage.history_days(NOW - dt.timedelta(days=30))
    assert storage.detach_history_day(day)  # ... and the worker died here
    assert exists(run) == [False]  # detached: out of the runs table already

    Pruner().run_once(NOW)

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = %s", [day.runs_table])
        assert cursor.fetchone()[0] == 0
    assert not RunAttempt.objects.filter(run_id=run.pk).exists()


def test_prepare_history__makes_the_days_ahead():
    made = backend().prepare_history(NOW + dt.timedelta(days=30))

    ahead = (NOW + dt.timedelta(days=37)).date()
    assert f"{RUNS}_p{ahead:%Y%m%d}" in made and f"{ATTEMPTS}_p{ahead:%Y%m%d}" in made
    assert backend().prepare_history(NOW + dt.timedelta(days=30)) == []


def test_detach__waits_for_a_record_that_holds_attempts_and_moves_runs_into_history():
    """A record holds its attempt rows, then moves its run into history. Detaching a day
    took history first and then waited for attempts, behind the record, which waited for
    history behind it: the record stalled until the detach gave up (or deadlocked)."""
    job = make_job()
    on_old_day(make_run(job, status="completed"))
    make_old_day()
    running = make_run(job, status="executing", attempts=1)
    [day] = backend().history_days(NOW - dt.timedelta(days=30))
    record = psycopg_connection()
    detached: dict[str, object] = {}

    def detach() -> None:
        try:
            detached["ok"] = backend().detach_history_day(day)
        finally:
            connections.close_all()

    thread = threading.Thread(target=detach)
    try:
        record.execute(f"UPDATE {ATTEMPTS} SET duration_ms = 1 WHERE run_id = %s", [running.pk])
        thread.start()
        wait_for_a_lock_wait()  # the detach waits for the record's lock on attempts
        began = time.monotonic()
        record.execute(
            f"UPDATE {RUNS} SET status = 'completed', finished_at = now() WHERE id = %s",
            [running.pk],
        )
        moved_in = time.monotonic() - began
        record.commit()
    finally:
        record.close()
        thread.join(timeout=30)

    if detached.get("ok"):
        backend().finish_history_day(day)  # the detached tables, which the next test makes again
    assert moved_in < 0.2, f"the record waited {moved_in:.2f} s for the detach"
    assert detached == {"ok": True}
    assert JobRun.objects.get(pk=running.pk).status == "completed"


def test_history_days__names_a_days_jobs_and_counts_its_runs_only_when_asked():
    jobs = [make_job(), make_job(), make_job()]
    for job, n in zip(jobs[:2], (3, 1), strict=True):
        for _ in range(n):
            on_old_day(make_run(job, status="completed"))
    make_old_day()
    before = NOW - dt.timedelta(days=30)

    [day] = backend().history_days(before)
    [counted] = backend().history_days(before, counted=True)

    assert (day.job_ids, day.runs) == (frozenset({jobs[0].pk, jobs[1].pk}), None)
    assert (counted.job_ids, counted.runs) == (day.job_ids, 4)
