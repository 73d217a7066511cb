"""The circuits ride on the record: the batch's HTTP results fold into their endpoints'
circuits in the record's own transaction (one statement on PostgreSQL), as
``resilience.policy.after_results`` folds them, alike on every backend."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import EndpointCircuit, JobRun
from django_strait.rules.resilience.policy import CLOSED, HALF_OPEN, OPEN, Result
from django_strait.rules.states import Transition
from django_strait.storage import Record, RecordBatch
from tests.conformance.conftest import needs_postgres, start
from tests.integration.factories import make_job
from tests.security.poison import write

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]

URL = "http://127.0.0.1:9/x"
F, S = Result.FAILURE, Result.SUCCESS


def ended(storage, n: int = 1) -> list[Record]:
    """``n`` started runs' records, each a 503 from URL."""
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job) for _ in range(n)])
    now = timezone.now()
    return [
        Record(run.id, 1, Transition.RETRY, now, now, 5, "failed", available_at=now,
               error_type="http.503", status_code=503, endpoint=URL, job_id=job.pk)
        for run in start(storage, limit=n)
    ]  # fmt: skip


def test_record__results_reaching_the_threshold_open_the_circuit_with_the_record(storage):
    records = ended(storage, 5)

    done = storage.record(RecordBatch("w1", records, circuits={URL: [F] * 5}))

    assert len(done.moved) == 5
    row = EndpointCircuit.objects.get(endpoint_url=URL)
    assert (row.state, row.failures) == (OPEN, 5)
    assert row.opened_at is not None and row.last_failure_at == row.opened_at
    assert [(c.state, c.failures) for c in done.circuits] == [(OPEN, 5)]
    assert [(c.circuit.state, c.previous_state) for c in done.circuit_changes] == [(OPEN, CLOSED)]


def test_record__failures_below_the_threshold_are_counted_and_change_no_state(storage):
    done = storage.record(RecordBatch("w1", ended(storage), circuits={URL: [F, F]}))

    row = EndpointCircuit.objects.get(endpoint_url=URL)
    assert (row.state, row.failures, row.opened_at) == (CLOSED, 2, None)
    assert done.circuit_changes == []


def test_record__a_success_after_failures_closes_and_a_failure_after_it_counts_again(storage):
    EndpointCircuit.objects.create(endpoint_url=URL, failures=4)

    done = storage.record(RecordBatch("w1", ended(storage), circuits={URL: [F, S, F]}))

    row = EndpointCircuit.objects.get(endpoint_url=URL)
    assert (row.state, row.failures) == (CLOSED, 1)  # the success cleared the 5th failure
    assert [(c.state, c.failures) for c in done.circuits] == [(CLOSED, 1)]


def test_record__the_probes_result_closes_or_reopens_a_half_open_circuit(storage):
    then = timezone.now() - dt.timedelta(minutes=1)
    EndpointCircuit.objects.create(endpoint_url=URL, state=HALF_OPEN, failures=5, opened_at=then,
                                   probe_started_at=then)  # fmt: skip
    other = "http://127.0.0.1:9/y"
    EndpointCircuit.objects.create(endpoint_url=other, state=HALF_OPEN, failures=5,
                                   opened_at=then, probe_started_at=then)  # fmt: skip

    done = storage.record(RecordBatch("w1", ended(storage), circuits={URL: [S], other: [F]}))

    closed, reopened = (EndpointCircuit.objects.get(endpoint_url=u) for u in (URL, other))
    assert (closed.state, closed.failures, closed.opened_at, closed.probe_started_at) == (
        CLOSED, 0, None, None,
    )  # fmt: skip
    assert (reopened.state, reopened.failures, reopened.probe_started_at) == (OPEN, 6, None)
    assert reopened.opened_at > then
    changes = {c.circuit.endpoint_url: (c.circuit.state, c.previous_state)
               for c in done.circuit_changes}  # fmt: skip
    assert changes == {URL: (CLOSED, HALF_OPEN), other: (OPEN, HALF_OPEN)}


def test_record__a_success_makes_no_circuit_row_and_a_batch_without_results_touches_none(storage):
    storage.record(RecordBatch("w1", ended(storage), circuits={URL: [S]}))
    storage.record(RecordBatch("w1", ended(storage)))

    assert not EndpointCircuit.objects.exists()


def test_record__a_circuit_that_cannot_be_read_is_rewritten_whole_by_its_results(storage):
    needs_postgres("'infinity' is a PostgreSQL timestamp")
    bad = EndpointCircuit.objects.create(endpoint_url=URL, failures=2)
    write(bad, "opened_at", "infinity")

    done = storage.record(RecordBatch("w1", ended(storage), circuits={URL: [F]}))

    assert [(c.state, c.failures) for c in done.circuits] == [(CLOSED, 1)]
    row = EndpointCircuit.objects.get(pk=bad.pk)
    assert (row.state, row.failures, row.opened_at) == (CLOSED, 1, None)


def test_record__a_failure_count_at_its_columns_limit_stays_there(storage):
    needs_postgres("SQLite's integers do not overflow at 2**31")
    EndpointCircuit.objects.create(endpoint_url=URL, state=OPEN, failures=2**31 - 1,
                                   opened_at=timezone.now())  # fmt: skip

    done = storage.record(RecordBatch("w1", ended(storage), circuits={URL: [F]}))

    assert len(done.moved) == 1
    assert EndpointCircuit.objects.get(endpoint_url=URL).failures == 2**31 - 1
