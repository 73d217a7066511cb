"""The reaper's rescue: a lost attempt counts, the policy decides, a run that moved is left alone."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt
from django_strait.states import Transition
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)


def stale(run, seconds: float = 3600) -> None:
    silent = timezone.now() - dt.timedelta(seconds=seconds)
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=silent, dequeued_at=silent)


def rescue(storage, **options):
    return storage.rescue_batch(
        timezone.now(), stale_after=60, waiting_stale_after=3600, limit=50,
        rng=random.Random(0), **options,
    )  # fmt: skip


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


def test_rescue__isolated_leaves_a_run_that_raises_and_rescues_the_others(storage):
    good = make_run(make_job(), status="executing")
    bad = make_run(make_job(), status="executing")
    for run in (good, bad):
        stale(run)
    # Its job's row cannot be read, so its policy raises: a 5,000-digit number is valid
    # JSON to every database and past Python's integer-string limit on every version.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_strait_job SET non_retryable_errors = %s WHERE id = %s",
            ["[" + "9" * 5000 + "]", bad.job_id],
        )

    with pytest.raises(ValueError):
        rescue(storage)
    found, rescued = rescue(storage, isolate=True)

    assert (found, [r.run.id for r in rescued]) == (2, [good.pk])
    assert JobRun.objects.get(pk=bad.pk).status == "executing"
