"""A workflow step's parents' results, as its job body carries them (``parent_results``)."""

from __future__ import annotations

from typing import Any

from django_strait.models import JobRun, WorkflowStepRun


def parent_results(runs: list[JobRun]) -> dict[int, list[Any]]:
    """For fetched runs that are a workflow's steps: their parents' results, in order
    (the steps, with their workflow, on the runs' alias)."""
    steps = [r.workflow_step_run_id for r in runs if r.workflow_step_run_id]
    if not steps:
        return {}
    out: dict[int, list[Any]] = {}
    using = runs[0]._state.db
    mine = WorkflowStepRun.objects.using(using).filter(pk__in=steps).select_related("step")
    for sr in mine:
        depends = sr.step.depends_on if isinstance(sr.step.depends_on, list) else []
        if not depends:
            continue
        found = (
            WorkflowStepRun.objects.using(using)
            .filter(workflow_run_id=sr.workflow_run_id, step__name__in=depends)
            .select_related("step", "run")
        )
        by_name = {p.step.name: (p.run.result if p.run else None) for p in found}
        run_id = next(r.pk for r in runs if r.workflow_step_run_id == sr.pk)
        out[run_id] = [by_name.get(n) for n in depends]
    return out
