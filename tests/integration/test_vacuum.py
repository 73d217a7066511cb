"""The vacuum duty against the real database: real dead rows, a real VACUUM, a real lead."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_strait.duties import default_duties
from django_strait.duties.vacuum import DEFAULT_INTERVAL, HELD_WAIT, QUIET_FACTOR, Vacuumer
from django_strait.models import Job, JobRun
from django_strait.storage import backend
from django_strait.storage.postgres import LOCK_NAMESPACE, lock_key
from tests.conftest import psycopg_connection
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
postgres_only = pytest.mark.skipif(not ON_POSTGRES, reason="VACUUM and dead rows: PostgreSQL")


def kill_rows(n: int) -> Job:
    """Make ``n`` dead row versions in the runs table (one UPDATE of ``n`` runs); their job."""
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job) for _ in range(n)])
    JobRun.objects.filter(job=job).update(priority=1)
    return job


def counted_dead(at_least: int) -> int:
    """The runs table's dead rows once the statistics show ``at_least`` (flushed ~1 s late)."""
    deadline = time.monotonic() + 10
    while True:
        with connection.cursor() as c:
            c.execute("SELECT pg_stat_force_next_flush()")
        dead = backend().dead_run_rows() or 0
        if dead >= at_least or time.monotonic() > deadline:
            return dead
        time.sleep(0.2)


def leaf_of(job: Job) -> str:
    """The table that holds the job's runs: the leaf of their status class when partitioned."""
    with connection.cursor() as c:
        c.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM django_strait_jobrun WHERE job_id = %s",
            [job.pk],
        )
        [(leaf,)] = c.fetchall()
        return leaf


def vacuums(table: str | None = None) -> int:
    with connection.cursor() as c:
        if table:
            c.execute(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = %s::regclass", [table]
            )
            return c.fetchone()[0]
        # Over the table's leaves when it is partitioned by status class.
        c.execute(
            "SELECT sum(vacuum_count) FROM pg_stat_user_tables "
            "WHERE relid = 'django_strait_jobrun'::regclass "
            "OR relid IN (SELECT relid FROM pg_partition_tree('django_strait_jobrun') WHERE isleaf)"
        )
        return c.fetchone()[0]


def test_default_duties__include_the_vacuum_duty_from_its_setting(settings):
    settings.STRAIT = {"VACUUM_DEAD_ROWS": 1234}

    [duty] = [d for d in default_duties() if d.name == "vacuum"]

    assert (duty.dead_rows, duty.interval) == (1234, DEFAULT_INTERVAL)
    assert DEFAULT_INTERVAL <= 5  # a full-speed drain kills thousands of rows a second


@postgres_only
def test_run_once__vacuums_the_runs_table_once_its_dead_rows_pass_the_threshold():
    job = kill_rows(300)
    assert counted_dead(300) >= 300
    # The leaf that holds them: another may hold dead rows of earlier tests (a rolled-back
    # insert leaves one), which the duty vacuums too.
    leaf = leaf_of(job)
    before = vacuums(leaf)

    result = Vacuumer(dead_rows=200).run_once(timezone.now())

    assert result.led
    assert result.counts["vacuumed"] == 1 and result.counts["dead_rows"] >= 300
    assert result.counts["left"] == 0
    assert result.counts["backoff"] == 1
    assert vacuums(leaf) == before + 1
    assert backend().dead_run_rows() == 0


@postgres_only
def test_run_once__leaves_the_table_alone_below_the_threshold():
    kill_rows(50)
    assert counted_dead(50) >= 50
    before = vacuums()

    result = Vacuumer(dead_rows=10_000).run_once(timezone.now())

    assert result.counts["vacuumed"] == 0
    assert not result.happened  # a look that did nothing is not logged
    assert vacuums() == before


@postgres_only
def test_run_once__waits_thirty_times_a_vacuums_length_before_the_next():
    duty = Vacuumer(dead_rows=200)
    kill_rows(300)
    counted_dead(300)
    began = time.monotonic()
    first = duty.run_once(timezone.now())
    took = time.monotonic() - began
    quiet = duty.quiet_until - (began + took)
    kill_rows(300)
    counted_dead(300)

    duty.quiet_until = time.monotonic() + 60  # as after a vacuum of 2 s
    second = duty.run_once(timezone.now())
    duty.quiet_until = time.monotonic()  # that quiet over
    third = duty.run_once(timezone.now())

    assert first.counts["vacuumed"] == 1 and first.counts["left"] == 0
    assert 0 < quiet <= QUIET_FACTOR * took
    assert second.counts["vacuumed"] == 0 and second.counts["dead_rows"] >= 300
    assert third.counts["vacuumed"] == 1


@postgres_only
def test_run_once__under_a_held_snapshot_vacuums_once_and_not_again_for_the_same_rows():
    make_run()
    with psycopg_connection() as other:
        other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM django_strait_jobrun").fetchone()
        kill_rows(300)
        counted_dead(300)
        duty = Vacuumer(dead_rows=200)

        first = duty.run_once(timezone.now())
        held_quiet = duty.quiet_until - time.monotonic()
        second = duty.run_once(timezone.now())
        kill_rows(300)  # 300 more: past dead_rows, not past twice that
        counted_dead(first.counts["left"] + 300)
        third = duty.run_once(timezone.now())
        other.rollback()

    assert first.counts["vacuumed"] == 1
    assert first.counts["left"] >= 300  # the snapshot still sees them
    assert first.counts["backoff"] == 2  # it freed nothing: wait for twice as many
    assert held_quiet > HELD_WAIT - 5  # and for half a minute at least
    assert second.counts["vacuumed"] == 0
    assert third.counts["vacuumed"] == 0


@postgres_only
def test_run_once__does_nothing_while_another_host_leads():
    kill_rows(300)
    counted_dead(300)
    before = vacuums()
    with psycopg_connection() as other:
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, lock_key("vacuum")])

        result = Vacuumer(dead_rows=200).run_once(timezone.now())
        other.rollback()

    assert not result.led
    assert vacuums() == before


@pytest.mark.skipif(ON_POSTGRES, reason="the portable backend's side of the duty")
def test_run_once__on_a_database_that_needs_no_vacuum_does_nothing():
    kill_rows(300)

    with CaptureQueriesContext(connection) as queries:
        result = Vacuumer(dead_rows=1).run_once(timezone.now())

    assert result.led and result.counts == {"dead_rows": 0, "vacuumed": 0}
    assert not queries.captured_queries  # not even a transaction for the lead, every 3 s


def test_run_once__turned_off_neither_vacuums_nor_takes_the_lead():
    kill_rows(300)
    before = vacuums() if ON_POSTGRES else None

    with CaptureQueriesContext(connection) as queries:
        result = Vacuumer(dead_rows=0).run_once(timezone.now())

    assert result.counts == {"dead_rows": 0, "vacuumed": 0}
    assert not queries.captured_queries  # VACUUM_DEAD_ROWS = 0: not a transaction every 3 s
    assert (vacuums() if ON_POSTGRES else None) == before


@pytest.mark.parametrize(("dead_rows", "interval"), [(-1, 30.0), (10, 0)])
def test_vacuumer__refuses_options_out_of_bounds(dead_rows, interval):
    with pytest.raises(ValueError, match="dead_rows|interval"):
        Vacuumer(dead_rows=dead_rows, interval=interval)
