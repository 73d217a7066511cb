"""Workflows (portable ORM, on every backend): the DAG moves on in the transaction that moved a step's run.

One function, :func:`advance`, serves every path that changes a step's run
(the worker's record, cancel, discard, replay, the reaper's rescue): it locks
the workflow runs concerned (in id order, so two recorders of one fan-in never
both miss the other's parent), brings each step run's status in line with its
JobRun, and lets :func:`django_strait.dag.settle` say which steps start, which
are skipped and where the workflow run stands. Nothing polls; a child's JobRun
is inserted in the same transaction as its last parent's result.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Subquery

from django_strait import dag, signals
from django_strait.models import (
    JobRun,
    StepRunStatus,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStep,
    WorkflowStepRun,
)
from django_strait.retry import step_partial
from django_strait.states import RunStatus
from django_strait.storage import webhooks

#: A step run's status for each status of its JobRun.
STEP_STATUS = {
    RunStatus.COMPLETED: StepRunStatus.COMPLETED,
    RunStatus.FAILED: StepRunStatus.FAILED,
    RunStatus.DEAD_LETTER: StepRunStatus.FAILED,
    RunStatus.DISCARDED: StepRunStatus.FAILED,
    RunStatus.CANCELED: StepRunStatus.CANCELED,
}
#: Workflow run statuses the DAG still moves in (a failed one resumes on replay).
MOVING = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.FAILED)


@dataclass(frozen=True, slots=True)
class Change:
    """A workflow run that changed status: what the signals announce."""

    workflow_run_id: int
    workflow: str
    status: str
    error_type: str = ""
    error: str = ""


def advance(alias: str, run_ids: Iterable[int], now: dt.datetime) -> list[Change]:
    """Move on the workflow runs whose step runs' JobRuns are ``run_ids``; return their changes."""
    steps = WorkflowStepRun.objects.using(alias)
    wr_ids = set(steps.filter(run_id__in=list(run_ids)).values_list("workflow_run_id", flat=True))
    return advance_workflow_runs(alias, wr_ids, now) if wr_ids else []


def advance_workflow_runs(alias: str, wr_ids: Iterable[int], now: dt.datetime) -> list[Change]:
    """Lock the workflow runs ``wr_ids`` and move each on; announce changes after commit."""
    with transaction.atomic(using=alias):
        locked = (
            WorkflowRun.objects.using(alias)
            .select_for_update()
            .filter(pk__in=sorted(wr_ids))
            .select_related("workflow")
            .order_by("pk")
        )
        changes = [c for wr in locked for c in _advance_one(alias, wr, now)]
        webhooks.notify_workflows(alias, changes, now)
        if changes:
            transaction.on_commit(lambda: signals.send_workflow_changes(changes), using=alias)
    return changes


@dataclass(slots=True)
class _StepRun:
    """A step run as the DAG needs it: read as a tuple, no model built (1,000 per advance)."""

    pk: int
    step_id: int
    name: str
    depends_on: list[str]
    lenient: bool
    status: str
    run_id: int | None
    run_status: str | None
    run_error_type: str | None

    @property
    def synced(self) -> str:
        """Its status as its JobRun says (a waiting or skipped step has none)."""
        if self.run_id is None:
            return self.status
        return STEP_STATUS.get(self.run_status, StepRunStatus.STARTED)


_STEP_RUN_COLUMNS = (
    "pk", "step_id", "step__name", "step__depends_on", "step__continue_on_failure", "status",
    "run_id", "run__status", "run__error_type",
)  # fmt: skip


def _advance_one(alias: str, wr: WorkflowRun, now: dt.datetime) -> list[Change]:
    rows = WorkflowStepRun.objects.using(alias).filter(workflow_run=wr).order_by()
    by_name = {r.name: r for r in (_StepRun(*t) for t in rows.values_list(*_STEP_RUN_COLUMNS))}
    status = {name: r.synced for name, r in by_name.items()}
    if wr.status not in MOVING:
        new = {n: StepRunStatus.CANCELED if s == dag.WAITING else s for n, s in status.items()}
        _save_steps(alias, by_name, new, wr, now)
        return []
    # A step added by a redefinition after this run began has no step run here: not a parent.
    parents = {n: [p for p in r.depends_on if p in by_name] for n, r in by_name.items()}
    lenient = {name for name, r in by_name.items() if r.lenient}
    new, wf_status = dag.settle(parents, status, lenient)
    _save_steps(alias, by_name, new, wr, now)
    return _set_status(alias, wr, wf_status, by_name, new, lenient, now)


def _save_steps(
    alias: str, by_name: dict[str, _StepRun], new: dict[str, str], wr: WorkflowRun, now: dt.datetime
) -> None:
    """Write the step runs whose status moved, the steps that start with their runs: a few statements."""
    starting = [
        r for n, r in by_name.items() if new[n] == StepRunStatus.STARTED and r.run_id is None
    ]
    if starting:
        _new_runs(alias, starting, wr.payload, now)
    by_status: dict[str, list[int]] = {}
    for name, r in by_name.items():
        if new[name] != r.status:
            r.status = new[name]
            by_status.setdefault(r.status, []).append(r.pk)
    # A 1,000-wide fan-out is the INSERT of its runs and two UPDATEs, not 2,000 statements
    # (bulk_update's CASE per row costs more in Python than the rows do in SQL).
    rows = WorkflowStepRun.objects.using(alias)
    for status, ids in by_status.items():
        rows.filter(pk__in=ids).update(status=status)
    if starting:
        mine = JobRun.objects.using(alias).filter(workflow_step_run=OuterRef("pk"))
        rows.filter(pk__in=[r.pk for r in starting]).update(run=Subquery(mine.values("pk")[:1]))


def _new_runs(alias: str, starting: list[_StepRun], payload: Any, now: dt.datetime) -> None:
    """Queue the steps' JobRuns in one INSERT: the workflow's payload, each step's retry fields."""
    steps = WorkflowStep.objects.using(alias).select_related("job")
    by_id = steps.in_bulk({r.step_id for r in starting})
    runs = [_new_run(r.pk, by_id[r.step_id], payload, now) for r in starting]
    JobRun.objects.using(alias).bulk_create(runs, batch_size=500)
    by_job: dict[str, list[JobRun]] = {}
    for r, run in zip(starting, runs, strict=True):
        r.run_id, r.run_status = run.pk, run.status
        by_job.setdefault(by_id[r.step_id].job.name, []).append(run)
    for job, created in by_job.items():
        signals.send_enqueued(job, created, using=alias)


def _new_run(step_run_id: int, step: WorkflowStep, payload: Any, now: dt.datetime) -> JobRun:
    """Return the step's JobRun, unsaved: the step's retry fields as its run override."""
    job = step.job
    partial = step_partial(
        {"retry_backoff": step.retry_backoff, "retry_initial_delay_secs": step.retry_initial_delay_secs,
         "retry_max_delay_secs": step.retry_max_delay_secs},
    )  # fmt: skip
    return JobRun(
        job=job,
        payload=payload,
        priority=job.priority,
        queue=job.queue,
        available_at=now,
        max_attempts=step.max_attempts,
        retry_overrides=partial or None,
        workflow_step_run_id=step_run_id,
        created_at=now,
    )


def _set_status(
    alias: str,
    wr: WorkflowRun,
    status: str,
    by_name: dict[str, _StepRun],
    new: dict[str, str],
    lenient: set[str],
    now: dt.datetime,
) -> list[Change]:
    wr.progressed_at = now
    fields = ["progressed_at"]
    changed = status != wr.status
    if changed:
        wr.status = status
        wr.finished_at = None if status == WorkflowRunStatus.RUNNING else now
        wr.error_type, wr.last_error = _why(status, by_name, new, lenient)
        fields += ["status", "finished_at", "error_type", "last_error"]
    wr.save(using=alias, update_fields=fields)
    if not changed or status == WorkflowRunStatus.RUNNING:
        return []  # a resumed workflow announces nothing until it ends again
    return [Change(wr.pk, wr.workflow.name, status, wr.error_type, wr.last_error)]


def _why(status: str, by_name: dict, new: dict, lenient: set[str]) -> tuple[str, str]:
    if status != WorkflowRunStatus.FAILED:
        return "", ""
    name = sorted(dag.blocking(new, lenient))[0]
    r = by_name[name]
    ended = r.run_status if r.run_id is not None else new[name]
    detail = f" ({r.run_error_type})" if r.run_id is not None and r.run_error_type else ""
    return "workflow.step_failed", f"step {name!r} ended {ended}{detail}"


def cancel(alias: str, wr_id: int, now: dt.datetime) -> list[int]:
    """Mark a running or failed workflow run canceled, its waiting steps too; return its live runs.

    The caller cancels those runs through the cancel transition, which brings
    their step runs along.
    """
    with transaction.atomic(using=alias):
        runs = WorkflowRun.objects.using(alias).select_for_update().filter(pk=wr_id)
        moved = runs.filter(status__in=MOVING).update(
            status=WorkflowRunStatus.CANCELED, finished_at=now, progressed_at=now
        )
        if not moved:
            return []
        steps = WorkflowStepRun.objects.using(alias).filter(workflow_run_id=wr_id)
        steps.filter(status=StepRunStatus.WAITING).update(status=StepRunStatus.CANCELED)
        live = steps.filter(status=StepRunStatus.STARTED, run__isnull=False)
        ids = list(live.values_list("run_id", flat=True))
        name = (
            WorkflowRun.objects.using(alias).values_list("workflow__name", flat=True).get(pk=wr_id)
        )
        change = Change(wr_id, name, WorkflowRunStatus.CANCELED)
        transaction.on_commit(lambda: signals.send_workflow_changes([change]), using=alias)
    return ids


def fail_stalled(alias: str, now: dt.datetime, stale_after: float) -> list[Change]:
    """Fail the running workflow runs stuck for ``stale_after`` seconds; return the changes.

    Stuck: some step waits, no step is started (nothing in flight or retrying
    could make it due), and nothing progressed since the cutoff. A slow step,
    even one retrying for days, is started: never a stall.
    """
    cutoff = now - dt.timedelta(seconds=stale_after)
    steps = WorkflowStepRun.objects.using(alias)
    candidates = (
        WorkflowRun.objects.using(alias)
        .filter(status=WorkflowRunStatus.RUNNING, progressed_at__lt=cutoff)
        .filter(pk__in=steps.filter(status=StepRunStatus.WAITING).values("workflow_run_id"))
        .exclude(pk__in=steps.filter(status=StepRunStatus.STARTED).values("workflow_run_id"))
    )
    changes: list[Change] = []
    with transaction.atomic(using=alias):
        for wr in candidates.select_for_update().select_related("workflow").order_by("pk"):
            error = f"no step progressed for {stale_after:g} s while steps wait"
            WorkflowRun.objects.using(alias).filter(pk=wr.pk).update(
                status=WorkflowRunStatus.FAILED, finished_at=now, error_type="workflow.stalled",
                last_error=error,
            )  # fmt: skip
            changes.append(Change(wr.pk, wr.workflow.name, "failed", "workflow.stalled", error))
        webhooks.notify_workflows(alias, changes, now)
        if changes:
            transaction.on_commit(lambda: signals.send_workflow_changes(changes), using=alias)
    return changes


def members(alias: str, step_run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Each step run's ``{"run_id", "step", "parents"}``: its parents' results by step name.

    Two queries for a whole batch of starting steps, whatever its size.
    """
    steps = WorkflowStepRun.objects.using(alias).filter(pk__in=step_run_ids)
    rows = list(steps.values_list("pk", "workflow_run_id", "step__name", "step__depends_on"))
    names = {name for *_, deps in rows for name in deps}
    results: dict[tuple[int, str], Any] = {}
    if names:
        siblings = WorkflowStepRun.objects.using(alias).filter(
            workflow_run_id__in={wr for _, wr, _, _ in rows}, step__name__in=names
        )
        for wr, name, result in siblings.values_list(
            "workflow_run_id", "step__name", "run__result"
        ):
            results[(wr, name)] = result
    return {
        pk: {"run_id": wr, "step": name, "parents": {d: results.get((wr, d)) for d in deps}}
        for pk, wr, name, deps in rows
    }
