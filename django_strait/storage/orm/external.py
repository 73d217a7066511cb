"""External workers' runs with the ORM (docs/ojs.md): fetch and visibility.

An OJS worker fetches runs of external-worker jobs over HTTP; each fetched run
is claimed and started like a worker's, and carries a deadline
(``visible_until``): its visibility timeout, pushed on by heartbeats. The
reaper rescues it at that deadline instead of at ``STALE_AFTER``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from django_strait.models import JobRun
from django_strait.states import RunStatus
from django_strait.storage.orm import claims
from django_strait.storage.values import Claimed


def claim(
    alias: str, worker_id: str, queues: Sequence[str], limit: int, now: dt.datetime
) -> list[Claimed]:
    """Claim up to ``limit`` due external runs, the first queue first, then the next."""
    taken: list[Claimed] = []
    for queue in queues:
        if len(taken) >= limit:
            break
        taken += claims.claim(alias, worker_id, [queue], limit - len(taken), now, external=True)
    return taken


def set_deadlines(
    alias: str, worker_id: str, deadlines: Mapping[int, dt.datetime], now: dt.datetime
) -> list[int]:
    """Give executing runs ``worker_id`` holds their deadline (a fetch, a heartbeat).

    Return those that took it; a run requeued and fetched by another worker meanwhile
    keeps its own (a stale worker's heartbeat extends nothing of another's).
    """
    moved = []
    for run_id, until in deadlines.items():
        runs = JobRun.objects.using(alias).filter(
            pk=run_id, status=RunStatus.EXECUTING, claimed_by=worker_id
        )
        if runs.update(visible_until=until, heartbeat_at=now, updated_at=now):
            moved.append(run_id)
    return moved
