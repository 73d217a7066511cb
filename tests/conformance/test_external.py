"""External-worker runs (OJS) on every backend: only an OJS fetch claims them, queue by queue."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from django_strait.models import Execution, JobRun
from django_strait.transitions import external
from tests.conformance.conftest import claim, in_threads, needs_postgres, start
from tests.integration.factories import make_job, make_run

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def external_job(name: str = "ext.job"):
    return make_job(name, handler="", execution=Execution.EXTERNAL, ojs={"type": name})


def soon(run, now):
    return now + dt.timedelta(seconds=30)


def test_claim__never_takes_an_external_workers_run(storage):
    theirs = make_run(external_job())
    ours = make_run(make_job())

    assert [r.id for r in claim(storage, limit=10)] == [ours.pk]
    assert [r.id for r in start(storage, limit=10)] == []
    assert JobRun.objects.get(pk=theirs.pk).status == "queued"


def test_claim_external__takes_only_external_runs_the_first_queue_first(storage):
    job = external_job()
    low = make_run(job, queue="low")
    high = make_run(job, queue="high")
    make_run(make_job(), queue="high")

    with storage.claim_transaction():
        taken = storage.claim_external("ojs:w", queues=["high", "low"], limit=5, now=timezone.now())

    assert [r.id for r in taken] == [high.pk, low.pk]


def test_fetch__starts_the_runs_and_sets_their_deadline(storage):
    run = make_run(external_job(), queue="q")

    [started] = external.fetch("ojs:w", queues=["q"], limit=1, deadline=soon, storage=storage)

    row = JobRun.objects.get(pk=run.pk)
    assert (started.id, row.status, row.attempt, row.claimed_by) == (
        run.pk,
        "executing",
        1,
        "ojs:w",
    )
    assert row.visible_until == row.started_at + dt.timedelta(seconds=30)


def test_fetch__never_gives_one_run_to_two_workers(storage):
    needs_postgres("four connections fetching at once (SKIP LOCKED)")
    job = external_job()
    runs = [make_run(job, queue="q") for _ in range(20)]

    got = in_threads(
        4,
        lambda n: external.fetch(
            f"ojs:w{n}", queues=["q"], limit=10, deadline=soon, storage=storage
        ),
    )

    ids = [r.id for batch in got for r in batch]
    assert sorted(ids) == sorted(r.pk for r in runs)


def test_set_deadlines__moves_only_executing_runs_the_worker_holds(storage):
    job = external_job()
    queued = make_run(job)
    mine, theirs = make_run(job, status="executing"), make_run(job, status="executing")
    JobRun.objects.filter(pk=mine.pk).update(claimed_by="ojs:a")
    JobRun.objects.filter(pk=theirs.pk).update(claimed_by="ojs:b")
    later = timezone.now() + dt.timedelta(minutes=5)

    moved = storage.set_deadlines(
        "ojs:a", {queued.pk: later, mine.pk: later, theirs.pk: later}, now=timezone.now()
    )

    assert moved == [mine.pk]
    assert JobRun.objects.get(pk=queued.pk).visible_until is None
    assert JobRun.objects.get(pk=theirs.pk).visible_until is None


def test_set_external_ids__names_only_runs_without_an_id(storage):
    job = external_job()
    unnamed, named = make_run(job), make_run(job)
    kept = uuid.uuid4()
    JobRun.objects.filter(pk=named.pk).update(ojs_id=kept)
    given = {unnamed.pk: uuid.uuid4(), named.pk: uuid.uuid4()}

    assert storage.set_external_ids(given) == [unnamed.pk]

    ids = dict(JobRun.objects.filter(job=job).values_list("pk", "ojs_id"))
    assert ids == {unnamed.pk: given[unnamed.pk], named.pk: kept}


def test_set_external_progress__only_the_holder_and_never_backwards_in_an_attempt(storage):
    job = external_job()
    run = make_run(job)
    JobRun.objects.filter(pk=run.pk).update(
        status="executing", claimed_by="ojs:a", attempt=1, ojs={"timeout_ms": 5}
    )

    assert storage.set_external_progress(run.pk, "ojs:b", 1, {"progress": 0.5}) is None
    assert storage.set_external_progress(run.pk, "ojs:a", 2, {"progress": 0.5}) is None
    kept = storage.set_external_progress(run.pk, "ojs:a", 1, {"progress": 0.5, "message": "m"})
    assert kept == {"progress": 0.5, "message": "m", "attempt": 1}
    lower = storage.set_external_progress(run.pk, "ojs:a", 1, {"progress": 0.2})
    assert lower == {"progress": 0.5, "attempt": 1}

    assert JobRun.objects.get(pk=run.pk).ojs == {"timeout_ms": 5, "progress": lower}
    JobRun.objects.filter(pk=run.pk).update(status="completed")
    assert storage.set_external_progress(run.pk, "ojs:a", 1, {"progress": 0.9}) is None


def test_set_external_retry_delay__adds_it_to_the_envelope_keeping_the_rest(storage):
    job = external_job()
    enveloped, bare = make_run(job), make_run(job)
    JobRun.objects.filter(pk=enveloped.pk).update(ojs={"timeout_ms": 5})

    assert storage.set_external_retry_delay(enveloped.pk, 1500) is True
    assert storage.set_external_retry_delay(bare.pk, 0) is True
    assert storage.set_external_retry_delay(10**9, 10) is False

    envelopes = dict(JobRun.objects.filter(job=job).values_list("pk", "ojs"))
    assert envelopes == {
        enveloped.pk: {"timeout_ms": 5, "retry_delay_ms": 1500},
        bare.pk: {"retry_delay_ms": 0},
    }
