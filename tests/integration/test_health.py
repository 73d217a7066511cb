"""Endpoint health scores driven by a real endpoint on 127.0.0.1, with real workers."""

from __future__ import annotations

import contextlib
import datetime as dt
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_strait import trigger_many
from django_strait.models import EndpointHealth, Job, JobRun, RunAttempt, RunHold
from tests.conftest import Reply, spawn_workers, stop_workers
from tests.integration.test_limits import InFlight

pytestmark = pytest.mark.django_db(transaction=True)

COOLDOWN = 60.0


@pytest.fixture(autouse=True)
def no_circuit_in_the_way():
    """A circuit would open after 5 failures: these tests watch health alone."""
    strait = {**settings.STRAIT, "CIRCUIT_FAILURE_THRESHOLD": 10_000, "CIRCUIT_COOLDOWN": "60s"}
    with override_settings(STRAIT=strait):
        yield


def health(server, path="/hook") -> EndpointHealth:
    return EndpointHealth.objects.get(endpoint_url=server.url(path))


def hook_job(server, **fields) -> Job:
    fields.setdefault("max_attempts", 1)
    return Job.objects.create(name="hook", endpoint_url=server.url("/hook"), **fields)


def answer_with(server, status: int) -> None:
    server.routes["/hook"] = lambda r: Reply(status, b"{}")


def run_batch(burst, n: int) -> None:
    trigger_many("hook", [{"i": i} for i in range(n)])
    burst()


def test_health__successes_make_a_healthy_row_with_every_result_counted(burst, http_server):
    hook_job(http_server)

    run_batch(burst, 12)

    row = health(http_server)
    assert (row.level, row.samples) == ("healthy", 12)
    assert row.success_rate == pytest.approx(1.0)
    assert row.failure_rate == pytest.approx(0.0)
    assert row.score > 95


def test_health__one_batch_of_n_moves_the_ewma_n_steps(burst, http_server):
    answer_with(http_server, 500)
    hook_job(http_server)

    run_batch(burst, 7)

    row = health(http_server)
    # From the healthy prior, 7 failures at alpha 0.1: success 0.9^7, failure 1 - 0.9^7.
    assert row.success_rate == pytest.approx(0.9**7, abs=1e-9)
    assert row.failure_rate == pytest.approx(1 - 0.9**7, abs=1e-9)
    assert row.score == pytest.approx(20 + 80 * 0.9**7, abs=0.5)  # latency ~ perfect
    assert row.level == "degraded"


def test_health__no_second_statement_per_batch(burst, http_server):
    """Health is written inside the record statement: no EndpointHealth query of its own."""
    from django.test.utils import CaptureQueriesContext

    from django_strait.rules.resilience.health import Answer, summarize
    from django_strait.rules.states import Transition
    from django_strait.storage import Record, RecordBatch, backend
    from django_strait.storage.postgres import statements as pg_storage

    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes health with the ORM in the record's transaction")
    hook_job(http_server)
    runs = trigger_many("hook", [{}])
    JobRun.objects.filter(pk=runs[0].pk).update(status="executing", claimed_by="w", attempt=1)
    now = timezone.now()
    rec = Record(
        run_id=runs[0].pk,
        attempt=1,
        transition=Transition.COMPLETE,
        started_at=now,
        finished_at=now,
        duration_ms=5,
        outcome="succeeded",
        endpoint=http_server.url("/hook"),
        status_code=200,
        job_id=runs[0].job_id,
    )
    samples = summarize([Answer(rec.endpoint, True, "", 200, 5, 30.0)], alpha=0.1)

    statements = []
    real = pg_storage.server_bound_cursor

    class Counted:  # the real cursor, its statements noted
        def __init__(self, cursor):
            self.cursor = cursor

        def execute(self, sql, *args, **kwargs):
            statements.append(sql)
            return self.cursor.execute(sql, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.cursor, name)

    @contextlib.contextmanager
    def counted(conn):
        with real(conn) as cursor:
            yield Counted(cursor)

    pg_storage.server_bound_cursor = counted
    try:
        with CaptureQueriesContext(connection) as orm_queries:
            backend().record(RecordBatch("w", [rec], samples))
    finally:
        pg_storage.server_bound_cursor = real

    assert len(statements) == 1 and orm_queries.captured_queries == []
    assert JobRun.objects.get(pk=runs[0].pk).status == "completed"
    assert health(http_server).samples == 1


def test_health__healthy_degraded_unhealthy_and_back(burst, http_server):
    """The levels follow the endpoint; unhealthy holds runs and lets one probe through."""
    hook_job(http_server)
    run_batch(burst, 3)
    assert health(http_server).level == "healthy"

    answer_with(http_server, 500)
    run_batch(burst, 8)  # 20 + 80 x 0.9^8 = 54
    assert health(http_server).level == "degraded"

    run_batch(burst, 14)  # 20 + 80 x 0.9^22 = 27.9
    row = health(http_server)
    assert (row.level, row.score < 30) == ("unhealthy", True)

    # Unhealthy: of five new runs, one probe reaches the endpoint; the rest wait.
    answer_with(http_server, 200)
    sent_before = len(http_server.requests)
    waiting = trigger_many("hook", [{"after": i} for i in range(5)])
    burst()
    assert len(http_server.requests) == sent_before + 1
    held = JobRun.objects.filter(pk__in=[r.pk for r in waiting], status="queued")
    assert held.count() == 4
    for run in held:
        assert (run.attempt, run.error_type) == (0, "health.unhealthy")
        assert "is unhealthy (health score" in run.last_error
        assert not RunAttempt.objects.filter(run=run).exists()
        [period] = RunHold.objects.filter(run=run)
        assert period.reason == "health.unhealthy"

    # Each cooldown lets one more probe through; their successes lift the score.
    for _ in range(5):
        if health(http_server).level != "unhealthy":
            break
        EndpointHealth.objects.update(
            probe_started_at=timezone.now() - dt.timedelta(seconds=COOLDOWN)
        )
        JobRun.objects.filter(status="queued").update(available_at=timezone.now())
        burst()
    assert health(http_server).level == "degraded"

    JobRun.objects.filter(status="queued").update(available_at=timezone.now())
    burst()
    assert not JobRun.objects.filter(pk__in=[r.pk for r in waiting]).exclude(status="completed")

    run_batch(burst, 20)
    assert health(http_server).level == "healthy"


@pytest.mark.postgres
@pytest.mark.slow
def test_health__degraded_endpoint_scales_concurrency_seen_at_the_endpoint(
    burst, http_server, worker_env
):
    """max_concurrency 8 at score ~42.6 allows floor(8 x 0.565) = 4 in flight, across 4 workers."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes the workers' claims, so they cannot race")
    job = hook_job(http_server)
    answer_with(http_server, 500)
    run_batch(burst, 12)  # 20 + 80 x 0.9^12 = 42.6: degraded
    # The limit comes after: a --burst worker leaves runs held by a limit queued.
    Job.objects.filter(pk=job.pk).update(max_concurrency=8)
    row = health(http_server)
    assert row.level == "degraded" and 40 < row.score < 45
    route = http_server.routes["/hook"] = InFlight(sleep=0.1)
    runs = trigger_many("hook", [{"i": i} for i in range(40)])
    # A tiny alpha keeps the score where it is while these runs succeed.
    env = {**worker_env, "STRAIT_HEALTH_EWMA_ALPHA": "0.0001"}
    workers = spawn_workers(env, "--concurrency", "10", "--batch-size", "10")
    try:
        deadline = time.monotonic() + 120
        done = JobRun.objects.filter(pk__in=[r.pk for r in runs], status="completed")
        while done.count() < len(runs) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        outputs = stop_workers(workers)
    assert done.count() == len(runs), outputs
    assert health(http_server).level == "degraded"
    assert 1 <= route.most <= 4, route.most  # not the job's 8


def test_health_sampler__one_sample_per_endpoint_and_minute_kept_a_day():
    from django_strait.duties.sampler import HealthSampler
    from django_strait.models import HealthSample

    EndpointHealth.objects.create(endpoint_url="http://127.0.0.1:1/a", success_rate=0.5)
    now = timezone.now()
    old = HealthSample.objects.create(
        endpoint_url="http://127.0.0.1:1/a", at=now - dt.timedelta(days=2), score=90
    )
    sampler = HealthSampler()

    first = sampler.run_once(now)
    again = sampler.run_once(now)

    assert (first.led, first.counts) == (True, {"sampled": 1, "forgotten": 1})
    assert again.counts == {"sampled": 0, "forgotten": 0}
    [sample] = HealthSample.objects.all()
    assert sample.at == now.replace(second=0, microsecond=0)
    assert sample.score == pytest.approx(EndpointHealth.objects.get().score)
    assert not HealthSample.objects.filter(pk=old.pk).exists()
