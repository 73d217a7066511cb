"""The long way: every step run of a workflow run read, brought in line with its JobRun,
and settled as ``dag.settle`` says (which start, which are skipped, where the run stands).

For anything but steps that simply ended well: a failure that blocks, a
cancel, a replay, a redefinition. ``parents_left`` is counted anew.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django_strait.models import StepRunStatus, WorkflowRun, WorkflowRunStatus, WorkflowStepRun
from django_strait.rules import dag
from django_strait.storage import rows
from django_strait.storage.workflows.changes import Change, Move
from django_strait.storage.workflows.graph import graph
from django_strait.storage.workflows.starting import start

#: How often a workflow run's ``progressed_at`` is written while it moves.
PROGRESS_EVERY = dt.timedelta(seconds=1)


@dataclass(slots=True)
class StepRun:
    """A step run as the DAG needs it: read as a tuple, no model built (1,000 per advance)."""

    pk: int
    step_id: int
    name: str
    depends_on: list[str]
    lenient: bool
    status: str
    parents_left: int
    run_id: int | None
    run_status: str | None
    run_error_type: str | None

    @property
    def synced(self) -> str:
        """Its status as its JobRun says (a waiting or skipped step has none)."""
        if self.run_id is None:
            return self.status
        return dag.step_status(self.run_status)

    @property
    def ended(self) -> str:
        """How its run ended, as a failed workflow run tells it ("" without a run)."""
        if self.run_id is None:
            return ""
        return (
            f"{self.run_status} ({self.run_error_type})"
            if self.run_error_type
            else f"{self.run_status}"
        )


_STEP_RUN_COLUMNS = (
    "pk", "step_id", "step__name", "step__depends_on", "step__continue_on_failure", "status",
    "parents_left", "run_id", "run__status", "run__error_type",
)  # fmt: skip
_STEP_RUN_STATUSES = frozenset(StepRunStatus.values)


def step_runs(alias: str, wr: WorkflowRun) -> list[StepRun]:
    """Every step run of ``wr``; raise ``rows.SetAside`` naming each that cannot be read or used."""
    found = rows.read(
        WorkflowStepRun.objects.using(alias)
        .filter(workflow_run=wr)
        .order_by()
        .values_list(*_STEP_RUN_COLUMNS)
    )
    read = [StepRun(*t) for t in found.rows]
    table = WorkflowStepRun._meta.db_table
    problems = found.unreadable + [
        rows.Unreadable(table, r.pk, "status", f"is {r.status!r}, not a step run status")
        for r in read
        if r.status not in _STEP_RUN_STATUSES
    ]
    problems += [
        rows.Unreadable(table, r.pk, "step.depends_on", "is not a list of step names")
        for r in read
        if not isinstance(r.depends_on, list) or not all(isinstance(d, str) for d in r.depends_on)
    ]
    if problems:
        raise rows.SetAside(problems)
    return read


def advance_one(move: Move, wr: WorkflowRun) -> None:
    """Settle ``wr`` as ``dag.settle`` says, its step runs and ``parents_left`` written to match."""
    by_name = {r.name: r for r in step_runs(move.db.alias, wr)}
    status = {name: r.synced for name, r in by_name.items()}
    if wr.status not in dag.MOVING:
        _save_steps(move, by_name, dag.stopped(status), wr)
        return
    # A step added by a redefinition after this run began has no step run here: not a parent.
    parents = {n: [p for p in r.depends_on if p in by_name] for n, r in by_name.items()}
    lenient = {name for name, r in by_name.items() if r.lenient}
    new, wf_status = dag.settle(parents, status, lenient)
    _save_steps(move, by_name, new, wr)
    _count_parents_left(move, by_name, dag.parents_left(parents, new, lenient))
    why = ("", "")
    if wf_status == WorkflowRunStatus.FAILED:
        ended = {n: r.ended for n, r in by_name.items() if r.ended}
        why = (dag.STEP_FAILED_ERROR, dag.why_failed(new, lenient, ended))
    set_status(move, wr, wf_status, why)


def _save_steps(
    move: Move, by_name: dict[str, StepRun], new: dict[str, str], wr: WorkflowRun
) -> None:
    """Write the step runs whose status moved, the steps that start with their runs: a few statements."""
    starting = [
        (r.pk, r.step_id)
        for n, r in by_name.items()
        if new[n] == StepRunStatus.STARTED and r.run_id is None
    ]
    marked_by_start = {pk for pk, _ in starting}
    by_status: dict[str, list[int]] = {}
    for name, r in by_name.items():
        if new[name] != r.status and r.pk not in marked_by_start:
            r.status = new[name]
            by_status.setdefault(r.status, []).append(r.pk)
    found = WorkflowStepRun.objects.using(move.db.alias)
    for status, ids in by_status.items():
        found.filter(pk__in=ids).update(status=status)
    if starting:
        start(move, wr, graph(move.db, wr.workflow, (s for _, s in starting)), starting)


def _count_parents_left(move: Move, by_name: dict[str, StepRun], left: dict[str, int]) -> None:
    """Write each waiting step's ``parents_left`` where it is not what the statuses say."""
    by_left: dict[int, list[int]] = {}
    for name, count in left.items():
        if count != by_name[name].parents_left:
            by_left.setdefault(count, []).append(by_name[name].pk)
    found = WorkflowStepRun.objects.using(move.db.alias)
    for count, ids in by_left.items():
        found.filter(pk__in=ids).update(parents_left=count)


def set_status(move: Move, wr: WorkflowRun, status: str, why: tuple[str, str] = ("", "")) -> None:
    """Note the progress, and the run's new status if it moved (a change, in ``move.out``).

    Progress is written at most once per :data:`PROGRESS_EVERY` while the status
    stays: it only has to tell a stall of an hour, and a wide fan-in records
    many batches a second.
    """
    now = move.now
    changed = status != wr.status
    fields = []
    if changed or now - wr.progressed_at >= PROGRESS_EVERY:
        wr.progressed_at = now
        fields.append("progressed_at")
    if changed:
        wr.status = status
        wr.finished_at = None if status == WorkflowRunStatus.RUNNING else now
        wr.error_type, wr.last_error = why
        fields += ["status", "finished_at", "error_type", "last_error"]
    if fields:
        wr.save(using=move.db.alias, update_fields=fields)
    if (
        changed and status != WorkflowRunStatus.RUNNING
    ):  # a resumed run announces nothing until it ends again
        move.out.changes.append(
            Change(wr.pk, wr.workflow.name, status, wr.error_type, wr.last_error)
        )
