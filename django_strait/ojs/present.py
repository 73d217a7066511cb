"""A run as an OJS job object: the envelope the client sent, and where the run stands."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from django_strait.models import AttemptOutcome, Job, JobRun, RunAttempt
from django_strait.ojs.states import ojs_state
from django_strait.transitions.decisions import run_policy

#: Envelope fields this module writes itself; anything else the client sent is returned.
MANAGED = frozenset(
    {
        "id", "type", "queue", "args", "meta", "priority", "state", "attempt", "max_attempts",
        "created_at", "enqueued_at", "scheduled_at", "started_at", "completed_at",
        "cancelled_at", "discarded_at", "result", "error", "errors", "options",
        "progress", "progress_message",
    }
)  # fmt: skip


def stamp(value: dt.datetime | None) -> str | None:
    """Return an RFC 3339 UTC timestamp with milliseconds."""
    if value is None:
        return None
    if value.utcoffset() != _ZERO:
        value = value.astimezone(dt.UTC)
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_ZERO = dt.timedelta(0)


def ojs_type(job: Job) -> str:
    """Return the OJS type a job's runs carry (its ``ojs["type"]``, else its name)."""
    ojs = job.ojs if isinstance(job.ojs, dict) else {}
    kind = ojs.get("type")
    return kind if isinstance(kind, str) and kind else job.name


def max_attempts(run: JobRun, job: Job) -> int:
    """Return the run's attempt budget under its policy (OJS's defaults for OJS runs): the
    policy a nack decides by (``decisions.run_policy``).

    Remembered on the job object as loaded, per run override: a batch's or a fetch's
    runs mostly share one, and resolving a policy is most of a job body's time.
    """
    try:
        key = (run.max_attempts, json.dumps(run.retry_overrides, sort_keys=True))
    except (TypeError, ValueError):  # not JSON as read: resolved each time
        return _max_attempts(run, job)
    memo = job.__dict__.setdefault("_ojs_max_attempts", {})
    if key not in memo:
        memo[key] = _max_attempts(run, job)
    return memo[key]


def _max_attempts(run: JobRun, job: Job) -> int:
    return run_policy(job, run.max_attempts, run.retry_overrides, run_id=run.pk).max_attempts


def job_body(
    run: JobRun, job: Job, now: dt.datetime, attempts: Iterable[RunAttempt] | None = None
) -> dict[str, Any]:
    """Return ``run`` as an OJS job object; ``attempts``: its attempt rows, for ``errors``."""
    envelope = run.ojs if isinstance(run.ojs, dict) else {}
    payload = run.payload if isinstance(run.payload, dict) else {}
    template = job.ojs if isinstance(job.ojs, dict) else {}
    spent = run.attempt - run.attempts_before_replay
    state = ojs_state(run.status, due=run.available_at, attempts=spent, now=now)
    body: dict[str, Any] = {k: v for k, v in envelope.get("extra", {}).items() if k not in MANAGED}
    body.update(
        id=str(run.ojs_id) if run.ojs_id else "",
        type=ojs_type(job),
        queue=run.queue,
        args=payload.get("args", template.get("args", [])),
        meta={**template.get("meta", {}), **payload.get("meta", {})},
        priority=run.priority,
        state=state,
        attempt=spent,
        max_attempts=max_attempts(run, job),
        created_at=stamp(run.created_at),
        enqueued_at=stamp(run.created_at),
    )
    if envelope.get("options"):
        body["options"] = envelope["options"]
    for key in ("tags", "timeout_ms", "visibility_timeout_ms", "expires_at", "retry_delay_ms"):
        if key in envelope:
            body[key] = envelope[key]
    _times(body, run, state)
    _outcome(body, run, state, attempts)
    kept = envelope.get("progress")
    if isinstance(kept, dict) and kept.get("attempt") == run.attempt:  # ext-progress
        body["progress"] = 1.0 if state == "completed" else kept.get("progress")
        if kept.get("message") is not None:
            body["progress_message"] = kept["message"]
    return body


def _times(body: dict[str, Any], run: JobRun, state: str) -> None:
    if state in ("scheduled", "retryable") or run.available_at > run.created_at:
        body["scheduled_at"] = stamp(run.available_at)
    if run.started_at is not None:
        body["started_at"] = stamp(run.started_at)
    # A discarded job that never ran (expired, dropped) has no completion.
    ran = run.attempt > run.attempts_before_replay
    if run.finished_at is not None and (state == "completed" or (state == "discarded" and ran)):
        body["completed_at"] = stamp(run.finished_at)
    if state == "discarded" and run.finished_at is not None:
        body["discarded_at"] = stamp(run.finished_at)
    if state == "cancelled" and run.finished_at is not None:
        body["cancelled_at"] = stamp(run.finished_at)


def _outcome(
    body: dict[str, Any], run: JobRun, state: str, attempts: Iterable[RunAttempt] | None
) -> None:
    if state == "completed":
        body["result"] = run.result
    elif run.last_error or run.error_type:
        body["error"] = {"type": run.error_type, "code": run.error_type, "message": run.last_error}
    if attempts is not None:
        body["errors"] = [
            {
                "attempt": a.number - run.attempts_before_replay,
                "type": a.error_type,
                "code": a.error_type,
                "message": a.error,
                "occurred_at": stamp(a.finished_at),
            }
            for a in attempts
            if a.outcome != AttemptOutcome.SUCCEEDED and a.number > run.attempts_before_replay
        ]
