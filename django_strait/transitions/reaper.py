"""The reaper's transitions: runs whose worker went silent are rescued, batch by batch.

The rescue itself (system_failed with a ``worker.lost`` attempt, then retry,
dead-letter or discard as the retry policy decides) is the storage backend's
``rescue_batch``. Here: a batch that one bad run spoils is rescued again run
by run, and each rescue is logged and announced once its transaction commits,
like an attempt's end on a worker (``run_failed``, ``run_dead_lettered``...).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections import Counter
from collections.abc import Sequence

from django.db import transaction

from django_strait import signals
from django_strait.states import Transition
from django_strait.storage import Rescued, Storage, backend
from django_strait.storage.values import Advanced
from django_strait.transitions.workflows import announce as announce_workflows

logger = logging.getLogger(__name__)

#: What each end of a rescue counts as.
COUNT_FOR = {
    Transition.RETRY: "retried",
    Transition.DEAD_LETTER: "dead_lettered",
    Transition.DISCARD: "discarded",
    Transition.CANCEL: "canceled",
}
COUNT_KEYS = ("selected", "rescued", "retried", "dead_lettered", "discarded", "canceled")


def rescue_stale(
    now: dt.datetime,
    *,
    stale_after: float,
    waiting_stale_after: float,
    batch_size: int = 500,
    rng: random.Random | None = None,
    storage: Storage | None = None,
) -> dict[str, int]:
    """Rescue every stale run, one transaction per batch; return counts by what happened."""
    counts: Counter[str] = Counter(dict.fromkeys(COUNT_KEYS, 0))
    while True:
        batch = rescue_batch(
            now,
            stale_after=stale_after,
            waiting_stale_after=waiting_stale_after,
            limit=batch_size,
            rng=rng,
            storage=storage,
        )
        counts.update(batch)
        # A short batch means nothing else is stale (or the rest is locked by another
        # reaper); a batch that moved nothing would only select the same rows again.
        if batch["selected"] < batch_size or not batch["rescued"]:
            return dict(counts)


def rescue_batch(
    now: dt.datetime,
    *,
    stale_after: float,
    waiting_stale_after: float,
    limit: int,
    rng: random.Random | None = None,
    storage: Storage | None = None,
) -> dict[str, int]:
    """Rescue up to ``limit`` stale runs in one transaction; return counts by what happened."""
    storage = storage or backend()
    options = {
        "stale_after": stale_after,
        "waiting_stale_after": waiting_stale_after,
        "limit": limit,
        "rng": rng or random.Random(),
    }
    with storage.atomic():
        try:
            with storage.atomic():
                selected, rescued = storage.rescue_batch(now, **options)
                advanced = _steps_moved(storage, rescued, now)
        except Exception:
            # One run's row may spoil the batch (its update or its job's policy raising):
            # rescue it again with each run in a savepoint, so that only that run waits.
            logger.exception("rescuing a batch of stale runs failed; rescuing them one by one")
            selected, rescued = storage.rescue_batch(now, **options, isolate=True)
            advanced = _steps_moved(storage, rescued, now)
        announce_workflows(advanced, using=storage.alias)
        # Said once the rescues are committed: a reaper that dies first rescued nothing.
        transaction.on_commit(lambda: _announce(rescued), using=storage.alias)
    counts = Counter(COUNT_FOR[r.transition] for r in rescued)
    return {**dict.fromkeys(COUNT_KEYS, 0), **counts, "selected": selected, "rescued": len(rescued)}


def _steps_moved(storage: Storage, rescued: Sequence[Rescued], now: dt.datetime) -> Advanced:
    """Move on the workflow runs of the rescued runs that are steps, in the rescue's transaction."""
    return storage.advance_workflows([r.run.id for r in rescued], now=now)


def _announce(rescued: Sequence[Rescued]) -> None:
    for r in rescued:
        logger.warning(
            "run %s: %s; %s",
            r.run.id,
            r.error,
            r.transition.label,
            extra={"run_id": r.run.id, "job_id": r.run.job_id, "attempt": r.run.lost_attempt},
        )
    signals.send_rescued(rescued)
