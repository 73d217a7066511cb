"""Process runs through the seam, alike on every backend: presets, free OOM attempts, let_go."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import JobPresetRecommendation, JobRun, RunAttempt
from django_strait.rules.states import Transition
from django_strait.storage import Record, RecordBatch
from django_strait.transitions import cancel
from tests.conformance.conftest import start
from tests.integration.factories import make_job

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def oom_record(run, job, now, *, preset: str, following: str | None) -> Record:
    transition = Transition.RETRY if following else Transition.DEAD_LETTER
    return Record(
        run.id, run.attempt, transition, now, now, 5, "oom", available_at=now if following else None,
        error_type="system.oom", job_id=job.pk, preset=preset,
        run_preset=following or preset, free_attempt=following is not None,
        recommend=following or preset,
    )  # fmt: skip


def test_record__an_oom_retry_is_free_and_recommends_the_next_preset(storage):
    job = make_job(execution="process")
    JobRun.objects.create(job=job)
    [run] = start(storage)
    now = timezone.now()

    done = storage.record(
        RecordBatch("w1", [oom_record(run, job, now, preset="micro", following="small-1x")])
    )

    assert done.moved == {run.id: "queued"}
    row = JobRun.objects.get(pk=run.id)
    assert (row.attempt, row.attempts_before_replay, row.preset) == (1, 1, "small-1x")
    attempt = RunAttempt.objects.get(run_id=run.id)
    assert (attempt.outcome, attempt.preset) == ("oom", "micro")
    rec = JobPresetRecommendation.objects.get(job=job)
    assert (rec.preset, rec.expires_at) == ("small-1x", now + dt.timedelta(hours=24))


def test_record__a_recommendation_is_raised_never_lowered_while_it_lasts(storage):
    job = make_job(execution="process")
    JobRun.objects.bulk_create([JobRun(job=job) for _ in range(2)])
    first, second = start(storage, limit=2)
    now = timezone.now()
    later = now + dt.timedelta(minutes=1)

    storage.record(RecordBatch("w1", [oom_record(first, job, now, preset="small-1x",
                                                 following="small-2x")]))  # fmt: skip
    storage.record(RecordBatch("w1", [oom_record(second, job, later, preset="micro",
                                                 following="small-1x")]))  # fmt: skip

    rec = JobPresetRecommendation.objects.get(job=job)
    assert (rec.preset, rec.expires_at) == ("small-2x", now + dt.timedelta(hours=24))


def test_record__thread_runs_write_no_preset(storage):
    job = make_job()
    JobRun.objects.create(job=job)
    [run] = start(storage)
    now = timezone.now()

    storage.record(RecordBatch("w1", [Record(run.id, 1, Transition.COMPLETE, now, now, 1,
                                             "succeeded", job_id=job.pk)]))  # fmt: skip

    assert JobRun.objects.get(pk=run.id).preset == ""
    assert RunAttempt.objects.get(run_id=run.id).preset == ""
    assert not JobPresetRecommendation.objects.exists()


def test_let_go__names_the_runs_canceled_or_no_longer_this_workers(storage):
    job = make_job(execution="process")
    JobRun.objects.bulk_create([JobRun(job=job) for _ in range(3)])
    kept, canceled, taken = start(storage, limit=3)
    cancel(canceled.id)
    JobRun.objects.filter(pk=taken.id).update(claimed_by="w2")

    assert storage.let_go("w1", [kept.id, canceled.id, taken.id]) == [canceled.id, taken.id]
    assert storage.let_go("w1", []) == []


def test_claim__brings_each_runs_own_preset_and_its_jobs_live_recommendation(storage):
    job, other = make_job(execution="process"), make_job(execution="process")
    run = JobRun.objects.create(job=job, preset="small-1x")
    plain = JobRun.objects.create(job=job)
    expired = JobRun.objects.create(job=other)
    now = timezone.now()
    JobPresetRecommendation.objects.create(
        job=job, preset="small-2x", expires_at=now + dt.timedelta(hours=1), updated_at=now
    )
    JobPresetRecommendation.objects.create(job=other, preset="small-2x", expires_at=now,
                                           updated_at=now)  # fmt: skip

    claimed = {r.id: r for r in start(storage, limit=3)}

    assert {rid: (r.run_preset, r.recommended_preset) for rid, r in claimed.items()} == {
        run.pk: ("small-1x", "small-2x"),
        plain.pk: ("", "small-2x"),
        expired.pk: ("", ""),
    }
