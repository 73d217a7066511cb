"""What both of the project's backends do alike: the portable verbs, as plain functions.

The ORM backend (``storage.orm.OrmStorage``) and the PostgreSQL backend
(``storage.postgres.PostgresStorage``) are siblings: neither subclasses the
other. Each verb that PostgreSQL does no better than the ORM is written once
here, over the ORM's statements (``storage/orm/*.py``), and each backend calls
it by name: the PostgreSQL class lists every verb it has, and a reader sees in
it which are its own statements and which are these.

Every function takes the database ``alias`` first; none keeps state. A change
of a run that may meet a run moved to another partition meanwhile is retried
(``moves.retry_moved``): on a table that is not partitioned it runs once.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from django_strait.models import EndpointHealth, JobRun, Workflow, WorkflowRun
from django_strait.rules.resilience import budgets
from django_strait.rules.resilience.health import Health, Sample
from django_strait.rules.resilience.policy import Change, Circuit, Result
from django_strait.storage import circuit_rows, webhooks, workflows
from django_strait.storage.moves import retry_moved
from django_strait.storage.orm import (
    claims,
    enqueue,
    external,
    people,
    processes,
    protection,
    rescue,
    reservations,
)
from django_strait.storage.parts import Health as HealthPart
from django_strait.storage.values import (
    Claimed,
    Envelope,
    RecordBatch,
    Rescue,
    Rescued,
    StaleRuns,
    Waiting,
)


def atomic(alias: str) -> Any:
    """A transaction (or a savepoint inside one) on ``alias``."""
    return transaction.atomic(using=alias)


# -- the worker's runs ----------------------------------------------------------------


def start(
    db: workflows.Db, runs: Sequence[Claimed], begin: Callable[[list[int]], list[tuple]]
) -> list[Claimed]:
    """Move claimed runs to executing through ``begin``; return those that moved, in claim order.

    ``begin(ids)`` is the backend's statement for the runs the claim did not begin:
    it answers (id, attempt, started_at) for each run it moved. Runs the claim began
    are only counted. A workflow step's run learns its step and workflow here, read
    with the backend's workflow statements ``db``.
    """
    if not runs:
        return []
    unbegun = [r.id for r in runs if not r.begun]
    moved = {rid: (attempt, at) for rid, attempt, at in begin(unbegun)} if unbegun else {}
    started = []
    for run in runs:  # in claim order, whatever order the database answered in
        if run.begun:
            run.attempt += 1
            started.append(run)
        elif run.id in moved:
            run.attempt, run.started_at = moved[run.id]
            started.append(run)
    _join_workflows(db, started)
    return started


def _join_workflows(db: workflows.Db, started: list[Claimed]) -> None:
    """Give each started step's run its step and workflow run (plain runs: nothing to do)."""
    steps = {run.step_run_id: run for run in started if run.step_run_id}
    if not steps:
        return
    for step_run_id, (step, member, problem) in workflows.members(db, list(steps)).items():
        run = steps[step_run_id]
        run.step, run.workflow = step, member
        if problem:  # it fails without running (run.invalid), the others start
            run.row_error = run.row_error or problem


def claim_external(
    alias: str, worker_id: str, queues: Sequence[str], limit: int, now: dt.datetime
) -> list[Claimed]:
    """Move up to ``limit`` due external runs to dequeued, queue by queue; in a transaction."""
    return external.claim(alias, worker_id, queues, limit, now) if limit > 0 else []


def set_deadlines(
    alias: str, worker_id: str, deadlines: Mapping[int, dt.datetime], now: dt.datetime
) -> list[int]:
    """Set the deadlines of executing external runs ``worker_id`` holds; return those moved."""
    return external.set_deadlines(alias, worker_id, deadlines, now) if deadlines else []


def hold_began(alias: str, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
    """When each run's current hold period for ``reason`` began (see ``Storage``)."""
    return claims.hold_began(alias, attempts, reason)


def waiting(alias: str, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
    """Group the queued runs of ``queues`` that a claim at ``now`` cannot take, by why."""
    return claims.waiting(alias, queues, now)


def unclaim(alias: str, worker_id: str, run_ids: Sequence[int], now: dt.datetime) -> int:
    """Put claimed-but-unstarted runs back to queued; no attempt is spent."""
    if not run_ids:
        return 0
    return retry_moved(alias, lambda: claims.unclaim(alias, worker_id, run_ids, now))


def heartbeat(alias: str, worker_id: str, run_ids: Sequence[int], now: dt.datetime) -> int:
    """Mark the runs this worker holds as alive (beside records moving them to history)."""
    if not run_ids:
        return 0
    return retry_moved(alias, lambda: claims.heartbeat(alias, worker_id, run_ids, now))


def let_go(alias: str, worker_id: str, run_ids: Sequence[int]) -> list[int]:
    """Return the runs among ``run_ids`` not executing under this worker, or asked to cancel."""
    return processes.let_go(alias, worker_id, run_ids) if run_ids else []


# -- protection -----------------------------------------------------------------------


def settle_budgets(alias: str, spends: list[budgets.Spend]) -> None:
    """Turn reservations into what attempts cost, on ledgers and runs (outside a record)."""
    if spends:
        protection.settle_budgets(alias, spends)


def crossed_soft_limits(
    alias: str, spends: list[budgets.Spend], now: dt.datetime
) -> list[budgets.LedgerDay]:
    """After a record: the days whose spending crossed their soft limit, marked so once."""
    return protection.crossed_soft_limits(alias, spends, now) if spends else []


def release_budget_waiting(alias: str, project_id: int, now: dt.datetime) -> int:
    """Make the runs waiting for a project's budget due now."""
    return protection.release_waiting(alias, project_id, now)


def reserve_budgets_for(
    alias: str, source: str, pending: Sequence[budgets.Pending], now: dt.datetime
) -> budgets.Allocation:
    """On the control database: reserve for ``source``'s claimed runs, in a transaction of its own."""
    if not pending:
        return budgets.Allocation()
    return reservations.reserve_for(alias, source, pending, now)


def settle_budgets_for(alias: str, source: str, spends: Sequence[budgets.Spend]) -> int:
    """On the control database: close ``source``'s reservations, each exactly once."""
    return reservations.settle_for(alias, source, spends)


def stale_reservations(
    alias: str, source: str, before: dt.datetime, limit: int
) -> list[budgets.Reservation]:
    """On the control database: ``source``'s reservations made before ``before``."""
    return reservations.stale(alias, source, before, limit)


def mark_reserved(alias: str, reserved: Mapping[int, Decimal]) -> None:
    """Note on claimed runs what the control database reserved for them."""
    if reserved:
        reservations.mark_reserved(alias, reserved)


def reservation_fates(
    alias: str, attempts: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """What became of the attempts that reservations on the control database name."""
    return reservations.fates(alias, attempts)


def load_active_circuits(alias: str) -> dict[str, Circuit]:
    """Return the circuits that are open, half-open, or closed with failures counted."""
    return protection.load_active_circuits(alias)


def win_circuit_probe(
    alias: str, url: str, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
) -> bool:
    """Take the single half-open probe of ``url``; True if this call won it."""
    return protection.win_circuit_probe(alias, url, now, cooldown, lost_before)


def apply_circuit_results(
    alias: str, results: Mapping[str, Sequence[Result]], now: dt.datetime, threshold: int
) -> tuple[list[Circuit], list[Change]]:
    """Fold each endpoint's results into its circuit; return the circuits and the changes."""
    if not results:
        return [], []
    return circuit_rows.apply_circuit_results(alias, results, now, threshold)


def reset_circuits(alias: str, url: str | None, now: dt.datetime) -> tuple[int, list[Change]]:
    """Close one circuit (all of them when ``url`` is None); return how many changed, and how."""
    return protection.reset_circuits(alias, url, now)


def load_unwell_endpoints(alias: str) -> dict[str, Health]:
    """Return the endpoints that are degraded or unhealthy."""
    return protection.load_unwell(alias)


def win_health_probe(alias: str, url: str, now: dt.datetime, cooldown: dt.timedelta) -> bool:
    """Take the one probe of an unhealthy endpoint this cooldown; True if this call won it."""
    return protection.win_health_probe(alias, url, now, cooldown)


# -- what people ask for --------------------------------------------------------------


def replay(alias: str, run_id: int, by: str, now: dt.datetime, payload: Any = ...) -> JobRun:
    """Queue a replayable run again, its budget reset; raise InvalidTransition else."""
    return retry_moved(alias, lambda: people.replay(alias, run_id, by, now, payload))


def replay_many(alias: str, run_ids: Sequence[int], by: str, now: dt.datetime) -> int:
    """Replay the replayable runs among ``run_ids`` in one statement; return how many moved."""
    if not run_ids:
        return 0
    return retry_moved(alias, lambda: people.replay_many(alias, run_ids, by, now))


def cancel(alias: str, run_id: int, now: dt.datetime) -> JobRun:
    """Cancel a run that may be canceled now; raise InvalidTransition else."""
    return retry_moved(alias, lambda: people.cancel(alias, run_id, now))


def drop(alias: str, run_id: int, now: dt.datetime) -> JobRun:
    """Discard a run no worker holds; raise InvalidTransition else."""
    return retry_moved(alias, lambda: people.drop(alias, run_id, now))


def request_cancel(alias: str, run_id: int, now: dt.datetime) -> bool:
    """Flag an executing run to be canceled when its attempt returns."""
    return retry_moved(alias, lambda: people.request_cancel(alias, run_id, now))


# -- workflows (docs/workflows.md): each applies what ``dag`` decided ---------------


def begin_workflow_run(
    db: workflows.Db, workflow: Workflow, payload: Any, key: str | None, now: dt.datetime
) -> tuple[WorkflowRun, workflows.Advanced]:
    """Insert a run of ``workflow`` with its step runs, its root steps started; atomically."""
    move = workflows.Move(db, now)
    return workflows.begin(move, workflow, payload, key), move.out


def advance_workflows(
    db: workflows.Db, run_ids: Sequence[int], now: dt.datetime
) -> workflows.Advanced:
    """Move on the workflow runs of the steps whose runs are ``run_ids``."""
    return workflows.advance(workflows.Move(db, now), run_ids)


def settle_workflow_runs(
    db: workflows.Db, wr_ids: Sequence[int], now: dt.datetime
) -> workflows.Advanced:
    """Settle whole workflow runs anew, every step read (after a redefinition)."""
    return workflows.advance_workflow_runs(workflows.Move(db, now), wr_ids)


def cancel_workflow_run(
    db: workflows.Db, wr_id: int, now: dt.datetime
) -> tuple[workflows.Advanced, list[int]]:
    """Cancel a moving workflow run and its waiting steps; return the change and its live runs."""
    move = workflows.Move(db, now)
    live = workflows.cancel(move, wr_id)
    return move.out, live


def fail_stalled_workflow_runs(
    db: workflows.Db, now: dt.datetime, stale_after: float
) -> workflows.Advanced:
    """Fail the running workflow runs in which nothing progressed for ``stale_after`` s."""
    return workflows.fail_stalled(workflows.Move(db, now), stale_after)


# -- the webhook outbox (docs/webhooks.md), and health sampled outside a record -------


def claim_deliveries(
    alias: str, limit: int, now: dt.datetime, lease: dt.timedelta
) -> list[webhooks.Due]:
    """Lease up to ``limit`` due deliveries, oldest due first; skip rows held elsewhere."""
    return webhooks.claim_due(alias, limit, now, lease)


def settle_deliveries(alias: str, settled: Sequence[webhooks.Settled]) -> None:
    """Write what became of claimed deliveries (only those still pending move)."""
    if settled:
        webhooks.settle(alias, settled)


def hold_deliveries(alias: str, pks: Sequence[int], until: dt.datetime) -> None:
    """Put claimed deliveries back until ``until``, spending no attempt."""
    if pks:
        webhooks.hold(alias, pks, until)


def redeliver(alias: str, pks: Sequence[int], now: dt.datetime) -> int:
    """Make deliveries due now with a fresh attempt budget; return how many."""
    return webhooks.redeliver(alias, pks, now) if pks else 0


def fold_health(alias: str, samples: Sequence[Sample]) -> None:
    """Fold answers sampled outside a record (webhook deliveries) into endpoint health."""
    if samples:
        with atomic(alias):
            # The record's health part, fed a batch of samples and no records.
            HealthPart().apply(RecordBatch("", (), tuple(samples)), {}, alias)


def forget_health(alias: str, urls: Sequence[str]) -> int:
    """Forget the health scores of ``urls``; return how many were forgotten."""
    rows = EndpointHealth.objects.using(alias).filter(endpoint_url__in=list(urls))
    return rows.delete()[0]


# -- the reaper and external workers: decided transitions -----------------------------


def stale_runs(
    alias: str, now: dt.datetime, stale_after: float, waiting_stale_after: float, limit: int
) -> StaleRuns:
    """Find and lock up to ``limit`` stale runs; call in the transaction that rescues them."""
    return retry_moved(alias, lambda: rescue.select_stale(
        alias, now, stale_after, waiting_stale_after, limit
    ))  # fmt: skip


def rescue_runs(
    alias: str,
    rescues: Sequence[Rescue],
    unreadable: Mapping[int, str],
    now: dt.datetime,
    stale_after: float,
    isolate: bool = False,
) -> list[Rescued]:
    """Apply decided rescues and dead-letter unreadable stale runs; return the rescued."""
    return retry_moved(alias, lambda: rescue.rescue(
        alias, rescues, unreadable, now, stale_after=stale_after, isolate=isolate
    ))  # fmt: skip


def set_external_ids(alias: str, ids: Mapping[int, uuid.UUID]) -> list[int]:
    """Give runs without an OJS id theirs; return those that took it."""
    return retry_moved(alias, lambda: external.set_ids(alias, ids)) if ids else []


def set_external_envelopes(alias: str, envelopes: Sequence[Envelope]) -> None:
    """Give a batch's new runs their OJS ids, envelopes and due times (one UPDATE per run)."""
    if envelopes:
        external.set_envelopes(alias, envelopes)


def set_external_retry_delay(alias: str, run_id: int, delay_ms: int) -> bool:
    """Note the delay of a nacked run's retry in its OJS envelope."""
    return retry_moved(alias, lambda: external.set_retry_delay(alias, run_id, delay_ms))


def set_external_progress(
    alias: str, run_id: int, worker: str, attempt: int, progress: dict[str, Any]
) -> dict[str, Any] | None:
    """Keep a worker's progress on the attempt it holds (OJS ext-progress)."""
    return retry_moved(
        alias, lambda: external.set_progress(alias, run_id, worker, attempt, progress)
    )


# -- making runs ----------------------------------------------------------------------


def insert_one(alias: str, run: JobRun) -> JobRun:
    """Insert a run (or, for a used idempotency key, return the run that holds it)."""
    return enqueue.insert_one(alias, run)


def prune_runs(alias: str, rows: QuerySet) -> int:
    """Delete the runs ``rows`` selects (the pruner's decision), their attempts and holds
    with them (the database's cascade and Django's collector); return how many runs went.

    Only ids are loaded: a run whose other columns cannot be read ('-infinity', deep
    JSON) is deleted like any other.
    """
    _, by_model = rows.using(alias).only("pk").delete()
    return by_model.get(JobRun._meta.label, 0)
