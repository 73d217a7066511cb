"""A workflow run's beginning and its ends outside the DAG: triggered, canceled, stalled."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction

from django_strait.models import (
    StepRunStatus,
    Workflow,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStepRun,
)
from django_strait.rules import dag
from django_strait.storage import webhooks
from django_strait.storage.workflows.changes import Advanced, Change, Move
from django_strait.storage.workflows.moving import advance_workflow_runs


def begin(move: Move, workflow: Workflow, payload: Any, key: str | None) -> WorkflowRun:
    """Insert a run of ``workflow``, its step runs, and start its root steps, in one transaction.

    Raises ``IntegrityError`` when ``key`` is already used for this workflow.
    """
    alias = move.db.alias
    with transaction.atomic(using=alias):
        wr = WorkflowRun.objects.using(alias).create(
            workflow=workflow,
            payload=payload,
            idempotency_key=key,
            created_at=move.now,
            progressed_at=move.now,
        )
        steps = list(workflow.steps.using(alias))
        names = {step.name for step in steps}
        WorkflowStepRun.objects.using(alias).bulk_create(
            WorkflowStepRun(
                workflow_run=wr,
                step=step,
                parents_left=sum(1 for p in step.depends_on if p in names),
            )
            for step in steps
        )
        advance_workflow_runs(move, [wr.pk])
        move.out.changes.append(Change(wr.pk, workflow.name, WorkflowRunStatus.RUNNING))
    return wr


def cancel(move: Move, wr_id: int) -> list[int]:
    """Mark a running or failed workflow run canceled, its waiting steps too; return its live runs.

    The caller cancels those runs through the cancel transition, which brings
    their step runs along.
    """
    alias, now = move.db.alias, move.now
    with transaction.atomic(using=alias):
        runs = WorkflowRun.objects.using(alias).select_for_update().filter(pk=wr_id)
        moved = runs.filter(status__in=dag.MOVING).update(
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
        move.out.changes.append(Change(wr_id, name, WorkflowRunStatus.CANCELED))
    return ids


def fail_stalled(move: Move, stale_after: float) -> Advanced:
    """Fail the running workflow runs stuck for ``stale_after`` seconds; return the changes.

    Stuck: some step waits, no step is started (nothing in flight or retrying
    could make it due), and nothing progressed since the cutoff. A slow step,
    even one retrying for days, is started: never a stall.
    """
    alias, now = move.db.alias, move.now
    cutoff = now - dt.timedelta(seconds=stale_after)
    steps = WorkflowStepRun.objects.using(alias)
    candidates = (
        WorkflowRun.objects.using(alias)
        .filter(status=WorkflowRunStatus.RUNNING, progressed_at__lt=cutoff)
        .filter(pk__in=steps.filter(status=StepRunStatus.WAITING).values("workflow_run_id"))
        .exclude(pk__in=steps.filter(status=StepRunStatus.STARTED).values("workflow_run_id"))
    )
    error = dag.stalled_error(stale_after)
    with transaction.atomic(using=alias):
        # Only the columns it writes from: a run whose other columns cannot be read still fails.
        stalled = candidates.select_for_update().order_by("pk").values_list("pk", "workflow__name")
        for pk, name in stalled:
            WorkflowRun.objects.using(alias).filter(pk=pk).update(
                status=WorkflowRunStatus.FAILED, finished_at=now, error_type=dag.STALLED_ERROR,
                last_error=error,
            )  # fmt: skip
            move.out.changes.append(Change(pk, name, "failed", dag.STALLED_ERROR, error))
        if move.out.changes:
            webhooks.notify_workflows(alias, move.out.changes, now)
    return move.out
