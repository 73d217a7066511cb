"""The worker's record with the ORM: move each run, append its attempt, then the parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Case, DateTimeField, DecimalField, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt
from django_strait.rules.states import RunStatus
from django_strait.storage.parts import RecordPart, note
from django_strait.storage.values import ZERO, Record, RecordBatch, Recorded


def record(alias: str, batch: RecordBatch, parts: Sequence[RecordPart]) -> Recorded:
    """Apply each record's transition and append its attempt row, then each part; atomically."""
    moved: dict[int, str] = {}
    results = []
    with transaction.atomic(using=alias):
        runs = JobRun.objects.using(alias)
        for rec in batch.records:
            if _move(runs, batch.worker_of(rec), rec):
                moved[rec.run_id] = runs.values_list("status", flat=True).get(pk=rec.run_id)
        RunAttempt.objects.using(alias).bulk_create(
            [_attempt(rec, batch.worker_of(rec)) for rec in batch.records if rec.run_id in moved]
        )
        results = [part.apply(batch, moved, alias) for part in parts if part.wanted(batch)]
    done = recorded(alias, batch, moved)
    for result in results:
        note(done, result)
    return done


def recorded(alias: str, batch: RecordBatch, moved: dict[int, str]) -> Recorded:
    """What a record did: the runs it moved; of the others, which were recorded already.

    A record that moved nothing for a run either found the run taken from this
    worker (canceled, replayed, reaped: lost), or is the second try of a write
    whose COMMIT had landed before its connection was lost: then the run's attempt
    row, as this record would have written it, is already there.
    """
    missed = [rec for rec in batch.records if rec.run_id not in moved]
    already = _already_recorded(alias, batch, missed) if missed else set()
    return Recorded(
        moved,
        lost=[rec.run_id for rec in missed if rec.run_id not in already],
        already=[rec.run_id for rec in missed if rec.run_id in already],
    )


def _already_recorded(alias: str, batch: RecordBatch, records: Sequence[Record]) -> set[int]:
    # An attempt row is this record's if it has its run, number, worker and end time
    # (the reaper's row for a lost attempt has the same number and worker, not the end).
    match = Q()
    for rec in records:
        match |= Q(
            run_id=rec.run_id,
            number=rec.attempt,
            finished_at=rec.finished_at,
            worker=batch.worker_of(rec),
        )
    rows = RunAttempt.objects.using(alias).filter(match)
    return set(rows.values_list("run_id", flat=True))


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
