"""External workers' transitions (OJS, DESIGN §15): fetch, visibility, and the end of an attempt.

A fetch claims and starts runs of external-worker jobs in one transaction, as
the worker's ``claim_and_start`` does, and gives each a deadline; a heartbeat
moves the deadline on; an ack or nack is recorded through the same ``record``
as a worker's attempt (attempt row, retry policy, webhooks, workflows).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from django.utils import timezone

from django_strait import signals
from django_strait.storage import Claimed, RecordBatch, Recorded, Storage, backend
from django_strait.storage.values import Record
from django_strait.transitions.worker import record

#: A run's deadline from the run and its start (visibility timeout, timeout_ms).
Deadline = Callable[[Claimed, dt.datetime], dt.datetime]


def fetch(
    worker_id: str,
    *,
    queues: Sequence[str],
    limit: int,
    deadline: Deadline,
    storage: Storage | None = None,
) -> list[Claimed]:
    """Claim and start up to ``limit`` due external runs, the first queue first; set deadlines."""
    storage = storage or backend()
    with storage.claim_transaction():
        now = timezone.now()
        claimed = storage.claim_external(worker_id, queues=queues, limit=limit, now=now)
        started = storage.start(worker_id, claimed, now=now)
        # From the start as recorded (the database's clock on PostgreSQL).
        deadlines = {run.id: deadline(run, run.started_at or now) for run in started}
        storage.set_deadlines(deadlines, now=now)
    signals.send_started(started, None, using=storage.alias)
    return started


def extend(deadlines: Mapping[int, dt.datetime], *, storage: Storage | None = None) -> list[int]:
    """Move executing external runs' deadlines on (a heartbeat); return the runs that moved."""
    return (storage or backend()).set_deadlines(deadlines, now=timezone.now())


def finish(worker_id: str, done: Record, *, storage: Storage | None = None) -> Recorded:
    """Record the end of an external worker's attempt (ack or nack) held by ``worker_id``."""
    return record(RecordBatch(worker_id=worker_id, records=[done]), storage=storage)
