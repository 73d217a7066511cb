"""Who is alive: each worker process keeps one ``WorkerProcess`` row up to date.

A worker registers when it starts, touches its row with every heartbeat round
(so ``last_seen_at`` is never older than a heartbeat interval while it lives),
and deletes the row when it exits cleanly. A worker killed without a clean exit
leaves its row behind; the reaper forgets it once it has been silent for long
enough (``Reaper.forget_after``).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence

from django.db.models import Q
from django.utils import timezone

from django_strait.models import JobRun, WorkerProcess
from django_strait.rules.states import IN_FLIGHT
from django_strait.storage.rows import LATEST


def alive_since(now: dt.datetime, stale_after: float) -> dt.datetime:
    """Workers seen at or after this instant count as alive.

    A live worker refreshes its row every ``stale_after / 5``: two missed rounds
    make it not alive (it may still be busy: its runs are reaped only after
    ``stale_after``). The admin and the metrics both use this.
    """
    return now - dt.timedelta(seconds=2 * stale_after / 5)


def register(
    worker_id: str, *, queues: Sequence[str], concurrency: int, using: str | None = None
) -> None:
    """Record that ``worker_id`` started here and now (replacing a row of the same id)."""
    now = timezone.now()
    # A restart under the same --worker-id takes the row over: the old process is gone.
    WorkerProcess.objects.using(using).update_or_create(
        worker_id=worker_id,
        defaults={
            "host": socket.gethostname()[:255],
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": concurrency,
            "started_at": now,
            "last_seen_at": now,
            "in_flight": 0,
        },
    )


def touch(worker_id: str, *, in_flight: int, using: str | None = None) -> bool:
    """Mark ``worker_id`` as seen now with ``in_flight`` runs; False if its row is gone.

    The row is gone when the reaper forgot the worker (it was silent past
    ``forget_after``, e.g. a long pause): the caller should register again.
    """
    return bool(
        WorkerProcess.objects.using(using)
        .filter(worker_id=worker_id)
        .update(last_seen_at=timezone.now(), in_flight=in_flight)
    )


def unregister(worker_id: str, *, using: str | None = None) -> None:
    """Delete ``worker_id``'s row: it exits cleanly and holds no runs."""
    WorkerProcess.objects.using(using).filter(worker_id=worker_id).delete()


def forget_silent(before: dt.datetime, *, using: str | None = None) -> int:
    """Delete rows of workers last seen before ``before``; return how many.

    A worker that still heartbeats a run after ``before`` is alive whatever its
    row says (its touches may have failed), so its row stays.
    """
    heartbeating = (
        JobRun.objects.using(using)
        .filter(status__in=IN_FLIGHT, heartbeat_at__gte=before)
        .values("claimed_by")
    )
    # A last sighting no reader can hold ('infinity', written by hand) is no sign of life.
    silent = WorkerProcess.objects.using(using).filter(
        Q(last_seen_at__lt=before) | Q(last_seen_at__gt=LATEST)
    )
    deleted, _ = silent.exclude(worker_id__in=heartbeating).delete()
    return deleted
