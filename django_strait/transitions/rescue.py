"""The reaper's transitions: runs whose worker went silent become system_failed, then move on.

A run a worker holds (dequeued, executing) whose heartbeat is older than
``stale_after``, or a waiting run silent for ``waiting_stale_after``, lost its
worker. Each one goes through RESCUE to system_failed with an attempt row that
says which worker was lost and for how long, and then on through RETRY,
DEAD_LETTER or DISCARD as its retry policy decides: the lost attempt counts.
Every update is guarded, so a run that moved meanwhile (its worker came back and
recorded it) is left alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connections, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce

from django_strait.database import alias
from django_strait.models import AttemptOutcome, Job, JobRun, RunAttempt
from django_strait.outcome import failure
from django_strait.resilience.budgets import Spend, settle
from django_strait.retry import PolicyError, RetryPolicy, resolve
from django_strait.states import IN_FLIGHT, RunStatus, Transition
from django_strait.worker.decide import Decision, decide, trim

logger = logging.getLogger(__name__)

#: The error type of an attempt whose worker stopped heartbeating.
LOST_ERROR_TYPE = "worker.lost"

#: What each end of a rescue counts as.
COUNT_FOR = {
    Transition.RETRY: "retried",
    Transition.DEAD_LETTER: "dead_lettered",
    Transition.DISCARD: "discarded",
    Transition.CANCEL: "canceled",
}
#: The largest value RunAttempt.duration_ms holds (a PostgreSQL integer).
DURATION_MS_MAX = 2**31 - 1
COUNT_KEYS = ("selected", "rescued", "retried", "dead_lettered", "discarded", "canceled")

_FIELDS = (
    "id",
    "job_id",
    "status",
    "attempt",
    "attempts_before_replay",
    "max_attempts",
    "retry_overrides",
    "claimed_by",
    "cancel_requested",
    "started_at",
    "last_sign",
    "reserved_cost",
)


@dataclass(frozen=True, slots=True)
class Stale:
    """A run found without a worker: what the rescue needs to know about it."""

    id: int
    job_id: int
    status: str
    attempt: int
    attempts_before_replay: int
    max_attempts: int | None
    retry_overrides: dict[str, Any] | None
    claimed_by: str
    cancel_requested: bool
    started_at: dt.datetime | None
    #: The last sign of life: heartbeat, else dequeue (in flight) or update (waiting).
    last_sign: dt.datetime
    #: What the lost attempt reserved from its project's budget.
    reserved_cost: Decimal | None = None

    @property
    def lost_attempt(self) -> int:
        """The number of the attempt the worker lost.

        An executing run lost the attempt it had started; a dequeued run never
        started one, and a waiting run's attempt ended when it began to wait, so
        the rescue spends one for them.
        """
        if self.status == RunStatus.EXECUTING and self.attempt > 0:
            return self.attempt
        return self.attempt + 1


def rescue_stale(
    now: dt.datetime,
    *,
    stale_after: float,
    waiting_stale_after: float,
    batch_size: int = 500,
    using: str | None = None,
    rng: random.Random | None = None,
) -> dict[str, int]:
    """Rescue every stale run, one transaction per batch; return counts by what happened."""
    counts: Counter[str] = Counter(dict.fromkeys(COUNT_KEYS, 0))
    while True:
        batch = rescue_batch(
            now,
            stale_after=stale_after,
            waiting_stale_after=waiting_stale_after,
            limit=batch_size,
            using=using,
            rng=rng,
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
    using: str | None = None,
    rng: random.Random | None = None,
) -> dict[str, int]:
    """Rescue up to ``limit`` stale runs in one transaction; return counts by what happened."""
    rng = rng or random.Random()
    try:
        return _rescue_batch(
            now, stale_after, waiting_stale_after, limit, using, rng, isolate=False
        )
    except Exception:
        # One run's row may spoil the batch (its update or its job's policy raising):
        # rescue the batch again with each run in a savepoint, so only that run waits.
        logger.exception("rescuing a batch of stale runs failed; rescuing them one by one")
        return _rescue_batch(now, stale_after, waiting_stale_after, limit, using, rng, isolate=True)


def _rescue_batch(
    now: dt.datetime,
    stale_after: float,
    waiting_stale_after: float,
    limit: int,
    using: str | None,
    rng: random.Random,
    *,
    isolate: bool,
) -> dict[str, int]:
    counts: Counter[str] = Counter(dict.fromkeys(COUNT_KEYS, 0))
    with transaction.atomic(using=alias(using)):
        stale = select_stale(
            now,
            stale_after=stale_after,
            waiting_stale_after=waiting_stale_after,
            limit=limit,
            using=using,
        )
        counts["selected"] = len(stale)
        policies = _Policies(using)
        rescued: list[tuple[Stale, Transition, str]] = []
        for run in stale:
            done = _rescue_guarded(run, now, stale_after, policies, rng, using, isolate)
            if done is not None:
                rescued.append((run, *done))
                counts["rescued"] += 1
                counts[COUNT_FOR[done[0]]] += 1
        _settle_lost([run for run, _, _ in rescued], now, using)
        # Said once the rescues are committed: a reaper that dies first rescued nothing.
        transaction.on_commit(lambda: _log_rescued(rescued), using=alias(using))
    return dict(counts)


def _rescue_guarded(
    run: Stale,
    now: dt.datetime,
    stale_after: float,
    policies: _Policies,
    rng: random.Random,
    using: str | None,
    isolate: bool,
) -> tuple[Transition, str] | None:
    """Rescue one run; with ``isolate``, in a savepoint, leaving it (logged) if it fails."""
    if not isolate:
        return _rescue_one(run, now, stale_after, policies, rng, using)
    try:
        with transaction.atomic(using=alias(using)):
            return _rescue_one(run, now, stale_after, policies, rng, using)
    except Exception:
        logger.exception(
            "run %s cannot be rescued; left as it is for a person to look at", run.id,
            extra={"run_id": run.id, "job_id": run.job_id},
        )  # fmt: skip
        return None


def _log_rescued(rescued: list[tuple[Stale, Transition, str]]) -> None:
    for run, ended, error in rescued:
        logger.warning(
            "run %s: %s; %s",
            run.id,
            error,
            ended.label,
            extra={"run_id": run.id, "job_id": run.job_id, "attempt": run.lost_attempt},
        )


def _settle_lost(runs: list[Stale], now: dt.datetime, using: str) -> None:
    """Spend what lost attempts reserved: the call may have been made, so it is paid for."""
    reserved = [run for run in runs if run.reserved_cost is not None]
    if not reserved:
        return
    projects = dict(
        Job.objects.using(using)
        .filter(pk__in={run.job_id for run in reserved}, project__isnull=False)
        .values_list("id", "project_id")
    )
    settle(
        [
            Spend(run.id, projects[run.job_id], run.started_at or now, cost, cost)
            for run in reserved
            if run.job_id in projects and (cost := run.reserved_cost) is not None
        ],
        using=using,
    )


def select_stale(
    now: dt.datetime, *, stale_after: float, waiting_stale_after: float, limit: int, using: str
) -> list[Stale]:
    """Return up to ``limit`` stale runs, locked (skipping rows others lock) on PostgreSQL."""
    in_flight_cutoff = now - dt.timedelta(seconds=stale_after)
    waiting_cutoff = now - dt.timedelta(seconds=waiting_stale_after)
    runs = (
        JobRun.objects.using(using)
        .annotate(last_sign=Coalesce("heartbeat_at", "dequeued_at", "updated_at"))
        .filter(
            Q(status__in=IN_FLIGHT, last_sign__lt=in_flight_cutoff)
            | Q(status=RunStatus.WAITING, last_sign__lt=waiting_cutoff)
        )
        .order_by("id")
    )
    if connections[alias(using)].vendor == "postgresql":
        # Another reaper (a round that overlapped a change of leader) skips what we hold.
        runs = runs.select_for_update(skip_locked=True, of=("self",))
    return [Stale(*row) for row in runs.values_list(*_FIELDS)[:limit]]


def _rescue_one(
    run: Stale,
    now: dt.datetime,
    stale_after: float,
    policies: _Policies,
    rng: random.Random,
    using: str | None,
) -> tuple[Transition, str] | None:
    """Move one stale run to system_failed and on; return where it ended and why (None: it moved)."""
    error = _lost_error(run, now, stale_after)
    # Cancel was asked while the attempt ran: the attempt has now ended (lost), so
    # the run is canceled, as it would have been when the attempt returned.
    first = Transition.CANCEL if run.cancel_requested else Transition.RESCUE
    if not _lose(run, first, now, error, using):
        logger.info("run %s moved while being rescued; left alone", run.id)
        return None
    _write_attempt(run, now, error, using)
    ended = first
    if first is Transition.RESCUE:
        ended = _apply(run, _decide(run, now, policies.get(run), rng), now, using)
    return ended, error


def _lost_error(run: Stale, now: dt.datetime, stale_after: float) -> str:
    silent = max((now - run.last_sign).total_seconds(), 0.0)
    worker = run.claimed_by or "(no worker recorded)"
    what = "waiting run" if run.status == RunStatus.WAITING else f"{run.status} run"
    return (
        f"worker {worker} lost: no heartbeat for {_seconds(silent)} "
        f"(last at {run.last_sign.isoformat()}); {what} rescued"
        + ("" if run.status == RunStatus.WAITING else f" after {_seconds(stale_after)}")
    )


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value >= 10 else f"{value:.1f}s"


def _lose(run: Stale, transition: Transition, now: dt.datetime, error: str, using: str) -> bool:
    """Apply ``transition`` (RESCUE, or CANCEL when cancel was asked) to a run that lost its worker.

    The guard: still in the status, attempt and worker we read. A worker that
    came back and recorded the run changed at least one of them.
    """
    updates: dict[str, Any] = {"finished_at": now} if transition is Transition.CANCEL else {}
    return bool(
        JobRun.objects.using(using)
        .filter(
            pk=run.id,
            status=run.status,
            status__in=transition.sources,
            attempt=run.attempt,
            claimed_by=run.claimed_by,
        )
        .update(
            status=transition.target,
            attempt=run.lost_attempt,
            claimed_by="",
            heartbeat_at=None,
            last_error=trim(error),
            error_type=LOST_ERROR_TYPE,
            updated_at=now,
            **updates,
        )
    )


def _write_attempt(run: Stale, now: dt.datetime, error: str, using: str) -> None:
    # A dequeued run never started its attempt; the others ran from started_at
    # to (at least) their last heartbeat, which is all that is known.
    started = None if run.status == RunStatus.DEQUEUED else run.started_at
    ran_ms = 0 if started is None else (run.last_sign - started).total_seconds() * 1000
    RunAttempt.objects.using(using).create(
        run_id=run.id,
        number=run.lost_attempt,
        started_at=started,
        finished_at=now,
        duration_ms=min(max(int(ran_ms), 0), DURATION_MS_MAX),
        outcome=AttemptOutcome.SYSTEM_FAILED,
        error_type=LOST_ERROR_TYPE,
        error=trim(error),
        worker=run.claimed_by,
    )


def _decide(run: Stale, now: dt.datetime, policy: RetryPolicy, rng: random.Random) -> Decision:
    # The same rule as an attempt that failed on a worker: a lost worker is a
    # retryable error (unless the policy lists worker.lost as non-retryable).
    lost = failure(LOST_ERROR_TYPE, "worker lost", attempt_outcome=AttemptOutcome.SYSTEM_FAILED)
    budget_used = run.lost_attempt - run.attempts_before_replay
    return decide(lost, budget_used=budget_used, policy=policy, now=now, rng=rng)


def _apply(run: Stale, decision: Decision, now: dt.datetime, using: str) -> Transition:
    transition = decision.transition
    updates: dict[str, Any] = {"status": transition.target, "updated_at": now}
    if transition is Transition.RETRY:
        updates.update(available_at=decision.available_at, finished_at=None)
    else:
        updates["finished_at"] = now
    moved = (
        JobRun.objects.using(using)
        .filter(pk=run.id, status__in=transition.sources, status=RunStatus.SYSTEM_FAILED)
        .update(**updates)
    )
    if not moved:  # impossible inside our transaction with the row held; say so if it happens
        raise RuntimeError(f"run {run.id} left system_failed during its own rescue")
    return transition


class _Policies:
    """Retry policies of the jobs in one batch, each job loaded once."""

    def __init__(self, using: str) -> None:
        self.using = using
        self._jobs: dict[int, Job] = {}

    def get(self, run: Stale) -> RetryPolicy:
        """Return the run's merged policy (defaults if the stored one is invalid)."""
        job = self._jobs.get(run.job_id)
        if job is None:
            job = self._jobs[run.job_id] = Job.objects.using(self.using).get(pk=run.job_id)
        try:
            return resolve(job, run.max_attempts, run.retry_overrides)
        except PolicyError as exc:
            # Rows saved around validation must not keep the run stuck: use defaults.
            logger.error("run %s has an invalid retry policy (%s); using defaults", run.id, exc)
            return resolve(None)
