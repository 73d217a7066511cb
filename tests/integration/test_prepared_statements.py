"""The worker's hot statements are prepared on its direct PostgreSQL connections, and only there."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.utils import timezone

from django_strait import trigger
from django_strait.models import JobRun
from django_strait.rules.states import Transition
from django_strait.storage import PostgresStorage, Record, RecordBatch, sql
from django_strait.transitions.worker import claim_and_start
from tests.integration.factories import make_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def fresh_connection():
    """A connection of its own: prepared statements live as long as their session."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's (SQLite caches its own)")
    connection.close()
    yield connection
    connection.close()


def claim_start_and_record(*, job_by_job: bool = False) -> None:
    storage = PostgresStorage(connection.alias)
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(3)])
    runs = claim_and_start("w1", limit=3, storage=storage, isolate=job_by_job)
    now = timezone.now()
    records = [Record(r.id, 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=job.pk)
               for r in runs]  # fmt: skip
    done = storage.record(RecordBatch("w1", records))
    assert set(done.moved.values()) == {"completed"}


def prepared() -> list[str]:
    """The statements this session has prepared."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


#: STRAIT["PLAN_LIFETIME"]'s default.
LIFETIME = 10.0


def as_a_worker(now: float | None = None) -> None:
    """What the worker does on its claim and record threads before each call."""
    sql.keep_plans(connection, time.monotonic() if now is None else now, LIFETIME)


def test_claim_and_record__are_prepared_on_a_workers_direct_connection_by_default(
    fresh_connection,
):
    as_a_worker()
    claim_start_and_record()

    # The claim starts its runs itself, so no start statement runs; Django's own
    # queries stay unprepared, as Django wants them.
    statements = prepared()
    assert len(statements) == 2
    assert any("FOR UPDATE SKIP LOCKED" in s for s in statements)
    assert any("django_strait_runattempt" in s for s in statements)


def test_start__is_prepared_too_when_the_worker_claims_job_by_job(fresh_connection):
    as_a_worker()
    claim_start_and_record(job_by_job=True)  # after a failed claim: claim, then start apart

    statements = prepared()
    assert len(statements) == 3
    assert any("RETURNING r.id, r.attempt, r.started_at" in s for s in statements)


def test_the_named_statements__are_the_ones_prepared(fresh_connection, settings):
    settings.STRAIT = {**settings.STRAIT, "PREPARE_STATEMENTS": ["record"]}
    as_a_worker()
    claim_start_and_record()

    [statement] = prepared()
    assert "django_strait_runattempt" in statement


def test_nothing__is_prepared_when_the_setting_is_off(fresh_connection, settings):
    settings.STRAIT = {**settings.STRAIT, "PREPARE_STATEMENTS": False}
    as_a_worker()

    claim_start_and_record()

    assert prepared() == []


def test_nothing__is_prepared_on_a_connection_that_is_not_a_workers(fresh_connection):
    # A web process records too (the OJS binding): its connections keep no plans.
    claim_start_and_record()

    assert prepared() == []


def test_a_workers_plans__are_dropped_after_their_lifetime_and_made_again(fresh_connection):
    as_a_worker(now=1000.0)
    claim_start_and_record()
    assert len(prepared()) == 2

    as_a_worker(now=1000.0 + LIFETIME - 1)
    assert len(prepared()) == 2
    as_a_worker(now=1000.0 + LIFETIME)
    assert prepared() == []

    claim_start_and_record()  # psycopg forgot them too: prepared again, not refused
    assert len(prepared()) == 2


def test_server_bound_cursor__kept_for_the_next_call_while_the_session_lasts(fresh_connection):
    with sql.server_bound_cursor(connection) as first:
        pass
    with sql.server_bound_cursor(connection) as again:
        assert again is first
    connection.close()  # a new session: the kept cursor belongs to the old one

    run = trigger("test-noop", {"after": "reconnect"})

    assert JobRun.objects.get(pk=run.pk).payload == {"after": "reconnect"}
    with sql.server_bound_cursor(connection) as after:
        assert after is not first and after.connection is connection.connection


def test_server_bound_cursor__a_call_inside_another_gets_a_cursor_of_its_own(fresh_connection):
    with sql.server_bound_cursor(connection) as outer:
        outer.execute("SELECT 1 UNION ALL SELECT 2")
        with sql.server_bound_cursor(connection) as inner:
            assert inner is not outer
            inner.execute("SELECT 3")
            assert inner.fetchall() == [(3,)]
        assert outer.fetchall() == [(1,), (2,)]  # the outer call's rows are still its own


def test_a_workers_plans__drop_cleanly_after_a_lifetime_in_which_nothing_was_prepared(
    fresh_connection,
):
    # An idle record thread still calls keep_plans (heartbeats, the process watch):
    # a drop then finds nothing prepared, and the next drop must still be seen.
    as_a_worker(now=1000.0)
    claim_start_and_record()
    as_a_worker(now=1000.0 + LIFETIME)
    as_a_worker(now=1000.0 + 2 * LIFETIME)  # nothing prepared since the last drop
    claim_start_and_record()
    as_a_worker(now=1000.0 + 3 * LIFETIME)
    assert prepared() == []

    claim_start_and_record()

    assert len(prepared()) == 2
