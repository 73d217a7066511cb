"""Moving workflow runs on, in the transaction that moved their steps' runs.

Three ways in: :func:`advance` after runs moved by any means (cancel, discard,
replay, the reaper's rescue), :func:`advance_recorded` after a worker's record
(its steps known from their start), :func:`advance_workflow_runs` for whole
runs (a trigger, a redefinition). Each locks the workflow runs concerned (in
id order, so two recorders of one fan-in never both miss the other's parent)
and moves each on the short way (``forward``) or the long way (``settling``).
What changed is returned, for transitions to announce; the webhook deliveries
it owes are written here, in the same transaction (the outbox).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from django_strait.models import WorkflowRun, WorkflowRunStatus
from django_strait.storage import rows, webhooks
from django_strait.storage.workflows.changes import Advanced, Move
from django_strait.storage.workflows.forward import Moved, step_forward
from django_strait.storage.workflows.locking import fail_unreadable, lock
from django_strait.storage.workflows.settling import advance_one
from django_strait.storage.workflows.sql import Ids

_MOVED = """
SELECT s.id, s.workflow_run_id, s.step_id, s.status, r.status
FROM {steprun} s JOIN {jobrun} r ON r.id = s.run_id WHERE s.run_id {in}
"""


def advance(move: Move, run_ids: Iterable[int]) -> Advanced:
    """Move on the workflow runs whose step runs' JobRuns are ``run_ids``; return what changed."""
    run_ids = list(run_ids)
    if not run_ids:
        return move.out
    with transaction.atomic(using=move.db.alias, savepoint=False):
        # Read before the lock: only the caller moves these runs, so their step
        # runs' rows cannot change under it.
        moved: dict[int, list[Moved]] = {}
        for row in move.db.rows(_MOVED, [Ids(run_ids)]):
            moved.setdefault(row[1], []).append(Moved(*row))
        if moved:  # else plain runs: one query
            _move_locked(move, moved)
    return move.out


def advance_recorded(move: Move, ended: Iterable[tuple[int, int, int, str]]) -> Advanced:
    """Move on the workflow runs of steps whose runs a worker just recorded; return what changed.

    ``ended`` holds (step run id, workflow run id, step id, the run's new status),
    as the step's start loaded them: unlike :func:`advance`, nothing is read before
    the lock. Each step run is moved only if still ``started`` (checked by its
    UPDATE); one that is not sends its workflow run the long way.
    """
    moved: dict[int, list[Moved]] = {}
    for pk, wr_id, step_id, run_status in ended:
        moved.setdefault(wr_id, []).append(Moved(pk, wr_id, step_id, None, run_status))
    if moved:
        with transaction.atomic(using=move.db.alias, savepoint=False):
            _move_locked(move, moved)
    return move.out


def advance_workflow_runs(move: Move, wr_ids: Iterable[int]) -> Advanced:
    """Lock the workflow runs ``wr_ids`` and move each on, reading all its steps."""
    with transaction.atomic(using=move.db.alias, savepoint=False):
        before = len(move.out.changes)
        for wr in lock(move, sorted(wr_ids)):
            _guarded(move, wr)
        _owe_webhooks(move, before)
    return move.out


def _move_locked(move: Move, moved: dict[int, list[Moved]]) -> None:
    before = len(move.out.changes)
    for wr in lock(move, sorted(moved)):
        _guarded(move, wr, moved[wr.pk])
    _owe_webhooks(move, before)


def _guarded(move: Move, wr: WorkflowRun, moved: list[Moved] | None = None) -> None:
    """Move ``wr`` on (the short way with ``moved``, else the long way); fail it if a row
    of its own that the move needs cannot be read (its steps, its step runs).

    No savepoint: a move reads what it needs before it writes, and what it wrote before
    a later read failed (steps that did end) stays true of the failed run.
    """
    try:
        if wr.status not in _RUN_STATUSES:
            problem = f"is {wr.status!r}, not a workflow run status"
            raise rows.SetAside(
                [rows.Unreadable(WorkflowRun._meta.db_table, wr.pk, "status", problem)]
            )
        if moved:
            step_forward(move, wr, moved)
        else:
            advance_one(move, wr)
    except rows.SetAside as exc:
        fail_unreadable(move, wr.pk, wr.workflow.name, exc.problems)


_RUN_STATUSES = frozenset(WorkflowRunStatus.values)


def _owe_webhooks(move: Move, before: int) -> None:
    """Write the webhook deliveries owed by the changes made since ``before``, in the move's transaction."""
    changes = move.out.changes[before:]
    if changes:
        webhooks.notify_workflows(move.db.alias, changes, move.now)
