"""Concurrency and rate limits under contention; the rate limit as a sliding window."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from django_strait.models import JobRateAdmission, JobRun
from django_strait.rules.resilience.health import effective_concurrency
from tests.conformance.conftest import in_threads, limit_gate, most_in_any_window, start
from tests.integration.factories import make_job

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def queue(job, n: int) -> None:
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(n)])


def active(job) -> int:
    return JobRun.objects.filter(job=job, status__in=("dequeued", "executing")).count()


@pytest.mark.slow
def test_concurrency__claims_at_once_never_exceed_the_cap(storage):
    job = make_job(max_concurrency=4)
    queue(job, 40)
    gate = limit_gate(storage)

    started = in_threads(6, lambda i: [r.id for r in start(storage, f"w{i}", limit=5, gate=gate)])

    assert sum(len(ids) for ids in started) == 4
    assert active(job) == 4
    held = JobRun.objects.filter(job=job, status="queued")
    assert held.filter(error_type="limit.concurrency").count() > 0
    assert set(held.values_list("attempt", flat=True)) == {0}


def test_concurrency__zero_is_no_limit(storage):
    job = make_job(max_concurrency=0)
    queue(job, 12)

    assert len(start(storage, limit=12, gate=limit_gate(storage))) == 12


@pytest.mark.parametrize("score", [None, 80.0, 45.0, 30.0, 10.0])
def test_concurrency__a_degraded_endpoint_scales_the_cap(storage, score):
    job = make_job(max_concurrency=8)
    queue(job, 20)

    started = start(storage, limit=20, gate=limit_gate(storage, {job.pk: score}))

    assert len(started) == effective_concurrency(8, score)


@pytest.mark.slow
def test_rate__no_span_of_the_window_holds_more_than_the_max(storage):
    window, most = 0.5, 3
    job = make_job(rate_limit_max=most, rate_limit_window_secs=window)
    queue(job, 200)
    gate = limit_gate(storage)
    deadline = time.monotonic() + 2.5

    def claim_in_a_loop(i: int) -> int:
        # 200 runs due: every claim meets the limit; the held come back as slots free.
        n = 0
        while time.monotonic() < deadline:
            n += len(start(storage, f"w{i}", limit=2, gate=gate))
        return n

    total = sum(in_threads(4, claim_in_a_loop))

    starts = list(JobRun.objects.filter(job=job, attempt=1).values_list("started_at", flat=True))
    assert len(starts) == total and total >= 2 * most  # the window slid more than once
    assert most_in_any_window(starts, window) <= most, sorted(starts)


def test_rate__held_runs_wait_until_the_oldest_admission_leaves_the_window(storage):
    job = make_job(rate_limit_max=2, rate_limit_window_secs=60)
    queue(job, 5)

    started = start(storage, limit=5, gate=limit_gate(storage))

    [admission] = JobRateAdmission.objects.filter(job=job)
    assert len(started) == admission.count == 2
    held = JobRun.objects.filter(job=job, status="queued")
    assert set(held.values_list("error_type", flat=True)) == {"limit.rate"}
    frees = admission.admitted_at.timestamp() + 60
    assert {
        round(r.timestamp() - frees, 3) for r in held.values_list("available_at", flat=True)
    } == {0}


def test_rate__a_second_claim_in_the_window_takes_only_what_is_left(storage):
    job = make_job(rate_limit_max=3, rate_limit_window_secs=60)
    queue(job, 2)
    assert len(start(storage, limit=5, gate=limit_gate(storage))) == 2
    queue(job, 5)

    assert len(start(storage, "w2", limit=5, gate=limit_gate(storage))) == 1
    assert sorted(JobRateAdmission.objects.filter(job=job).values_list("count", flat=True)) == [
        1,
        2,
    ]
