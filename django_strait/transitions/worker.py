"""The worker's transitions, a batch at a time: claim and start, record, put back, heartbeat.

Each calls the storage backend for the change and sends the change's signals
itself, so that every path that moves a run announces it alike.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_strait import signals
from django_strait.rules.resilience.budgets import Spend
from django_strait.storage import Claimed, Hold, RecordBatch, Recorded, Storage, backend, moves
from django_strait.storage import queues as queue_states
from django_strait.storage.floors import ClaimFloors
from django_strait.transitions import sending
from django_strait.transitions.workflows import announce as announce_workflows

logger = logging.getLogger(__name__)

#: What the claim gate is: the claimed runs and the claim's time in, the holds for the
#: runs that may not start yet out.
Gate = Callable[[list[Claimed], dt.datetime], Sequence[Hold]]

#: The error type of a run held because claiming it raised (a bad row, or a bug).
CLAIM_FAILED_ERROR = "worker.claim_failed"
#: How long such a run waits before it is claimed again.
CLAIM_FAILED_WAIT = dt.timedelta(seconds=30)


def claim_and_start(
    worker_id: str,
    *,
    queues: Sequence[str] = (),
    limit: int,
    gate: Gate | None = None,
    isolate: bool = False,
    job_names: Mapping[int, str] | Callable[[int], str] | None = None,
    storage: Storage | None = None,
    floors: ClaimFloors | None = None,
) -> list[Claimed]:
    """Claim up to ``limit`` due runs and start those the gate lets through, in one transaction.

    ``gate`` runs between claim and start (the worker loads job definitions and
    checks limits, circuits and budgets there, so its decisions see the same
    transaction) and returns the runs that may not start yet: they go back to
    queued with their ``available_at``, spending no attempt. If anything fails,
    all of it rolls back: no run is left claimed but unstarted. Where the backend can,
    the claim begins the attempts itself (a statement fewer, a row version fewer per
    run); the runs the gate holds then get their attempts back.

    ``isolate`` (after a claim failed) gates and starts each job's runs in a
    savepoint of its own, so that one bad job's runs are held and the rest start.
    ``job_names`` (a mapping or a function of the job id) names the jobs in the
    ``run_started`` signals; without it they are read when someone listens.
    ``floors`` are the worker's claim floors (``storage.floors``).
    """
    storage = storage or backend()
    # Paused queues (storage.queues, kept a second per process) are left out; while any
    # is, the claim reads from the front of the index (the floors would pass its runs by).
    skip = queue_states.paused(storage.alias)
    extra: dict[str, Any] = {}
    if skip:
        if queues:
            queues = [q for q in queues if q not in skip]
            if not queues:
                return []
        else:
            extra["exclude"] = sorted(skip)
        floors = None

    def claim_once() -> list[Claimed]:
        try:
            with storage.claim_transaction():
                now = timezone.now()
                # Job by job (a claim failed), starting apart: a row that makes the start
                # raise (an attempt count at its bound) then fails only its job's savepoint.
                claimed = storage.claim(
                    worker_id,
                    queues=queues,
                    limit=limit,
                    now=now,
                    floors=floors,
                    start=not isolate,
                    **extra,
                )
                if not claimed:
                    return []
                start = _gate_and_start_by_job if isolate else _gate_and_start
                return start(storage, worker_id, claimed, gate, now)
        except Exception:
            if floors is not None:
                # The floors moved past runs that the rollback left queued: the next
                # claim (isolating a bad job's runs) must see them again.
                floors.forget()
            raise

    # Again if a queued run was canceled (moved to history) between the claim's read and its lock.
    started = moves.rerun_moved(claim_once)
    sending.send_started(started, _names(started, job_names), using=storage.alias)
    return started


def _gate_and_start(
    storage: Storage, worker_id: str, claimed: list[Claimed], gate: Gate | None, now: dt.datetime
) -> list[Claimed]:
    holds = gate(claimed, now) if gate is not None else ()
    if holds:
        storage.hold(worker_id, holds, now=now, begun=claimed[0].begun)
        held = {h.run_id for h in holds}
        claimed = [run for run in claimed if run.id not in held]
    return storage.start(worker_id, claimed, now=now)


def _gate_and_start_by_job(
    storage: Storage, worker_id: str, claimed: list[Claimed], gate: Gate | None, now: dt.datetime
) -> list[Claimed]:
    """Gate and start each job's runs in a savepoint of their own; hold a job's runs that fail.

    Whatever one job's row or runs make the gate or the start raise, only that
    job's runs wait (``worker.claim_failed``), with the error on them and in the
    log; every other job's runs start.
    """
    by_job: dict[int, list[Claimed]] = {}
    for run in claimed:
        by_job.setdefault(run.job_id, []).append(run)
    started: list[Claimed] = []
    for job_id, runs in by_job.items():
        try:
            with storage.atomic():
                started += _gate_and_start(storage, worker_id, runs, gate, now)
        except Exception as exc:
            logger.exception(
                "claiming runs %s of job id %s failed; holding them for %ss",
                [r.id for r in runs],
                job_id,
                CLAIM_FAILED_WAIT.total_seconds(),
            )
            reason = f"claiming this run failed inside the worker: {type(exc).__name__}: {exc}"
            until = now + CLAIM_FAILED_WAIT
            held = [Hold(r.id, until, CLAIM_FAILED_ERROR, reason[:4000]) for r in runs]
            storage.hold(worker_id, held, now=now, begun=runs[0].begun)
    return started


def _names(
    runs: Sequence[Claimed], job_names: Mapping[int, str] | Callable[[int], str] | None
) -> dict[int, str] | None:
    if job_names is None or not sending.listened(signals.run_started):
        return None
    name = job_names if callable(job_names) else job_names.__getitem__
    return {run.id: name(run.job_id) for run in runs}


def record(
    batch: RecordBatch, *, storage: Storage | None = None, ledger: Storage | None = None
) -> Recorded:
    """Record a batch of ended attempts, then send their signals and any soft-limit warning.

    Only runs still executing under this worker at that attempt move (the
    guard); a run whose cancel was asked meanwhile becomes canceled instead.
    ``ledger`` (several databases: the control database's backend) is where the
    batch's budgets are settled, after the record; else in the record itself.
    """
    storage = storage or backend()
    done = storage.record(batch)
    announce_workflows(done.workflows, using=storage.alias)
    if done.moved:
        names = {r.run_id: r.job for r in batch.records}
        sending.send_recorded(batch.records, done, names, using=storage.alias)
    sending.announce_circuit_changes(done.circuit_changes)
    spends = batch.spends
    if spends and ledger is not None:
        sending.announce_budget_soft_limits(settle_elsewhere(ledger, storage.alias, spends))
    elif spends:
        crossed = storage.crossed_soft_limits(spends, now=timezone.now())
        sending.announce_budget_soft_limits(crossed)
    return done


def settle_elsewhere(ledger: Storage, source: str, spends: Sequence[Spend]) -> list:
    """Settle ``source``'s recorded spends on the control database; return the soft limits
    crossed. A control database that does not answer costs nothing but time: the
    reservations stay, and the reaper of ``source`` closes them (at what they reserved).
    """
    spent = list(spends)
    try:
        closed = ledger.settle_budgets_for(source, spent)
        return ledger.crossed_soft_limits(spent, now=timezone.now()) if closed else []
    except Exception as exc:
        logger.warning(
            "the budgets of %s recorded attempts not settled: the control database %r did not "
            "answer (%s: %s); the reaper closes their reservations",
            len(spent), ledger.alias, type(exc).__name__, str(exc).split("\n", 1)[0],
        )  # fmt: skip
        return []


def warn_budgets_on_commit(crossed: Sequence, storage: Storage) -> None:
    """Announce the soft limits reservations crossed, once ``storage``'s transaction
    that marked them commits (at once if it has: the control database's own)."""
    if crossed:
        transaction.on_commit(
            lambda: sending.announce_budget_soft_limits(crossed), using=storage.alias
        )


def unclaim(worker_id: str, run_ids: Sequence[int], *, storage: Storage | None = None) -> int:
    """Put claimed-but-unstarted runs back to queued; no attempt is spent."""
    return (storage or backend()).unclaim(worker_id, run_ids, now=timezone.now())


def heartbeat(worker_id: str, run_ids: Sequence[int], *, storage: Storage | None = None) -> int:
    """Mark the runs this worker holds as alive (one statement for all of them)."""
    return (storage or backend()).heartbeat(worker_id, run_ids, now=timezone.now())
