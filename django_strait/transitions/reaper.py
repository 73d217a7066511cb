"""The reaper's transitions: runs whose worker went silent are rescued, batch by batch.

Storage finds the stale runs and locks them (``Storage.stale_runs``); here each
one's end is decided (``decisions.after_lost`` under the run's policy,
``decisions.run_policy``: the lost attempt counts) and storage applies it
(``Storage.rescue``: system_failed with a ``worker.lost`` attempt, then retry,
dead-letter or discard as decided). A batch that one bad run spoils is rescued
again run by run, and each rescue is logged and announced once its transaction
commits, like an attempt's end on a worker (``run_failed``, ``run_dead_lettered``...).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections import Counter
from collections.abc import Collection, Sequence

from django.db import transaction

from django_strait.models import Job
from django_strait.rules.states import Transition
from django_strait.storage import Rescued, Stale, Storage, backend
from django_strait.storage.rows import read
from django_strait.storage.values import Advanced, Rescue
from django_strait.transitions import decisions, sending
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
#: Job columns a rescue never reads.
_UNUSED = ("description", "schedule_last_tick", "created_at", "updated_at")


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
                selected, rescued = rescue_found(now, **options, storage=storage)
                advanced = _steps_moved(storage, rescued, now)
        except Exception:
            # One run's row may spoil the batch (its update raising): rescue it again with
            # each run in a savepoint, so that only that run waits.
            logger.exception("rescuing a batch of stale runs failed; rescuing them one by one")
            selected, rescued = rescue_found(now, **options, isolate=True, storage=storage)
            advanced = _steps_moved(storage, rescued, now)
        announce_workflows(advanced, using=storage.alias)
        # Said once the rescues are committed: a reaper that dies first rescued nothing.
        transaction.on_commit(lambda: _announce(rescued), using=storage.alias)
    counts = Counter(COUNT_FOR[r.transition] for r in rescued)
    return {**dict.fromkeys(COUNT_KEYS, 0), **counts, "selected": selected, "rescued": len(rescued)}


def rescue_found(
    now: dt.datetime,
    *,
    stale_after: float,
    waiting_stale_after: float,
    limit: int,
    rng: random.Random,
    isolate: bool = False,
    storage: Storage,
) -> tuple[int, list[Rescued]]:
    """Find up to ``limit`` stale runs, decide each one's end, and have storage apply it, in
    one transaction (a savepoint inside one); return how many were found, and the rescued."""
    with storage.atomic():
        found = storage.stale_runs(
            now, stale_after=stale_after, waiting_stale_after=waiting_stale_after, limit=limit
        )
        jobs = _jobs(storage.alias, {run.job_id for run in found.runs})
        decided = [_decide(run, jobs.get(run.job_id), now, rng) for run in found.runs]
        rescued = storage.rescue(
            decided, unreadable=found.unreadable, now=now, stale_after=stale_after, isolate=isolate
        )
    return len(found), rescued


def _jobs(alias: str, ids: Collection[int]) -> dict[int, Job]:
    """The job rows of a batch's runs; a row that cannot be read is left out (and logged),
    and its runs are rescued on the default policy."""
    rows = Job.objects.using(alias).filter(pk__in=list(ids)).defer(*_UNUSED)
    return {job.pk: job for job in read(rows).rows} if ids else {}


def _decide(run: Stale, job: Job | None, now: dt.datetime, rng: random.Random) -> Rescue:
    def rule() -> decisions.Decision:
        policy = decisions.run_policy(job, run.max_attempts, run.retry_overrides, run_id=run.id)
        return decisions.after_lost(
            budget_used=run.lost_attempt - run.attempts_before_replay,
            cancel_requested=run.cancel_requested,
            past_deadline=run.visible_until is not None,
            policy=policy,
            now=now,
            rng=rng,
        )

    decision = decisions.safely(rule, now=now, run_id=run.id, job_id=run.job_id)
    return Rescue(run, decision.transition, decision.available_at)


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
    sending.send_rescued(rescued)
