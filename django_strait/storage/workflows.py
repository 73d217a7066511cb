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

from django_strait import dag, signals
from django_strait.models import (
    JobRun,
    StepRunStatus,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStepRun,
)
from django_strait.retry import step_partial
from django_strait.states import RunStatus

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
        if changes:
            transaction.on_commit(lambda: signals.send_workflow_changes(changes), using=alias)
    return changes


def _advance_one(alias: str, wr: WorkflowRun, now: dt.datetime) -> list[Change]:
    step_runs = list(
        WorkflowStepRun.objects.using(alias)
        .filter(workflow_run=wr)
        .select_related("step", "step__job", "run")
        # A wide workflow reads every step run per advance: leave the big columns out.
        .defer("run__payload", "run__result", "run__last_error", "run__retry_overrides")
    )
    by_name = {sr.step.name: sr for sr in step_runs}
    status = {name: _synced(sr) for name, sr in by_name.items()}
    if wr.status not in MOVING:
        new = {n: StepRunStatus.CANCELED if s == dag.WAITING else s for n, s in status.items()}
        _save_steps(alias, by_name, new, wr, now)
        return []
    # A step added by a redefinition after this run began has no step run here: not a parent.
    parents = {n: [p for p in sr.step.depends_on if p in by_name] for n, sr in by_name.items()}
    lenient = {name for name, sr in by_name.items() if sr.step.continue_on_failure}
    new, wf_status = dag.settle(parents, status, lenient)
    _save_steps(alias, by_name, new, wr, now)
    return _set_status(alias, wr, wf_status, by_name, new, lenient, now)


def _synced(sr: WorkflowStepRun) -> str:
    """The step run's status as its JobRun says (a waiting or skipped step has none)."""
    if sr.run is None:
        return sr.status
    return STEP_STATUS.get(sr.run.status, StepRunStatus.STARTED)


def _save_steps(alias: str, by_name: dict, new: dict, wr: WorkflowRun, now: dt.datetime) -> None:
    for name, sr in by_name.items():
        if new[name] == StepRunStatus.STARTED and sr.run is None:
            sr.run = _new_run(alias, sr, wr.payload, now)
        if new[name] != sr.status or sr.run_id != getattr(sr.run, "pk", None):
            sr.status = new[name]
            sr.save(using=alias, update_fields=["status", "run"])


def _new_run(alias: str, sr: WorkflowStepRun, payload: Any, now: dt.datetime) -> JobRun:
    """Queue the step's JobRun: the workflow's payload, the step's retry fields as its override."""
    step, job = sr.step, sr.step.job
    partial = step_partial(
        {"retry_backoff": step.retry_backoff, "retry_initial_delay_secs": step.retry_initial_delay_secs,
         "retry_max_delay_secs": step.retry_max_delay_secs},
    )  # fmt: skip
    run = JobRun(
        job=job,
        payload=payload,
        priority=job.priority,
        queue=job.queue,
        available_at=now,
        max_attempts=step.max_attempts,
        retry_overrides=partial or None,
        workflow_step_run=sr,
        created_at=now,
    )
    run.save(force_insert=True, using=alias)
    signals.send_enqueued(job.name, [run], using=alias)
    return run


def _set_status(
    alias: str,
    wr: WorkflowRun,
    status: str,
    by_name: dict[str, WorkflowStepRun],
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
    run = by_name[name].run
    ended = run.status if run is not None else new[name]
    detail = f" ({run.error_type})" if run is not None and run.error_type else ""
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
