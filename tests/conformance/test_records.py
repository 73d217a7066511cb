"""The record and its parts: the runs move, their attempts are appended, the rollup counts once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import EndpointHealth, JobRun, RunAttempt, RunRollup
from django_strait.rules.resilience import health
from django_strait.rules.states import Transition
from django_strait.storage import Record, RecordBatch
from tests.conformance.conftest import start
from tests.integration.factories import make_job

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def test_record__moves_each_run_and_appends_its_attempt(storage):
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(3)])
    runs = start(storage, limit=3)
    now = timezone.now()
    retry_at = now + dt.timedelta(seconds=30)
    records = [
        Record(runs[0].id, 1, Transition.COMPLETE, now, now, 7, "succeeded", result={"ok": 1}, job_id=job.pk),
        Record(runs[1].id, 1, Transition.RETRY, now, now, 8, "failed", available_at=retry_at,
               error="boom", error_type="python.ValueError", job_id=job.pk),
        Record(runs[2].id, 1, Transition.DEAD_LETTER, now, now, 9, "failed", error_type="http.404",
               status_code=404, endpoint="http://127.0.0.1:9/x", job_id=job.pk),
    ]  # fmt: skip

    done = storage.record(RecordBatch("w1", records))

    assert done.moved == {runs[0].id: "completed", runs[1].id: "queued", runs[2].id: "dead_letter"}
    completed, retried, dead = (JobRun.objects.get(pk=r.id) for r in runs)
    assert (completed.result, completed.finished_at is not None) == ({"ok": 1}, True)
    assert (retried.available_at, retried.finished_at, retried.error_type) == (
        retry_at, None, "python.ValueError",
    )  # fmt: skip
    assert (dead.endpoint_used, dead.claimed_by, dead.heartbeat_at) == (
        "http://127.0.0.1:9/x",
        "",
        None,
    )
    attempts = RunAttempt.objects.order_by("run_id").values_list("outcome", "status_code", "worker")
    assert list(attempts) == [
        ("succeeded", None, "w1"),
        ("failed", None, "w1"),
        ("failed", 404, "w1"),
    ]


def test_record__counts_each_attempt_once_in_the_minute_rollup(storage):
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(5)])
    runs = start(storage, limit=5)
    minute = timezone.now().replace(second=30, microsecond=0)
    records = [
        Record(r.id, 1, Transition.COMPLETE if i < 3 else Transition.DEAD_LETTER, minute, minute,
               10 * (i + 1), "succeeded" if i < 3 else "failed", job_id=job.pk)
        for i, r in enumerate(runs)
    ]  # fmt: skip

    storage.record(RecordBatch("w1", records[:4]))
    storage.record(RecordBatch("w1", records[4:]))

    rollup = {
        status: (count, total)
        for status, count, total in RunRollup.objects.filter(job=job).values_list(
            "status", "count", "total_duration_ms"
        )
    }
    assert rollup == {"completed": (3, 60), "dead_letter": (2, 90)}
    assert set(RunRollup.objects.values_list("minute", flat=True)) == {minute.replace(second=0)}


def test_record__a_lost_run_is_not_counted(storage):
    job = make_job()
    JobRun.objects.create(job=job, available_at=timezone.now())
    [run] = start(storage)
    now = timezone.now()

    storage.record(
        RecordBatch(
            "someone-else",
            [Record(run.id, 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=job.pk)],
        )
    )

    assert not RunRollup.objects.exists()


def test_record__each_record_names_the_worker_that_holds_its_attempt(storage):
    # The OJS fast door records the acks of several workers in one batch: each run moves
    # only under its own worker, and its attempt row names that worker.
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(3)])
    [a] = start(storage, worker="a", limit=1)
    [b] = start(storage, worker="b", limit=1)
    [c] = start(storage, worker="c", limit=1)
    now = timezone.now()

    def rec(run, worker):
        return Record(run.id, 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=job.pk,
                      worker=worker)  # fmt: skip

    done = storage.record(RecordBatch("", [rec(a, "a"), rec(b, "b"), rec(c, "a")]))

    assert done.moved == {a.id: "completed", b.id: "completed"} and done.lost == [c.id]
    assert dict(RunAttempt.objects.values_list("run_id", "worker")) == {a.id: "a", b.id: "b"}
    assert JobRun.objects.get(pk=c.id).status == "executing"


def test_record__a_health_rate_decayed_to_nothing_folds_to_zero_not_an_error(storage):
    # After one failure and thousands of successes a failure rate decays toward 0; a
    # product that underflowed made PostgreSQL refuse the whole record.
    url = "http://127.0.0.1:9/decayed"
    EndpointHealth.objects.create(endpoint_url=url, failure_rate=5e-324, success_rate=1.0)
    job = make_job()
    JobRun.objects.create(job=job, available_at=timezone.now())
    [run] = start(storage)
    now = timezone.now()
    rec = Record(
        run.id, 1, Transition.COMPLETE, now, now, 5, "succeeded", endpoint=url, job_id=job.pk
    )
    sample = health.Sample(url, 100, 0.9**100, 1.0, 0.0, 5.0, 30_000.0)

    done = storage.record(RecordBatch("w1", [rec], [sample]))

    assert done.moved == {run.id: "completed"}
    assert EndpointHealth.objects.get(endpoint_url=url).failure_rate == 0.0


def test_record__writes_one_webhook_delivery_per_ended_run_its_job_wants(storage):
    from django_strait.models import WebhookDelivery

    hooked = make_job(webhook_url="https://hooks.example.com/a")
    picky = make_job(webhook_url="https://hooks.example.com/b", webhook_events=["run.failed"])
    plain = make_job()
    for job in (hooked, hooked, hooked, picky, plain):
        JobRun.objects.create(job=job, available_at=timezone.now())
    runs = sorted(start(storage, limit=5), key=lambda r: r.id)
    now = timezone.now()
    transitions = [Transition.COMPLETE, Transition.RETRY, Transition.DEAD_LETTER,
                   Transition.COMPLETE, Transition.COMPLETE]  # fmt: skip
    records = [
        Record(r.id, 1, t, now, now, 1, "succeeded", job_id=r.job_id,
               available_at=now if t is Transition.RETRY else None)
        for r, t in zip(runs, transitions, strict=True)
    ]  # fmt: skip

    storage.record(RecordBatch("w1", records))

    written = WebhookDelivery.objects.order_by("run_id").values_list("run_id", "event", "url")
    assert list(written) == [
        (runs[0].id, "run.completed", "https://hooks.example.com/a"),
        (runs[2].id, "run.dead_lettered", "https://hooks.example.com/a"),
    ]  # a retry ends nothing; picky wants failures only; plain has no webhook
    ids = WebhookDelivery.objects.values_list("delivery_id", flat=True)
    assert len(set(ids)) == 2 and all(ids)
    assert set(WebhookDelivery.objects.values_list("status", "attempt")) == {("pending", 0)}


def test_record__on_postgresql_writes_a_batchs_webhooks_in_its_one_statement():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_strait.models import WebhookDelivery
    from django_strait.storage import PostgresStorage
    from tests.conformance.conftest import needs_postgres

    needs_postgres("the record is one hand-written statement there")

    class Counting(PostgresStorage):
        statements = 0

        def _execute(self, sql, params, **kw):
            Counting.statements += 1
            return super()._execute(sql, params, **kw)

    storage = Counting(connection.alias)
    job = make_job(webhook_url="https://hooks.example.com/a")
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(50)])
    runs = start(storage, limit=50)
    now = timezone.now()
    records = [Record(r.id, 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=job.pk)
               for r in runs]  # fmt: skip
    Counting.statements = 0

    with CaptureQueriesContext(connection) as through_django:
        storage.record(RecordBatch("w1", records))

    assert (Counting.statements, len(through_django)) == (1, 0)
    assert WebhookDelivery.objects.count() == 50
