"""A bad definition harms only its own runs: the worker survives any one bad row.

Finding 2 of the trust-boundaries issue: ``{"timeout_secs": 1e308}`` or a rate
window of ``1e308`` seconds made every claim fail (OverflowError, datetime
overflow), so no job ran and ``--burst`` never exited. Each row here is written
with raw SQL, around every validation, and a real worker process drains the
queue: the bad job's runs are held (or dead-lettered, for a run's own bad row)
with a clear error, and the good job's runs complete.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_strait import trigger, trigger_many
from django_strait.models import Job, JobRun
from tests.conftest import Reply, unreadable_json
from tests.integration.factories import make_job
from tests.security.live import run_burst_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JOB_TABLE = Job._meta.db_table
RUN_TABLE = JobRun._meta.db_table


def set_columns(table: str, pk: int, **values) -> None:
    """Write columns with raw SQL: no model, no validator, no serializer."""
    assignments = ", ".join(f"{column} = %s" for column in values)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {assignments} WHERE id = %s", [*values.values(), pk])


def nested() -> str:
    """JSON text the database stores and Python cannot decode (``unreadable_json``)."""
    return unreadable_json(connection.vendor)[0]


def nested_error() -> str:
    return unreadable_json(connection.vendor)[1]


@pytest.fixture
def good_runs() -> list[JobRun]:
    return trigger_many("test-noop", [{"i": i} for i in range(20)])


def assert_all_completed(runs: list[JobRun], output: str) -> None:
    statuses = set(
        JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    )
    assert statuses == {"completed"}, output


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("timeout_secs", 1e308, "timeout_secs"),
        ("rate_limit_window_secs", 1e308, "rate_limit_window_secs"),
        ("max_concurrency", 10**9, "max_concurrency"),
        ("retry_backoff_coefficient", 0.5, "retry_backoff_coefficient"),
        ("priority", 30000, "priority"),
    ],
)
def test_worker__a_job_row_out_of_bounds_holds_only_its_own_runs(
    worker_env, http_server, good_runs, column, value, field
):
    bad = make_job("bad", endpoint_url=http_server.url("/bad"), rate_limit_max=5,
                   rate_limit_window_secs=60)  # fmt: skip
    bad_runs = trigger_many("bad", [{"i": i} for i in range(3)])
    set_columns(JOB_TABLE, bad.pk, **{column: value})

    code, output = run_burst_worker(worker_env)

    assert code == 0, output  # --burst drained what it could and exited
    assert_all_completed(good_runs, output)
    for run in JobRun.objects.filter(pk__in=[r.pk for r in bad_runs]):
        assert (run.status, run.error_type, run.attempt) == ("queued", "job.invalid", 0)
        assert f"{field}:" in run.last_error
    assert http_server.requests == []  # nothing reached the bad job's endpoint
    assert "has an invalid definition" in output


def test_worker__a_fixed_row_frees_its_held_runs(worker_env, good_runs):
    bad = make_job("bad")
    run = trigger("bad", {})
    set_columns(JOB_TABLE, bad.pk, timeout_secs=float("inf"))
    run_burst_worker(worker_env)
    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "job.invalid")

    Job.objects.filter(pk=bad.pk).update(timeout_secs=30)
    JobRun.objects.filter(pk=run.pk).update(available_at=run.created_at)  # skip the wait
    code, output = run_burst_worker(worker_env)

    run.refresh_from_db()
    assert (code, run.status) == (0, "completed"), output


def test_worker__a_job_row_it_cannot_even_read_holds_only_its_own_runs(worker_env, good_runs):
    bad = make_job("bad")
    run = trigger("bad", {})
    with connection.cursor() as cursor:  # JSON nested past Python's recursion limit
        cursor.execute(f"UPDATE {JOB_TABLE} SET headers = %s WHERE id = %s", [nested(), bad.pk])

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(good_runs, output)
    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "job.invalid")
    assert f"cannot be read ({nested_error()}" in run.last_error


def test_worker__a_run_row_it_cannot_read_fails_alone_without_running(worker_env, good_runs):
    bad = trigger("test-echo", {})
    set_columns(RUN_TABLE, bad.pk, payload=nested())

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(good_runs, output)
    # (Read column by column: this process cannot decode the payload either.)
    status, error_type, attempt, last_error, result = JobRun.objects.values_list(
        "status", "error_type", "attempt", "last_error", "result"
    ).get(pk=bad.pk)
    assert (status, error_type, attempt, result) == ("dead_letter", "run.invalid", 1, None)
    assert nested_error() in last_error


def test_worker__a_run_with_a_bad_retry_override_retries_on_its_jobs_policy(worker_env):
    run = trigger("test-boom", {})  # max_attempts=2, initial_delay 1s
    set_columns(RUN_TABLE, run.pk, retry_overrides=json.dumps({"initial_delay": "soon"}))

    code, output = run_burst_worker(worker_env)

    run.refresh_from_db()
    assert (code, run.status, run.attempt, run.error_type) == (0, "queued", 1, "python.ValueError")
    assert "invalid retry override" in output


@pytest.mark.postgres
def test_worker__a_row_that_makes_the_claim_raise_holds_only_its_jobs_runs(worker_env, good_runs):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite's integers do not overflow at 2**31")
    make_job("bad")
    run = trigger("bad", {})
    # Valid by every check the worker makes, and yet starting it overflows the integer column.
    set_columns(RUN_TABLE, run.pk, attempt=2**31 - 1, attempts_before_replay=2**31 - 1)

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(good_runs, output)
    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "worker.claim_failed")
    assert "out of range" in run.last_error
    assert "claiming again job by job" in output


def test_worker__bad_webhook_rows_fail_alone_and_every_other_delivery_goes_out(
    worker_env, http_server
):
    from django_strait import transitions
    from django_strait.models import WebhookDelivery

    http_server.routes["/flaky"] = lambda request: Reply(500, b"later")
    job = make_job("hooked", webhook_url=http_server.url("/hook"))
    flaky = make_job("flaky-hooked", webhook_url=http_server.url("/flaky"))
    runs = [transitions.cancel(trigger(job.name, {}, delay=3600).pk) for _ in range(8)]
    flaky_run = transitions.cancel(trigger(flaky.name, {}, delay=3600).pk)
    bad_url, bad_result = (WebhookDelivery.objects.get(run=r) for r in runs[:2])
    set_columns(WebhookDelivery._meta.db_table, bad_url.pk, url="not a url at all")
    set_columns(RUN_TABLE, runs[1].pk, result=nested())
    set_columns(JOB_TABLE, flaky.pk, webhook_retry='{"max_attempts": "lots"}')

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    by_run = {d.run_id: d for d in WebhookDelivery.objects.all()}
    bad_url, bad_result = by_run[runs[0].pk], by_run[runs[1].pk]
    assert (bad_url.status, bad_url.attempt) == (
        "failed",
        1,
    ) and "not a valid" in bad_url.last_error
    assert bad_result.status == "failed" and "result cannot be read" in bad_result.last_error
    # An unreadable policy falls back to the default one: retried, not given up.
    flaky_delivery = by_run[flaky_run.pk]
    assert (flaky_delivery.status, flaky_delivery.attempt) == ("pending", 1), output
    assert {by_run[r.pk].status for r in runs[2:]} == {"delivered"}
    sent = [r.json["run_id"] for r in http_server.requests if r.path == "/hook"]
    assert sorted(sent) == sorted(r.pk for r in runs[2:])  # the bad rows were never sent


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"execution": "fork"}, "execution"),
        ({"execution": "process", "preset": "planet"}, "preset"),
        ({"execution": "process", "preset": "x" * 50}, "preset"),
    ],
)
def test_worker__a_bad_execution_or_preset_row_holds_only_its_own_runs(
    worker_env, good_runs, values, field
):
    bad = make_job("bad")
    bad_runs = trigger_many("bad", [{"i": i} for i in range(3)])
    set_columns(JOB_TABLE, bad.pk, **values)

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(good_runs, output)
    for run in JobRun.objects.filter(pk__in=[r.pk for r in bad_runs]):
        assert (run.status, run.error_type, run.attempt) == ("queued", "job.invalid", 0)
        assert f"{field}:" in run.last_error


def test_worker__bad_preset_names_on_a_run_and_a_recommendation_fall_back_to_the_job(worker_env):
    run = trigger("test-process-echo", {})
    set_columns(RUN_TABLE, run.pk, preset="gone")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_strait_jobpresetrecommendation (job_id, preset, expires_at,"
            " updated_at) VALUES (%s, %s, %s, %s)",
            [run.job_id, "x" * 50, "9999-01-01T00:00:00Z", "2026-01-01T00:00:00Z"],
        )

    code, output = run_burst_worker(worker_env)

    run.refresh_from_db()
    assert (code, run.status, run.preset) == (0, "completed", "micro"), output
    assert run.attempts.get().preset == "micro"


def test_worker__a_workflow_run_it_cannot_read_fails_alone_naming_the_field(worker_env, good_runs):
    """Issue 41: the record's workflow part raised RecursionError, and every batch holding
    a step of it (any job's runs too) was retried forever."""
    from django_strait.models import WorkflowRun
    from django_strait.workflows import define_workflow, trigger_workflow
    from tests.integration.factories import DIAMOND

    define_workflow("flow", DIAMOND)
    wr = trigger_workflow("flow", {"order": 1})
    set_columns(WorkflowRun._meta.db_table, wr.pk, payload=nested())

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(good_runs, output)
    status, error_type, last_error = WorkflowRun.objects.values_list(
        "status", "error_type", "last_error"
    ).get(pk=wr.pk)
    assert (status, error_type) == ("failed", "workflow.invalid"), output
    assert (
        f"django_strait_workflowrun id {wr.pk}, field payload: cannot be read ({nested_error()}"
    ) in last_error
    root = JobRun.objects.get(workflow_step_run__workflow_run=wr)
    assert root.status == "completed"  # its step ran and was recorded; nothing ran after it


@pytest.mark.postgres
def test_worker__a_circuit_row_it_cannot_read_holds_no_job_and_no_webhook(worker_env, http_server):
    """Issue 41: one circuit at opened_at = 'infinity', for another URL, stopped every HTTP
    job (worker.claim_failed) and every webhook."""
    if connection.vendor != "postgresql":
        pytest.skip("'infinity' is a PostgreSQL timestamp")
    from django_strait import transitions
    from django_strait.models import EndpointCircuit, WebhookDelivery

    make_job("hooked", endpoint_url=http_server.url("/ok"), webhook_url=http_server.url("/hook"))
    runs = trigger_many("hooked", [{"i": i} for i in range(10)])
    canceled = transitions.cancel(trigger("hooked", {}, delay=3600).pk)
    bad = EndpointCircuit.objects.create(endpoint_url=http_server.url("/else"), failures=3)
    set_columns(EndpointCircuit._meta.db_table, bad.pk, opened_at="infinity")

    code, output = run_burst_worker(worker_env)

    assert code == 0, output
    assert_all_completed(runs, output)
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}
    assert canceled.pk in {r.json["run_id"] for r in http_server.requests if r.path == "/hook"}
    assert f"django_strait_endpointcircuit id {bad.pk}, field opened_at: cannot be read" in output
