"""The short way: steps that simply ended well, their children started, in a few statements.

Each child's ``parents_left`` drops by its parents among them, the children at
0 start: a few statements per record batch however wide the DAG (a 1,000-wide
fan-in does not read its 1,000 step runs per batch). Anything else takes the
long way (``settling``). What counts, and what is due, is ``dag``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_strait.models import StepRunStatus, WorkflowRun, WorkflowRunStatus, WorkflowStepRun
from django_strait.rules import dag
from django_strait.storage.workflows.changes import Move
from django_strait.storage.workflows.graph import Step, graph
from django_strait.storage.workflows.settling import advance_one, set_status
from django_strait.storage.workflows.sql import Ids
from django_strait.storage.workflows.starting import start


@dataclass(frozen=True, slots=True)
class Moved:
    """A step run whose JobRun was just moved."""

    pk: int
    workflow_run_id: int
    step_id: int
    #: The step run's status; None when not read (a worker's record: ``started``
    #: then, which the UPDATE that moves it checks).
    status: str | None
    run_status: str | None


_SET_STATUS = "UPDATE {steprun} SET status = %s WHERE status = %s AND id {in}"
_WAITING_CHILDREN = """
SELECT id, step_id, parents_left FROM {steprun}
WHERE workflow_run_id = %s AND status = %s AND step_id {in}
"""
_WAITING = (
    "SELECT id, step_id, parents_left FROM {steprun} WHERE workflow_run_id = %s AND status = %s"
)
_SET_LEFT = "UPDATE {steprun} SET parents_left = %s WHERE id {in}"
#: Beyond this many children, read every waiting step of the run rather than list them.
_LISTED_CHILDREN = 50


def step_forward(move: Move, wr: WorkflowRun, moved: list[Moved]) -> None:
    """Move ``wr`` on in a few statements, however wide it is, when its steps simply ended well.

    Ended well: started, and now completed (or failed with continue_on_failure).
    Each child's ``parents_left`` drops by its parents among them; a waiting
    child at 0 starts; the run completes when no step is left to end. Anything
    else (a step that blocks, a cancel, a replay, a run not running) takes
    :func:`advance_one`, which reads every step and counts ``parents_left``
    anew, as does a redefinition that changes the DAG (``define_workflow``).
    """
    if wr.status != WorkflowRunStatus.RUNNING:
        return advance_one(move, wr)
    steps = graph(move.db, wr.workflow, (m.step_id for m in moved))
    ended: dict[str, list[int]] = {}
    ended_steps: list[int] = []
    for m in moved:
        new = dag.step_status(m.run_status)
        if new == (m.status or StepRunStatus.STARTED):
            continue  # a retry scheduled, a hold: progress, nothing to release
        if m.status not in (StepRunStatus.STARTED, None) or not dag.ended_well(
            new, steps[m.step_id].lenient
        ):
            return advance_one(move, wr)
        ended.setdefault(new, []).append(m.pk)
        ended_steps.append(m.step_id)
    if not ended:
        return set_status(move, wr, wr.status)
    for status, ids in ended.items():
        if move.db.update(_SET_STATUS, [status, StepRunStatus.STARTED, Ids(ids)]) < len(ids):
            return advance_one(move, wr)  # a step run was not started after all
    due, still_waiting = _release(move, wr, steps, ended_steps)
    if due:
        start(move, wr, steps, due)
    elif not still_waiting and not _unfinished(move, wr, steps):
        return set_status(move, wr, WorkflowRunStatus.COMPLETED)
    return set_status(move, wr, wr.status)


def _release(
    move: Move, wr: WorkflowRun, steps: dict[int, Step], ended: list[int]
) -> tuple[list[tuple[int, int]], bool]:
    """Count the steps ``ended`` off their waiting children; return the children due, and whether a step still waits.

    Read, then written, under the workflow run's lock: a due child's count is
    not written (it starts), a 1,000-wide fan-out is one SELECT and no UPDATE.
    """
    drop = dag.released({s: steps[s].children for s in ended}, ended)
    if not drop:
        return [], False
    if len(drop) > _LISTED_CHILDREN:
        waiting = move.db.rows(_WAITING, [wr.pk, StepRunStatus.WAITING])
    else:
        waiting = move.db.rows(_WAITING_CHILDREN, [wr.pk, StepRunStatus.WAITING, Ids(list(drop))])
    due, by_left = dag.counted_down(waiting, drop)
    for left, ids in by_left.items():
        move.db.rows(_SET_LEFT, [left, Ids(ids)])
    return due, len(waiting) > len(due)


def _unfinished(move: Move, wr: WorkflowRun, steps: dict[int, Step]) -> bool:
    """Whether a step of ``wr`` has not ended well: one EXISTS."""
    found = WorkflowStepRun.objects.using(move.db.alias).filter(workflow_run=wr).order_by()
    found = found.exclude(status=StepRunStatus.COMPLETED)
    lenient = [s for s, step in steps.items() if step.lenient]
    if lenient:
        found = found.exclude(status=StepRunStatus.FAILED, step_id__in=lenient)
    return found.exists()
