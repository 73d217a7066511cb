"""``GET /ojs/v1/events``: recent state changes of OJS runs, read from runs and attempts.

No table of its own: a run's creation is its ``job.enqueued``, each attempt row
its ``job.completed`` / ``job.failed``, and a run that ended without an attempt
(canceled, expired) its ``job.cancelled`` / ``job.discarded``. Every alias's runs
have their events here, merged newest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_strait.api.auth import QueueScope
from django_strait.database import aliases
from django_strait.models import AttemptOutcome, Execution, JobRun, RunAttempt
from django_strait.ojs.present import ojs_type, stamp
from django_strait.rules.states import RunStatus

EVENT_TYPES = ("job.enqueued", "job.started", "job.completed", "job.failed", "job.cancelled")


def recent(
    types: Sequence[str], queues: Sequence[str], limit: int, scope: QueueScope
) -> list[dict[str, Any]]:
    """Return up to ``limit`` events, newest first, of the given types and queues (all if empty).

    Only runs of the queues in ``scope`` have events here.
    """
    wanted = set(types) or set(EVENT_TYPES)
    found: list[dict[str, Any]] = []
    for where in aliases():
        found += _recent_on(where, wanted, queues, limit, scope)
    found.sort(key=lambda e: e["time"] or "", reverse=True)
    return found[:limit]


def _recent_on(
    using: str, wanted: set[str], queues: Sequence[str], limit: int, scope: QueueScope
) -> list[dict[str, Any]]:
    """Up to ``limit`` events of each wanted type, of the runs on alias ``using``."""
    found: list[dict[str, Any]] = []
    runs = scope.only(
        JobRun.objects.using(using).select_related("job").filter(job__execution=Execution.EXTERNAL)
    )
    if queues:
        runs = runs.filter(queue__in=list(queues))
    if "job.enqueued" in wanted:
        found += [_event("job.enqueued", r, r.created_at, {}) for r in runs.order_by("-id")[:limit]]
    if "job.cancelled" in wanted:
        done = runs.filter(status=RunStatus.CANCELED).order_by("-finished_at")[:limit]
        found += [_event("job.cancelled", r, r.finished_at, {}) for r in done]
    attempts = RunAttempt.objects.using(using).select_related("run__job").filter(run__in=runs)
    for kind, outcome in (("job.completed", True), ("job.failed", False)):
        if kind in wanted:
            rows = (
                attempts.filter(outcome=AttemptOutcome.SUCCEEDED)
                if outcome
                else attempts.exclude(outcome=AttemptOutcome.SUCCEEDED)
            )
            found += [
                _event(
                    kind,
                    a.run,
                    a.finished_at,
                    {"attempt": a.number, "duration_ms": a.duration_ms, "error": a.error or None},
                )  # fmt: skip
                for a in rows.order_by("-id")[:limit]
            ]
    return found


def _event(kind: str, run: JobRun, when: Any, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": f"{kind}:{run.pk}:{data.get('attempt', 0)}",
        "type": kind,
        "source": "django-strait",
        "time": stamp(when),
        "subject": str(run.ojs_id) if run.ojs_id else "",
        "data": {
            "job_id": str(run.ojs_id) if run.ojs_id else "",
            "job_type": ojs_type(run.job),
            "queue": run.queue,
            **data,
        },  # fmt: skip
    }
