"""Where both backends compute a rule, they agree: the health EWMA fold, the concurrency cap.

The rules are written once in Python (``resilience.health.fold``,
``resilience.limits.concurrency_cap``) and once more in PostgreSQL's statements;
generated inputs go through both and must come out the same.
"""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_strait.models import EndpointHealth, JobRun
from django_strait.rules.resilience import health, limits
from django_strait.rules.states import Transition
from django_strait.storage import OrmStorage, PostgresStorage, Record, RecordBatch
from tests.conformance.conftest import ON_POSTGRES, limit_gate, start
from tests.integration.factories import make_job

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_POSTGRES, reason="needs PostgreSQL: both backends run only there"),
]

FEW = settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)

samples = st.builds(
    health.Sample,
    endpoint_url=st.just("http://127.0.0.1:9/agree"),
    count=st.integers(1, 500),
    keep=st.floats(0, 1),
    success=st.floats(0, 1),
    failure=st.floats(0, 1),
    p95_ms=st.floats(0, 120_000),
    timeout_ms=st.floats(1, 600_000),
)
# An existing row holds what a fold left: 0, or at least NEGLIGIBLE. PostgreSQL cannot
# store less: the generated score column's product underflows, and the INSERT fails.
stored_rates = st.one_of(st.just(0.0), st.floats(health.NEGLIGIBLE, 1))
old_rows = st.one_of(
    st.none(),
    st.tuples(
        stored_rates,
        stored_rates,
        st.one_of(st.just(0.0), st.floats(health.NEGLIGIBLE, 120_000)),
        st.integers(0, 10**6),
    ),
)


def fold_through(backend, sample: health.Sample, old) -> tuple:
    EndpointHealth.objects.all().delete()
    if old is not None:
        success, failure, p95, count = old
        EndpointHealth.objects.create(
            endpoint_url=sample.endpoint_url, success_rate=success, failure_rate=failure,
            latency_p95_ms=p95, samples=count,
        )  # fmt: skip
    job = make_job()
    run = JobRun.objects.create(job=job, available_at=timezone.now())
    now = timezone.now()
    # A record of a run this worker does not hold: nothing moves, but the parts still apply.
    rec = Record(run.pk, 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=job.pk)
    backend(connection.alias).record(RecordBatch("nobody", [rec], [sample]))
    row = EndpointHealth.objects.get(endpoint_url=sample.endpoint_url)
    return row.success_rate, row.failure_rate, row.latency_p95_ms, row.samples


def tiny_sample(**values) -> health.Sample:
    fields = dict(endpoint_url="http://127.0.0.1:9/agree", count=1, keep=0.5, success=1.0,
                  failure=0.0, p95_ms=10.0, timeout_ms=1000.0)  # fmt: skip
    return health.Sample(**{**fields, **values})


# Subnormal factors: PostgreSQL raises on a product of nonzero floats that underflows to
# 0, where Python gives 0 (found by this test, twice: an old rate, then a batch's mean).
@FEW
@given(sample=samples, old=old_rows)
@example(sample=tiny_sample(failure=5e-324), old=None)
@example(sample=tiny_sample(p95_ms=5e-324), old=None)
@example(sample=tiny_sample(success=1e-310, keep=1e-300), old=(1e-12, 0.0, 1e-12, 3))
@example(sample=tiny_sample(keep=1 - 1e-16, failure=1e-300), old=(1.0, 1e-300, 0.0, 1))
def test_health_fold__the_sql_and_the_orm_agree(sample, old):
    by_sql = fold_through(PostgresStorage, sample, old)
    by_orm = fold_through(OrmStorage, sample, old)

    assert by_sql[3] == by_orm[3]
    for a, b in zip(by_sql[:3], by_orm[:3], strict=True):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (by_sql, by_orm)


@FEW
@given(
    max_concurrency=st.integers(0, 60),
    score=st.one_of(st.none(), st.floats(0, 100)),
    backend=st.sampled_from([OrmStorage, PostgresStorage]),
)
def test_concurrency_cap__each_backend_admits_what_the_rule_says(max_concurrency, score, backend):
    JobRun.objects.all().delete()
    job = make_job(max_concurrency=max_concurrency)
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(60)])
    storage = backend(connection.alias)
    share = health.concurrency_share(score)

    started = start(storage, limit=60, gate=limit_gate(storage, {job.pk: score}))

    cap = limits.concurrency_cap(max_concurrency, share)
    assert len(started) == (60 if cap is None else min(60, cap))
