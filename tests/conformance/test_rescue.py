"""The reaper's rescue: a lost attempt counts, the policy decides, a run that moved is left alone."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DataError, connection
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt
from django_strait.rules.states import Transition
from django_strait.storage.values import Rescue
from tests.conformance.conftest import needs_postgres, rescue
from tests.integration.factories import make_job, make_run

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def stale(run, seconds: float = 3600) -> None:
    silent = timezone.now() - dt.timedelta(seconds=seconds)
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=silent, dequeued_at=silent)


def test_rescue__a_run_with_attempts_left_is_retried(storage):
    run = make_run(make_job(max_attempts=3), status="executing")
    stale(run)

    found, [rescued] = rescue(storage)

    assert (found, rescued.transition, rescued.available_at is not None) == (
        1,
        Transition.RETRY,
        True,
    )
    assert JobRun.objects.get(pk=run.pk).status == "queued"


def test_rescue__a_run_on_its_last_attempt_is_dead_lettered(storage):
    run = make_run(make_job(max_attempts=1), status="executing")
    stale(run)

    _, [rescued] = rescue(storage)

    assert rescued.transition is Transition.DEAD_LETTER
    assert JobRun.objects.get(pk=run.pk).status == "dead_letter"
    assert RunAttempt.objects.get(run=run).error_type == "worker.lost"


def test_rescue__a_run_whose_cancel_was_asked_is_canceled(storage):
    run = make_run(status="executing", cancel_requested=True)
    stale(run)

    _, [rescued] = rescue(storage)

    assert rescued.transition is Transition.CANCEL
    assert JobRun.objects.get(pk=run.pk).status == "canceled"


def test_rescue__leaves_fresh_runs_alone(storage):
    run = make_run(status="executing")
    stale(run, seconds=5)

    assert rescue(storage) == (0, [])
    assert JobRun.objects.get(pk=run.pk).status == "executing"


def test_rescue__a_job_row_that_cannot_be_read_rescues_its_runs_on_the_default_policy(storage):
    good = make_run(make_job(), status="executing")
    bad = make_run(make_job(max_attempts=1), status="executing")
    for run in (good, bad):
        stale(run)
    # Its job's row cannot be read: a 5,000-digit number is valid JSON to every database
    # and past Python's integer-string limit on every version.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_strait_job SET non_retryable_errors = %s WHERE id = %s",
            ["[" + "9" * 5000 + "]", bad.job_id],
        )

    found, rescued = rescue(storage)

    assert (found, sorted(r.run.id for r in rescued)) == (2, [good.pk, bad.pk])
    # Not its job's max_attempts=1 (which would dead-letter it): the default policy retries.
    assert JobRun.objects.get(pk=bad.pk).status == "queued"


def test_rescue__a_run_whose_rescue_raises_is_dead_lettered_saying_why(storage):
    needs_postgres("SQLite's integers do not overflow at 2**31")
    good = make_run(make_job(), status="executing")
    bad = make_run(make_job(), status="dequeued")
    for run in (good, bad):
        stale(run)
    # A dequeued run spends an attempt when rescued: one past the integer column's bound.
    JobRun.objects.filter(pk=bad.pk).update(attempt=2**31 - 1)

    with pytest.raises(DataError):
        rescue(storage)
    found, rescued = rescue(storage, isolate=True)

    assert (found, [r.run.id for r in rescued]) == (2, [good.pk])
    status, error_type, last_error = JobRun.objects.values_list(
        "status", "error_type", "last_error"
    ).get(pk=bad.pk)
    assert (status, error_type) == ("dead_letter", "reaper.rescue_failed")
    assert "out of range" in last_error


def test_rescue__a_stale_run_whose_row_cannot_be_read_is_dead_lettered_naming_the_field(storage):
    needs_postgres("'infinity' is a PostgreSQL timestamp")
    good = make_run(make_job(), status="executing")
    bad = make_run(make_job(), status="executing")
    stale(good)
    # Never stale by its heartbeat, and unreadable: it could stay executing forever.
    JobRun.objects.filter(pk=bad.pk).update(heartbeat_at=None)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_strait_jobrun SET heartbeat_at = 'infinity' WHERE id = %s", [bad.pk]
        )

    found, rescued = rescue(storage)

    assert (found, [r.run.id for r in rescued]) == (2, [good.pk])
    status, error_type, last_error = JobRun.objects.values_list(
        "status", "error_type", "last_error"
    ).get(pk=bad.pk)
    assert (status, error_type) == ("dead_letter", "run.invalid")
    assert f"django_strait_jobrun id {bad.pk}, field heartbeat_at: cannot be read" in last_error


# -- the verbs: storage finds and applies, the caller decides ------------------------------


def find(storage, **options):
    with storage.atomic():
        return storage.stale_runs(
            timezone.now(), stale_after=60, waiting_stale_after=3600, limit=50, **options
        )


def test_stale_runs__are_the_silent_runs_with_their_facts(storage):
    job = make_job(max_attempts=3)
    silent = make_run(job, status="executing", cancel_requested=True)
    make_run(job, status="executing")  # its heartbeat is recent
    stale(silent)

    found = find(storage)

    assert (len(found), found.unreadable) == (1, {})
    [run] = found.runs
    assert (run.id, run.job_id, run.status, run.lost_attempt, run.cancel_requested) == (
        silent.pk, job.pk, "executing", silent.attempt, True,
    )  # fmt: skip


@pytest.mark.parametrize("then", [Transition.DISCARD, Transition.DEAD_LETTER, Transition.RETRY])
def test_rescue__applies_the_transition_it_is_given_not_its_own(storage, then):
    # A run with its whole budget left: only a decision made by the caller discards it.
    run = make_run(make_job(max_attempts=10), status="executing")
    stale(run)
    later = timezone.now() + dt.timedelta(hours=1)
    at = later if then is Transition.RETRY else None

    with storage.atomic():
        [found] = storage.stale_runs(
            timezone.now(), stale_after=60, waiting_stale_after=3600, limit=50
        ).runs
        [rescued] = storage.rescue(
            [Rescue(found, then, at)], unreadable={}, now=timezone.now(), stale_after=60
        )

    assert (rescued.transition, rescued.available_at) == (then, at)
    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.error_type) == (then.target, "worker.lost")
    assert (row.available_at == later) is (then is Transition.RETRY)
    assert RunAttempt.objects.get(run=run).outcome == "system_failed"


def test_rescue__leaves_a_run_that_moved_since_it_was_found(storage):
    run = make_run(make_job(), status="executing")
    stale(run)
    [found] = find(storage).runs
    JobRun.objects.filter(pk=run.pk).update(status="completed")

    rescued = storage.rescue(
        [Rescue(found, Transition.RETRY, timezone.now())],
        unreadable={},
        now=timezone.now(),
        stale_after=60,
    )

    assert (rescued, JobRun.objects.get(pk=run.pk).status) == ([], "completed")
    assert not RunAttempt.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    ("then", "at", "problem"),
    [
        (Transition.COMPLETE, None, "not complete"),
        (Transition.REPLAY, None, "not replay"),
        (Transition.RETRY, None, "needs its available_at"),
    ],
)
def test_rescue__a_transition_a_rescue_cannot_end_in_is_refused_naming_it(
    storage, then, at, problem
):
    run = make_run(make_job(), status="executing")
    stale(run)
    [found] = find(storage).runs

    with pytest.raises(ValueError, match=problem):
        Rescue(found, then, at)
