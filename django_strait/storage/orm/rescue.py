"""The reaper's rescues with the ORM: stale runs found and locked, then moved as decided.

A run a worker holds (dequeued, executing) whose heartbeat is older than
``stale_after``, or a waiting run silent for ``waiting_stale_after``, lost its
worker. :func:`select_stale` finds and locks them; the caller decides what
becomes of each (``decisions.after_lost``, under its retry policy: the lost
attempt counts) and :func:`rescue` applies it: RESCUE to system_failed with an
attempt row that says which worker was lost and for how long, then on through
the decided RETRY, DEAD_LETTER or DISCARD (or CANCEL, when cancel was asked).
Nothing here decides or resolves a policy. Every update is guarded, so a run
that moved meanwhile (its worker came back and recorded it) is left alone.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connections, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast, Coalesce

from django_strait.models import AttemptOutcome, Job, JobRun, RunAttempt
from django_strait.rules.bounds import trim
from django_strait.rules.outcome import LOST_ERROR_TYPE
from django_strait.rules.resilience.budgets import Spend
from django_strait.rules.states import IN_FLIGHT, RunStatus, Transition
from django_strait.storage import webhooks
from django_strait.storage.orm.protection import settle_budgets
from django_strait.storage.rows import LATEST, read
from django_strait.storage.values import Rescue, Rescued, Stale, StaleRuns

logger = logging.getLogger(__name__)

#: The error type of a stale run whose own row cannot be read: dead-lettered, saying what.
INVALID_ERROR = "run.invalid"
#: The error type of a stale run whose rescue raised: dead-lettered, saying what.
RESCUE_FAILED_ERROR = "reaper.rescue_failed"
#: The largest value RunAttempt.duration_ms holds (a PostgreSQL integer).
DURATION_MS_MAX = 2**31 - 1

_FIELDS = (
    "id",
    "job_id",
    "status",
    "attempt",
    "attempts_before_replay",
    "max_attempts",
    # As text, decoded guarded: an unreadable override must not fail the whole batch.
    Cast("retry_overrides", TextField()),
    "claimed_by",
    "cancel_requested",
    "started_at",
    "last_sign",
    "reserved_cost",
    "visible_until",
)


def rescue(
    alias: str,
    rescues: Sequence[Rescue],
    unreadable: Mapping[int, str],
    now: dt.datetime,
    *,
    stale_after: float,
    isolate: bool,
) -> list[Rescued]:
    """Apply the decided ``rescues`` in one transaction, dead-letter the ``unreadable``; return
    the rescued.

    ``isolate`` rescues each run in a savepoint, leaving one that raises dead-lettered.
    """
    with transaction.atomic(using=alias):
        rescued = [
            done for r in rescues if (done := _rescue_guarded(alias, r, now, stale_after, isolate))
        ]
        for run_id, problems in unreadable.items():
            _give_up(alias, run_id, now, problems, INVALID_ERROR)
        _settle_lost(alias, [r.run for r in rescued], now)
        webhooks.notify_runs(alias, [r.run.id for r in rescued], now)
    return rescued


def select_stale(
    alias: str, now: dt.datetime, stale_after: float, waiting_stale_after: float, limit: int
) -> StaleRuns:
    """Return up to ``limit`` stale runs, locked, skipping rows another reaper holds; and
    those among them whose rows cannot be read, with what cannot be.

    A last sign of life no reader can hold (a heartbeat at 'infinity') counts as stale:
    nothing can tell that worker alive.
    """
    in_flight_cutoff = now - dt.timedelta(seconds=stale_after)
    waiting_cutoff = now - dt.timedelta(seconds=waiting_stale_after)
    runs = (
        JobRun.objects.using(alias)
        .annotate(last_sign=Coalesce("heartbeat_at", "dequeued_at", "updated_at"))
        .filter(
            # An external worker's run (OJS) is held to its own deadline, not STALE_AFTER.
            Q(status__in=IN_FLIGHT, visible_until__isnull=True, last_sign__lt=in_flight_cutoff)
            | Q(status__in=IN_FLIGHT, visible_until__lt=now)
            | Q(status=RunStatus.WAITING, last_sign__lt=waiting_cutoff)
            | Q(status__in=(*IN_FLIGHT, RunStatus.WAITING), last_sign__gt=LATEST)
        )
        .order_by("id")
    )
    if connections[alias].features.has_select_for_update_skip_locked:
        # Another reaper (a round that overlapped a change of leader) skips what we hold.
        runs = runs.select_for_update(skip_locked=True, of=("self",))
    found = read(runs.values_list(*_FIELDS)[:limit])
    unreadable: dict[int, list[str]] = {}
    for problem in found.unreadable:
        unreadable.setdefault(problem.pk, []).append(str(problem))
    return StaleRuns(
        [_stale(*row) for row in found.rows],
        {pk: "; ".join(problems) for pk, problems in unreadable.items()},
    )


def _stale(
    rid: int, job_id: int, status: str, attempt: int, before: int, max_att, overrides, *rest
) -> Stale:
    try:
        decoded = json.loads(overrides) if isinstance(overrides, str) else overrides
    except (ValueError, RecursionError):
        logger.error(
            "run %s has a retry override that cannot be read; rescued on its job's policy", rid
        )
        decoded = None
    return Stale(rid, job_id, status, attempt, before, max_att, decoded, *rest)


def _rescue_guarded(
    alias: str, decided: Rescue, now: dt.datetime, stale_after: float, isolate: bool
) -> Rescued | None:
    if not isolate:
        return _rescue_one(alias, decided, now, stale_after)
    run = decided.run
    try:
        with transaction.atomic(using=alias):
            return _rescue_one(alias, decided, now, stale_after)
    except Exception as exc:
        logger.exception(
            "run %s cannot be rescued; dead-lettered for a person to look at", run.id,
            extra={"run_id": run.id, "job_id": run.job_id},
        )  # fmt: skip
        error = f"worker {run.claimed_by or '(none)'} lost, and the rescue failed: {exc!r}"
        _give_up(alias, run.id, now, error, RESCUE_FAILED_ERROR)
        return None


def _give_up(alias: str, run_id: int, now: dt.datetime, error: str, error_type: str) -> None:
    """Dead-letter a stale run that cannot be rescued (its row, or what its rescue reads,
    cannot be read), saying why: it ends, instead of failing every round. Only the columns
    written are touched; a person replays it once the row is fixed."""
    try:
        with transaction.atomic(using=alias):
            JobRun.objects.using(alias).filter(
                pk=run_id, status__in=(*IN_FLIGHT, RunStatus.WAITING)
            ).update(
                status=RunStatus.DEAD_LETTER, finished_at=now, updated_at=now, claimed_by="",
                heartbeat_at=None, visible_until=None, error_type=error_type,
                last_error=trim(error),
            )  # fmt: skip
    except Exception:
        logger.exception("run %s cannot be dead-lettered either; left as it is", run_id)
        return
    logger.error("run %s dead-lettered: %s", run_id, error, extra={"run_id": run_id})


def _rescue_one(
    alias: str, decided: Rescue, now: dt.datetime, stale_after: float
) -> Rescued | None:
    """Move one stale run to system_failed and on as decided; None if it moved meanwhile."""
    run = decided.run
    error = lost_error(run, now, stale_after)
    # Cancel was asked while the attempt ran: canceled at once, no system_failed between.
    first = Transition.CANCEL if decided.then is Transition.CANCEL else Transition.RESCUE
    if not _lose(alias, run, first, now, error):
        logger.info("run %s moved while being rescued; left alone", run.id)
        return None
    _write_attempt(alias, run, now, error)
    if first is not Transition.RESCUE:
        return Rescued(run, first, error)
    _move_on(alias, decided, now)
    return Rescued(run, decided.then, error, decided.available_at)


def lost_error(run: Stale, now: dt.datetime, stale_after: float) -> str:
    """Say which worker was lost, for how long, and what became of the run."""
    silent = max((now - run.last_sign).total_seconds(), 0.0)
    worker = run.claimed_by or "(no worker recorded)"
    what = "waiting run" if run.status == RunStatus.WAITING else f"{run.status} run"
    if run.visible_until is not None:
        return (
            f"worker {worker} lost: no ack, nack or heartbeat before the visibility deadline "
            f"{run.visible_until.isoformat()} (last sign at {run.last_sign.isoformat()}); "
            f"{what} rescued"
        )
    return (
        f"worker {worker} lost: no heartbeat for {_seconds(silent)} "
        f"(last at {run.last_sign.isoformat()}); {what} rescued"
        + ("" if run.status == RunStatus.WAITING else f" after {_seconds(stale_after)}")
    )


def _seconds(value: float) -> str:
    return f"{value:.0f}s" if value >= 10 else f"{value:.1f}s"


def _lose(alias: str, run: Stale, transition: Transition, now: dt.datetime, error: str) -> bool:
    """Apply RESCUE (or CANCEL when cancel was asked) to a run, if it is still as it was read.

    The guard: still in the status, attempt and worker we read. A worker that
    came back and recorded the run changed at least one of them.
    """
    updates: dict[str, Any] = {"finished_at": now} if transition is Transition.CANCEL else {}
    return bool(
        JobRun.objects.using(alias)
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
            visible_until=None,
            last_error=trim(error),
            error_type=LOST_ERROR_TYPE,
            updated_at=now,
            **updates,
        )
    )


def _write_attempt(alias: str, run: Stale, now: dt.datetime, error: str) -> None:
    # A dequeued run never started its attempt; the others ran from started_at
    # to (at least) their last heartbeat, which is all that is known.
    started = None if run.status == RunStatus.DEQUEUED else run.started_at
    ran_ms = 0 if started is None else (run.last_sign - started).total_seconds() * 1000
    RunAttempt.objects.using(alias).create(
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


def _move_on(alias: str, decided: Rescue, now: dt.datetime) -> None:
    transition = decided.then
    updates: dict[str, Any] = {"status": transition.target, "updated_at": now}
    if transition is Transition.RETRY:
        updates.update(available_at=decided.available_at, finished_at=None)
    else:
        updates["finished_at"] = now
    moved = (
        JobRun.objects.using(alias)
        .filter(pk=decided.run.id, status__in=transition.sources, status=RunStatus.SYSTEM_FAILED)
        .update(**updates)
    )
    if not moved:  # impossible inside our transaction with the row held; say so if it happens
        raise RuntimeError(f"run {decided.run.id} left system_failed during its own rescue")


def _settle_lost(alias: str, runs: list[Stale], now: dt.datetime) -> None:
    """Spend what lost attempts reserved: the call may have been made, so it is paid for."""
    reserved = [run for run in runs if run.reserved_cost is not None]
    if not reserved:
        return
    projects = dict(
        Job.objects.using(alias)
        .filter(pk__in={run.job_id for run in reserved}, project__isnull=False)
        .values_list("id", "project_id")
    )
    spends = [
        Spend(run.id, projects[run.job_id], run.started_at or now, cost, cost)
        for run in reserved
        if run.job_id in projects and (cost := run.reserved_cost) is not None
    ]
    settle_budgets(alias, spends)
