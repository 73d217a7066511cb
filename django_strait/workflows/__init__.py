"""Workflows: define a DAG of steps, trigger it, cancel a run of it (docs/workflows.md)."""

from __future__ import annotations

from django_strait.workflows.defining import WorkflowError, define_workflow
from django_strait.workflows.running import cancel_workflow_run, fail_stalled, trigger_workflow

__all__ = [
    "WorkflowError",
    "cancel_workflow_run",
    "define_workflow",
    "fail_stalled",
    "trigger_workflow",
]
