"""Per-job max_concurrency and rate limits, decided inside the claim transaction."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from django_strait import trigger, trigger_many
from django_strait.api.auth import issue_key
from django_strait.models import Job, JobRateAdmission, JobRun, RunAttempt
from django_strait.rules.resilience.limits import RATE_LOG_KEPT
from django_strait.worker.engine import Worker, WorkerConfig
from tests.conftest import Reply, spawn_workers, stop_workers

pytestmark = pytest.mark.django_db(transaction=True)

#: Long enough that no admission leaves the window during a test.
LONG_WINDOW = 86_400.0


def http_job(server, name: str, **limits) -> Job:
    return Job.objects.create(name=name, endpoint_url=server.url(f"/{name}"), **limits)


def claim_once(worker_id: str, limit: int = 50) -> list[int]:
    """Claim and start one batch as a worker would; return the started run ids."""
    worker = Worker(WorkerConfig(worker_id=worker_id))
    return [run.id for run in worker.claimer.claim_and_start(limit)]


def most_in_any_window(times: list[dt.datetime], window: float) -> int:
    """The most of ``times`` inside any span of ``window`` seconds (ending at one of them)."""
    span = dt.timedelta(seconds=window)
    ordered = sorted(times)
    return max(sum(1 for t in ordered if end - span < t <= end) for end in ordered)


def statuses() -> Counter:
    return Counter(JobRun.objects.values_list("status", flat=True))


# -- validation --------------------------------------------------------------------


def job_errors(**fields) -> dict[str, list[str]]:
    job = Job(name="limited", handler="tests.testapp.jobs.noop", **fields)
    with pytest.raises(ValidationError) as info:
        job.full_clean()
    return info.value.message_dict


def test_job_clean__rate_limit_max_without_window_names_the_window():
    errors = job_errors(rate_limit_max=5)

    assert "rate_limit_window_secs" in errors
    assert "or neither" in errors["rate_limit_window_secs"][0]


def test_job_clean__window_without_rate_limit_max_names_the_max():
    assert "rate_limit_max" in job_errors(rate_limit_window_secs=2.0)


@pytest.mark.parametrize("window", [0.0, -1.0, 86400.5, 1e308])
def test_job_clean__window_out_of_bounds_is_refused(window):
    errors = job_errors(rate_limit_max=5, rate_limit_window_secs=window)

    [message] = errors["rate_limit_window_secs"]
    assert message.startswith("must be a number from 0.001 to 86,400 seconds; got ")


@pytest.mark.parametrize("window", [float("inf"), float("nan")])
def test_job_clean__window_not_finite_is_refused(window):
    errors = job_errors(rate_limit_max=5, rate_limit_window_secs=window)

    assert "must be a finite number" in " ".join(errors["rate_limit_window_secs"])


def test_job_clean__zero_rate_limit_is_refused():
    errors = job_errors(rate_limit_max=0, rate_limit_window_secs=1.0)

    assert errors["rate_limit_max"] == ["must be a number from 1 to 1,000,000; got 0"]


def test_job_clean__zero_max_concurrency_means_no_limit():
    Job(name="limited", handler="tests.testapp.jobs.noop", max_concurrency=0).full_clean()


def test_job_clean__both_limits_set__valid():
    Job(
        name="limited",
        handler="tests.testapp.jobs.noop",
        max_concurrency=3,
        rate_limit_max=5,
        rate_limit_window_secs=2.0,
    ).full_clean()


def api_client() -> APIClient:
    cache.clear()  # fresh throttles
    _, key = issue_key("all", ["*"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


def test_api_create__accepts_the_limits():
    body = {
        "name": "hook",
        "handler": "tests.testapp.jobs.noop",
        "max_concurrency": 3,
        "rate_limit_max": 5,
        "rate_limit_window_secs": 2.0,
    }

    response = api_client().post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert (job.max_concurrency, job.rate_limit_max, job.rate_limit_window_secs) == (3, 5, 2.0)


def test_api_create__half_a_rate_limit_is_a_400_naming_the_field():
    body = {"name": "hook", "handler": "tests.testapp.jobs.noop", "rate_limit_window_secs": 2.0}

    response = api_client().post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == ["rate_limit_max"]


# -- one claim at a time -------------------------------------------------------------


def test_max_concurrency__claim_starts_only_the_free_slots(http_server):
    job = http_job(http_server, "capped", max_concurrency=2)
    trigger_many("capped", [{"i": i} for i in range(5)])
    before = timezone.now()

    started = claim_once("w1")

    assert len(started) == 2
    assert statuses() == {"executing": 2, "queued": 3}
    held = JobRun.objects.filter(job=job, status="queued")
    assert all(run.attempt == 0 and run.available_at > before for run in held)
    assert not RunAttempt.objects.exists()  # a limit hold writes no attempt row


def test_max_concurrency__zero_written_through_the_orm_means_no_limit(http_server):
    http_job(http_server, "unlimited", max_concurrency=0)  # Job.objects.create: no validation
    trigger_many("unlimited", [{"i": i} for i in range(5)])

    assert len(claim_once("w1")) == 5
    assert statuses() == {"executing": 5}


def test_max_concurrency__admits_the_runs_first_in_claim_order(http_server):
    # Priority first, then due time: the slot goes to the run the claim ranks first,
    # never to the newest (SQLite read its batch back newest-first and admitted that).
    http_job(http_server, "capped", max_concurrency=1)
    early = timezone.now() - dt.timedelta(minutes=5)
    oldest = trigger("capped", {"n": "oldest"}, run_at=early)
    urgent = trigger("capped", {"n": "urgent"}, priority=10)
    trigger("capped", {"n": "newest"})

    assert claim_once("w1") == [urgent.pk]
    JobRun.objects.filter(pk=urgent.pk).update(status="completed")
    JobRun.objects.filter(status="queued").update(available_at=early)

    assert claim_once("w2") == [oldest.pk]


def test_max_concurrency__second_worker_finds_no_slot(http_server):
    http_job(http_server, "capped", max_concurrency=2)
    trigger_many("capped", [{"i": i} for i in range(5)])
    claim_once("w1")
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())

    assert claim_once("w2") == []
    assert statuses() == {"executing": 2, "queued": 3}


def test_max_concurrency__raised_limit_applies_to_the_next_claim(http_server):
    job = http_job(http_server, "capped", max_concurrency=1)
    trigger_many("capped", [{"i": i} for i in range(5)])
    claim_once("w1")
    Job.objects.filter(pk=job.pk).update(max_concurrency=3)
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())

    # The worker's cached job still says 1: the limit is read again under the lock.
    assert len(claim_once("w1")) == 2


def test_max_concurrency__other_jobs_in_the_batch_are_not_held(http_server):
    http_job(http_server, "capped", max_concurrency=1)
    http_job(http_server, "free")
    trigger_many("capped", [{"i": i} for i in range(3)])
    trigger_many("free", [{"i": i} for i in range(3)])

    started = claim_once("w1")

    assert len(started) == 4
    assert Counter(JobRun.objects.filter(pk__in=started).values_list("job__name", flat=True)) == {
        "capped": 1,
        "free": 3,
    }


def test_rate_limit__claim_starts_up_to_the_max_and_holds_the_rest_until_a_slot_frees(
    http_server,
):
    http_job(http_server, "rated", rate_limit_max=3, rate_limit_window_secs=LONG_WINDOW)
    trigger_many("rated", [{"i": i} for i in range(5)])

    started = claim_once("w1")

    assert len(started) == 3
    [admission] = JobRateAdmission.objects.all()
    assert admission.count == 3
    # The first slot frees when this admission leaves the sliding window.
    frees_at = admission.admitted_at + dt.timedelta(seconds=LONG_WINDOW)
    held = list(JobRun.objects.filter(status="queued"))
    assert len(held) == 2
    assert {run.available_at for run in held} == {frees_at}
    assert {run.attempt for run in held} == {0}
    assert {run.error_type for run in held} == {"limit.rate"}
    # The admission is stamped with the claim's time, which the started runs carry.
    assert set(JobRun.objects.filter(pk__in=started).values_list("started_at", flat=True)) == {
        admission.admitted_at
    }


def test_rate_limit__window_full__next_claim_starts_nothing(http_server):
    http_job(http_server, "rated", rate_limit_max=3, rate_limit_window_secs=LONG_WINDOW)
    trigger_many("rated", [{"i": i} for i in range(5)])
    claim_once("w1")
    JobRun.objects.filter(status="queued").update(available_at=timezone.now())

    assert claim_once("w2") == []
    assert list(JobRateAdmission.objects.values_list("count", flat=True)) == [3]


def test_rate_limit__admissions_older_than_the_window_no_longer_count(http_server):
    job = http_job(http_server, "rated", rate_limit_max=3, rate_limit_window_secs=60)
    old = timezone.now() - dt.timedelta(seconds=61)
    JobRateAdmission.objects.create(job=job, admitted_at=old, count=3)
    trigger_many("rated", [{"i": 0}])

    assert len(claim_once("w1")) == 1
    # Kept a while past the window, for a claim whose clock lags the lock's order.
    assert sorted(JobRateAdmission.objects.values_list("count", flat=True)) == [1, 3]


def test_rate_limit__admissions_are_dropped_once_no_claim_can_count_them(http_server):
    job = http_job(http_server, "rated", rate_limit_max=3, rate_limit_window_secs=60)
    old = timezone.now() - dt.timedelta(seconds=61) - RATE_LOG_KEPT
    JobRateAdmission.objects.create(job=job, admitted_at=old, count=3)
    trigger_many("rated", [{"i": 0}])

    assert len(claim_once("w1")) == 1
    assert list(JobRateAdmission.objects.values_list("count", flat=True)) == [1]


def test_rate_limit__admissions_inside_the_window_count_whatever_their_alignment(http_server):
    job = http_job(http_server, "rated", rate_limit_max=3, rate_limit_window_secs=60)
    JobRateAdmission.objects.create(
        job=job, admitted_at=timezone.now() - dt.timedelta(seconds=59), count=2
    )
    trigger_many("rated", [{"i": i} for i in range(3)])

    assert len(claim_once("w1")) == 1


def test_limits__unlimited_jobs__claim_runs_no_limit_statement(http_server):
    http_job(http_server, "free")
    trigger_many("free", [{"i": i} for i in range(3)])
    worker = Worker(WorkerConfig(worker_id="w1"))
    worker.catalog.ensure(Job.objects.values_list("pk", flat=True))

    with CaptureQueriesContext(connection) as queries:
        assert len(worker.claimer.claim_and_start(10)) == 3

    sql = " ".join(q["sql"] for q in queries.captured_queries).lower()
    assert "jobrateadmission" not in sql
    assert "nullif(j.max_concurrency, 0)" not in sql  # PostgreSQL's limit statement
    assert 'count("django_strait_jobrun"."id")' not in sql  # SQLite's count of active runs


# -- worker processes racing (PostgreSQL) -------------------------------------------


class InFlight:
    """An endpoint route that sleeps a little and remembers the most requests it held at once."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, _request) -> Reply:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.sleep)
        with self._lock:
            self.now -= 1
        return Reply()


def race_workers(worker_env, runs: int, deadline: float = 120.0) -> list[str]:
    """Run 4 worker processes until ``runs`` runs are completed; return their outputs."""
    workers = spawn_workers(worker_env, "--concurrency", "10", "--batch-size", "10")
    # Not --burst: a worker whose whole batch is held has nothing due and would exit early.
    stop_at = time.monotonic() + deadline
    while time.monotonic() < stop_at:
        if JobRun.objects.filter(status="completed").count() == runs:
            break
        time.sleep(0.2)
    outputs = stop_workers(workers)
    assert [w.returncode for w in workers] == [0, 0, 0, 0], outputs
    return outputs


def needs_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes the workers' claims, so they cannot race")


@pytest.mark.postgres
@pytest.mark.slow
def test_max_concurrency__four_workers_racing__never_more_than_the_limit(http_server, worker_env):
    needs_postgres()
    route = http_server.routes["/capped"] = InFlight(sleep=0.05)
    http_job(http_server, "capped", max_concurrency=3)
    runs = trigger_many("capped", [{"i": i} for i in range(60)])

    outputs = race_workers(worker_env, len(runs))

    assert statuses() == {"completed": 60}, outputs
    hits = http_server.run_ids()
    assert set(hits) == {r.pk for r in runs} and set(hits.values()) == {1}
    assert 1 <= route.most <= 3
    assert RunAttempt.objects.count() == 60  # held runs spent no attempt
    assert set(JobRun.objects.values_list("attempt", flat=True)) == {1}


@pytest.mark.postgres
@pytest.mark.slow
def test_rate_limit__four_workers_racing__never_more_in_any_window(http_server, worker_env):
    needs_postgres()
    window = 2.0
    http_job(http_server, "rated", rate_limit_max=5, rate_limit_window_secs=window)
    runs = trigger_many("rated", [{"i": i} for i in range(20)])

    outputs = race_workers(worker_env, len(runs))

    assert statuses() == {"completed": 20}, outputs
    assert set(http_server.run_ids().values()) == {1}
    started = list(RunAttempt.objects.values_list("started_at", flat=True))
    # Sliding, not aligned: no span of 2 s holds more than 5 starts, wherever it begins.
    assert len(started) == 20 and most_in_any_window(started, window) <= 5, sorted(started)
    assert set(JobRun.objects.values_list("attempt", flat=True)) == {1}
