"""The worker's record with the ORM: move each run, append its attempt, then the parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Case, DateTimeField, DecimalField, F, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt
from django_strait.states import RunStatus
from django_strait.storage.parts import RecordPart
from django_strait.storage.values import ZERO, Record, RecordBatch, Recorded


def record(alias: str, batch: RecordBatch, parts: Sequence[RecordPart]) -> Recorded:
    """Apply each record's transition and append its attempt row, then each part; atomically."""
    done = Recorded()
    with transaction.atomic(using=alias):
        runs = JobRun.objects.using(alias)
        for rec in batch.records:
            if _move(runs, batch.worker_id, rec):
                done.moved[rec.run_id] = runs.values_list("status", flat=True).get(pk=rec.run_id)
            else:
                done.lost.append(rec.run_id)
        RunAttempt.objects.using(alias).bulk_create(
            [_attempt(rec, batch.worker_id) for rec in batch.records if rec.run_id in done.moved]
        )
        for part in parts:
            done.workflows_ended += part.apply(batch, done.moved, alias) or 0
    return done


def _move(runs: Any, worker_id: str, rec: Record) -> int:
    """Move one run as its record says, if it is still executing under this worker at that attempt.

    A run whose cancel was asked meanwhile becomes canceled instead; a budgeted
    attempt's cost ends its reservation.
    """
    retrying = rec.transition.target == RunStatus.QUEUED
    updates: dict[str, Any] = {
        "status": Case(
            When(cancel_requested=True, then=Value(RunStatus.CANCELED)),
            default=Value(rec.transition.target),
        ),
        "finished_at": Case(
            When(cancel_requested=True, then=Value(rec.finished_at)),
            default=Value(None if retrying else rec.finished_at),
            output_field=DateTimeField(),
        ),
        "result": rec.result,
        "last_error": rec.error,
        "error_type": rec.error_type,
        "endpoint_used": rec.endpoint,
        "claimed_by": "",
        "heartbeat_at": None,
        "updated_at": timezone.now(),
    }
    if rec.available_at is not None:
        updates["available_at"] = rec.available_at
    if rec.spent is not None:
        spent = Value(rec.spent, output_field=DecimalField(max_digits=18, decimal_places=6))
        updates["reserved_cost"] = None
        updates["actual_cost"] = Coalesce(F("actual_cost"), Value(ZERO)) + spent
    guard = {"pk": rec.run_id, "status": RunStatus.EXECUTING, "claimed_by": worker_id}
    return runs.filter(**guard, attempt=rec.attempt).update(**updates)


def _attempt(rec: Record, worker_id: str) -> RunAttempt:
    return RunAttempt(
        run_id=rec.run_id,
        number=rec.attempt,
        endpoint=rec.endpoint,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        duration_ms=rec.duration_ms,
        outcome=rec.outcome,
        status_code=rec.status_code,
        error_type=rec.error_type,
        error=rec.error,
        response_excerpt=rec.response_excerpt,
        worker=worker_id,
    )
