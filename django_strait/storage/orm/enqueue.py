"""Making runs with the ORM: one at a time (with its idempotency key), or many per statement."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from django.db import IntegrityError, transaction

from django_strait.models import JobRun


def insert_one(alias: str, run: JobRun) -> JobRun:
    """Insert ``run``; with an idempotency key already used for its job, return that run.

    ``idempotency_hit`` on the returned run says which happened.
    """
    if run.idempotency_key is None:
        run.save(force_insert=True, using=alias)
        run.idempotency_hit = False
        return run
    # Looked up first: on a runs table partitioned by status class the unique indexes
    # are per leaf (storage.postgres.layout), so the key's run may be in another leaf.
    existing = _holder(alias, run)
    if existing is None:
        try:
            with transaction.atomic(using=alias):
                run.save(force_insert=True, using=alias)
            run.idempotency_hit = False
            return run
        except IntegrityError:  # made meanwhile by another caller
            existing = _holder(alias, run)
            if existing is None:  # the conflict was something else
                raise
    existing.idempotency_hit = True
    return existing


def _holder(alias: str, run: JobRun) -> JobRun | None:
    """The run that holds ``run``'s idempotency key; IntegrityError if another job's holds its OJS id."""
    runs = JobRun.objects.using(alias)
    existing = runs.filter(job=run.job, idempotency_key=run.idempotency_key).first()
    if existing is None and run.ojs_id is not None:
        if runs.filter(ojs_id=run.ojs_id).exists():
            raise IntegrityError(f"ojs_id {run.ojs_id} is held by a run of another job")
    return existing


def insert_many(
    alias: str,
    template: JobRun,
    payloads: Sequence[object],
    keys: Sequence[str] | None,
    batch_size: int,
) -> tuple[list[JobRun], set[int]]:
    """Insert one run like ``template`` per payload; with keys, also return which this call made.

    Exact with keys because the insert and the reads share one transaction (and
    SQLite serializes writers).
    """
    runs = JobRun.objects.using(alias)
    made = [
        _like(template, p, k) for p, k in zip(payloads, keys or [None] * len(payloads), strict=True)
    ]
    if keys is None:
        return runs.bulk_create(made, batch_size=batch_size), set()
    with transaction.atomic(using=alias):
        mine = runs.filter(job_id=template.job_id, idempotency_key__in=keys)
        existing = set(mine.values_list("pk", flat=True))
        runs.bulk_create(made, batch_size=batch_size, ignore_conflicts=True)
        return made, set(mine.exclude(pk__in=existing).values_list("pk", flat=True))


def _like(template: JobRun, payload: object, key: str | None) -> JobRun:
    """A new run like ``template`` (what trigger_many's options made), with its own payload and key."""
    run = copy.copy(template)
    run._state = copy.copy(template._state)
    run.payload, run.idempotency_key = payload, key
    return run
