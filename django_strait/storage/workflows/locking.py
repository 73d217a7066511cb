"""Locking the workflow runs a move concerns, and failing those a row makes impossible to move."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import connections

from django_strait.models import Workflow, WorkflowRun, WorkflowRunStatus
from django_strait.rules import dag
from django_strait.storage import rows
from django_strait.storage.workflows.changes import Change, Move
from django_strait.storage.workflows.sql import Ids, as_datetime

logger = logging.getLogger(__name__)


def lock(move: Move, wr_ids: Sequence[int]) -> list[WorkflowRun]:
    """Lock workflow runs in id order (their workflow rows stay free for define_workflow);
    return them. Those whose row cannot be read are failed (``move.out``) and left out.

    Raw SQL: it runs once per record batch of steps, and the ORM's select_related
    query cost more to build than to run. Each run's workflow carries its name and
    ``updated_at`` (what the DAG reads); any other field loads when read.
    """
    alias = move.db.alias
    connection = connections[alias]
    sql, params = move.db.statements.statement(connection, _LOCK, [Ids(wr_ids)])
    if connection.features.has_select_for_update_of:
        sql += " FOR UPDATE OF wr"
    try:
        runs = list(WorkflowRun.objects.using(alias).raw(sql, params))
    except Exception as exc:
        if not rows.one_rows_doing(alias, exc):
            raise
        return _lock_guarded(move, wr_ids)
    for wr in runs:
        wr.workflow = Workflow.from_db(
            alias,
            ["id", "name", "updated_at"],
            [wr.workflow_id, wr.workflow_name, as_datetime(wr.workflow_updated_at)],
        )
    return runs


_LOCK = """
SELECT wr.*, w.name AS workflow_name, w.updated_at AS workflow_updated_at
FROM {workflowrun} wr JOIN {workflow} w ON w.id = wr.workflow_id
WHERE wr.id {in} ORDER BY wr.id
"""


def _lock_guarded(move: Move, wr_ids: Sequence[int]) -> list[WorkflowRun]:
    """:func:`lock` when a row cannot be read: the runs that can, and the others failed."""
    alias = move.db.alias
    of = {"of": ("self",)} if connections[alias].features.has_select_for_update_of else {}
    locked = (
        WorkflowRun.objects.using(alias)
        .select_for_update(**of)
        .filter(pk__in=list(wr_ids))
        .select_related("workflow")
        .only(*_LOCKED_FIELDS)
        .order_by("pk")
    )
    found = rows.read(locked)
    names = dict(
        WorkflowRun.objects.using(alias)
        .filter(pk__in=[p.pk for p in found.unreadable])
        .values_list("pk", "workflow__name")
    )
    by_run: dict[int, list[rows.Unreadable]] = {}
    for problem in found.unreadable:
        by_run.setdefault(problem.pk, []).append(problem)
    for pk, problems in sorted(by_run.items()):
        fail_unreadable(move, pk, names.get(pk, ""), problems)
    return found.rows


#: Each workflow run's fields a move reads (the rest load if read).
_LOCKED_FIELDS = (
    "workflow__name", "workflow__updated_at", "payload", "status", "error_type", "last_error",
    "created_at", "finished_at", "progressed_at", "idempotency_key",
)  # fmt: skip


def fail_unreadable(move: Move, wr_id: int, name: str, problems: Sequence[rows.Unreadable]) -> None:
    """Fail a workflow run that a row of its own makes impossible to move, saying which.

    The guarded UPDATE writes every column it reads, so an unreadable ``progressed_at``
    or ``status`` is replaced; the run can be replayed once the row is fixed.
    """
    error = "; ".join(map(str, problems))[:2000]
    now = move.now
    moved = (
        WorkflowRun.objects.using(move.db.alias)
        .filter(pk=wr_id)
        .exclude(status__in=(WorkflowRunStatus.COMPLETED, WorkflowRunStatus.CANCELED))
        .update(
            status=WorkflowRunStatus.FAILED,
            finished_at=now,
            progressed_at=now,
            error_type=dag.INVALID_ERROR,
            last_error=error,
        )  # fmt: skip
    )
    if not moved:
        return
    logger.error("workflow run %s failed: %s", wr_id, error, extra={"workflow_run_id": wr_id})
    move.out.changes.append(Change(wr_id, name, WorkflowRunStatus.FAILED, dag.INVALID_ERROR, error))
