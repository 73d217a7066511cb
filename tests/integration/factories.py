"""Rows for tests, filled consistently for the status asked for.

These build fixtures, so they set ``status`` directly; production code never
does (``django_strait.transitions`` owns it).
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from django.utils import timezone

from django_strait.models import AttemptOutcome, Job, JobRun, RunAttempt, WorkflowRun
from django_strait.rules.states import RunStatus

_names = itertools.count(1)

#: Statuses in which the run has ended and has a finish time.
_FINISHED = {"completed", "failed", "dead_letter", "discarded", "canceled"}
#: Statuses whose last attempt failed, and so carry an error.
_ERRORED = {"failed", "dead_letter", "discarded", "system_failed"}


def make_job(name: str | None = None, *, using: str | None = None, **fields: Any) -> Job:
    """Create a Python-handler job (``tests.testapp.jobs.noop`` unless told otherwise),
    on database ``using`` when given (its runs follow it)."""
    fields.setdefault("handler", "" if fields.get("endpoint_url") else "tests.testapp.jobs.noop")
    jobs = Job.objects.db_manager(using) if using else Job.objects
    return jobs.create(name=name or f"factory-job-{next(_names)}", **fields)


def make_run(
    job: Job | None = None,
    *,
    status: str = RunStatus.QUEUED,
    attempts: int | None = None,
    error_type: str = "",
    error: str | None = None,
    **fields: Any,
) -> JobRun:
    """Create a run in ``status`` with ``attempts`` attempt rows that agree with it.

    A failed, dead-lettered, discarded or system-failed run gets at least one
    attempt, and its last attempt's error is the run's ``error_type``/``last_error``.
    """
    status = RunStatus(status)
    job = job or make_job()
    count = _attempt_count(status, attempts)
    if status in _ERRORED and not error_type:
        error_type = "http.503"
    now = timezone.now()
    run = JobRun.objects.db_manager(job._state.db).create(
        job=job,
        status=status,
        attempt=count,
        queue=fields.pop("queue", job.queue),
        error_type=error_type,
        last_error=(error or f"{error_type} on attempt {count}") if error_type else "",
        **_times(status, now),
        **fields,
    )
    for number in range(1, _recorded(status, count) + 1):
        _make_attempt(run, number, status, count, error_type, now)
    return run


def _attempt_count(status: str, attempts: int | None) -> int:
    if attempts is not None:
        return attempts
    if status in _ERRORED or status in {"completed", "executing"}:
        return 1
    return 0


def _recorded(status: str, count: int) -> int:
    # An executing run's current attempt has no row until it ends.
    return count - 1 if status == "executing" else count


def _times(status: str, now: dt.datetime) -> dict[str, Any]:
    times: dict[str, Any] = {}
    if status in {"dequeued", "executing", "system_failed"}:
        times.update(claimed_by="factory-worker", dequeued_at=now, heartbeat_at=now)
    if status in {"executing", "system_failed"} or status in _FINISHED - {"canceled"}:
        times["started_at"] = now
    if status in _FINISHED:
        times["finished_at"] = now
    if status == "completed":
        times["result"] = {"ok": True}
    return times


def _make_attempt(
    run: JobRun, number: int, status: str, count: int, error_type: str, now: dt.datetime
) -> RunAttempt:
    last = number == count
    if last and status == "completed":
        outcome, error_type = AttemptOutcome.SUCCEEDED, ""
    elif last and status == "system_failed":
        outcome = AttemptOutcome.SYSTEM_FAILED
    else:
        outcome = AttemptOutcome.FAILED
    return RunAttempt.objects.db_manager(run._state.db).create(
        run=run,
        number=number,
        started_at=now,
        finished_at=now,
        duration_ms=5,
        outcome=outcome,
        status_code=_status_code(run.job, outcome, error_type),
        error_type=error_type,
        error=f"{error_type} on attempt {number}" if error_type else "",
        worker="factory-worker",
    )


def _status_code(job: Job, outcome: str, error_type: str) -> int | None:
    if not job.endpoint_url:
        return None
    if outcome == AttemptOutcome.SUCCEEDED:
        return 200
    code = error_type.removeprefix("http.")
    return int(code) if code.isdigit() else None


#: A diamond workflow of ``wf-step`` jobs (tests/testapp/jobs.py): a -> (b, c) -> d.
DIAMOND = [
    {"name": "a", "job": "wf-step"},
    {"name": "b", "job": "wf-step", "depends_on": ["a"]},
    {"name": "c", "job": "wf-step", "depends_on": ["a"]},
    {"name": "d", "job": "wf-step", "depends_on": ["b", "c"]},
]


def step_statuses(wr: WorkflowRun) -> dict[str, str]:
    """Return each step run's status by step name."""
    return {sr.step.name: sr.status for sr in wr.step_runs.select_related("step")}


def client_with(*scopes: str, name: str = "k") -> Any:
    """A REST client holding a new API key with ``scopes``."""
    from rest_framework.test import APIClient

    from django_strait.api.auth import issue_key

    _, key = issue_key(name, scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client
