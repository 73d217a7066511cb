"""Running workflows: trigger one, cancel a run of it, fail the runs that stalled."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from django_strait.database import alias_for_id
from django_strait.models import Workflow, WorkflowRun
from django_strait.rules.states import InvalidTransition
from django_strait.services import triggering
from django_strait.services.triggering import TriggerError, check_payload
from django_strait.storage import backend
from django_strait.transitions import cancel
from django_strait.transitions.workflows import announce
from django_strait.workflows.defining import workflow_alias

logger = logging.getLogger(__name__)


def trigger_workflow(
    name: str, payload: Any = None, *, idempotency_key: str | None = None
) -> WorkflowRun:
    """Start a run of workflow ``name``: its step runs, and the JobRuns of its root steps.

    With an ``idempotency_key`` already used for this workflow, return that run
    (``idempotency_hit`` is then True).
    """
    storage = backend(workflow_alias(name) if isinstance(name, str) else None)
    alias = storage.alias
    workflow = Workflow.objects.using(alias).filter(name=name).first()
    if workflow is None:
        raise TriggerError("name", f"unknown workflow {name!r}")
    payload = {} if payload is None else check_payload(payload)
    key = _check_key(idempotency_key)
    try:
        wr, advanced = storage.begin_workflow_run(workflow, payload, key, now=timezone.now())
    except IntegrityError:
        existing = WorkflowRun.objects.using(alias).filter(workflow=workflow, idempotency_key=key)
        wr = existing.first()
        if key is None or wr is None:
            raise
        wr.idempotency_hit = True
        return wr
    announce(advanced, using=alias)
    wr.idempotency_hit = False
    wr.refresh_from_db(using=alias)
    logger.info("workflow run %s of %s: started", wr.pk, name, extra={"workflow_run_id": wr.pk})
    if triggering.AFTER_TRIGGER:
        triggering.after_trigger([wr])
    return wr


def _check_key(key: Any) -> str | None:
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise TriggerError("idempotency_key", f"must be a string of 1-255 characters, got {key!r}")
    return key


def cancel_workflow_run(workflow_run: WorkflowRun | int) -> WorkflowRun:
    """Cancel a workflow run: its waiting steps at once, its started steps' runs by the cancel transition.

    A run executing is canceled when its attempt returns (its step run follows).
    """
    wr_id = workflow_run if isinstance(workflow_run, int) else workflow_run.pk
    where = workflow_run._state.db if isinstance(workflow_run, WorkflowRun) else None
    storage = backend(where or alias_for_id(wr_id))
    advanced, live = storage.cancel_workflow_run(wr_id, now=timezone.now())
    announce(advanced, using=storage.alias)
    for run_id in live:
        try:
            cancel(run_id, storage=storage)
        except InvalidTransition:
            pass  # it ended meanwhile; its record brought its step run along
    logger.info("workflow run %s: canceled", wr_id, extra={"workflow_run_id": wr_id})
    return WorkflowRun.objects.using(storage.alias).get(pk=wr_id)


def fail_stalled(now: dt.datetime, *, stale_after: float, using: str | None = None) -> int:
    """Fail the running workflow runs stuck for ``stale_after`` seconds; return how many."""
    storage = backend(using)
    advanced = storage.fail_stalled_workflow_runs(now=now, stale_after=stale_after)
    announce(advanced, using=storage.alias)
    changes = advanced.changes
    for change in changes:
        logger.warning(
            "workflow run %s of %s: stalled", change.workflow_run_id, change.workflow,
            extra={"workflow_run_id": change.workflow_run_id},
        )  # fmt: skip
    return len(changes)
