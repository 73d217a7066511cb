"""The worker's claim is prepared on a direct PostgreSQL connection, and only there."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from django_strait.models import JobRun
from django_strait.states import Transition
from django_strait.storage import PostgresStorage, Record, RecordBatch
from tests.conformance.conftest import start
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


def claim_start_and_record() -> None:
    storage = PostgresStorage(connection.alias)
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(3)])
    runs = start(storage, limit=3)
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


def test_claim__is_prepared_on_a_direct_connection_and_nothing_else_is(fresh_connection, settings):
    settings.STRAIT = {**settings.STRAIT, "PREPARE_STATEMENTS": True}
    claim_start_and_record()

    # Start and record stay unprepared (their generic plans were slower), and so do
    # Django's own queries, as Django wants them.
    [statement] = prepared()
    assert "FOR UPDATE SKIP LOCKED" in statement


def test_claim__is_not_prepared_when_the_setting_is_off(fresh_connection, settings):
    settings.STRAIT = {**settings.STRAIT, "PREPARE_STATEMENTS": False}

    claim_start_and_record()

    assert prepared() == []
