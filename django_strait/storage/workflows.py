"""Workflows (on every backend): the DAG moves on in the transaction that moved a step's run.

One function, :func:`advance`, serves every path that changes a step's run
(the worker's record, cancel, discard, replay, the reaper's rescue). It locks
the workflow runs concerned (in id order, so two recorders of one fan-in never
both miss the other's parent), then takes one of two ways:

- the short way, for steps that simply ended well: each child's
  ``parents_left`` drops by its parents among them, the children at 0 start.
  A few statements per record batch however wide the DAG: a 1,000-wide fan-in
  does not read its 1,000 step runs per batch.
- the long way, for anything else (a failure that blocks, a cancel, a replay):
  every step run is read, brought in line with its JobRun, and
  :func:`django_strait.dag.settle` says which steps start, which are skipped
  and where the workflow run stands; ``parents_left`` is counted anew.

Nothing polls; a child's JobRun is inserted in the same transaction as its
last parent's result. tests/conformance/test_workflows.py checks, for random
DAGs and batchings, that both ways agree with ``dag.settle``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import dateparse, timezone

from django_strait import dag, rows, signals
from django_strait.models import (
    Job,
    JobRun,
    StepRunStatus,
    Workflow,
    WorkflowRun,
    WorkflowRunStatus,
    WorkflowStep,
    WorkflowStepRun,
)
from django_strait.retry import STEP_FIELDS, PolicyError, step_partial
from django_strait.sql import listed
from django_strait.states import LIVE, RunStatus
from django_strait.storage import columns, webhooks
from django_strait.storage.values import json_column

logger = logging.getLogger(__name__)

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
#: How often a workflow run's ``progressed_at`` is written while it moves.
PROGRESS_EVERY = dt.timedelta(seconds=1)


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
    run_ids = list(run_ids)
    if not run_ids:
        return []
    with transaction.atomic(using=alias, savepoint=False):
        # Read before the lock: only the caller moves these runs, so their step
        # runs' rows cannot change under it.
        moved: dict[int, list[_Moved]] = {}
        for row in _sql(alias, _MOVED, [Ids(run_ids)]):
            moved.setdefault(row[1], []).append(_Moved(*row))
        if not moved:
            return []  # plain runs: one query
        locked, changes = _lock(alias, sorted(moved), now)
        changes += [c for wr in locked for c in _guarded(alias, wr, now, moved[wr.pk])]
        _announce(alias, changes, now)
    return changes


def advance_recorded(
    alias: str, ended: Iterable[tuple[int, int, int, str]], now: dt.datetime
) -> list[Change]:
    """Move on the workflow runs of steps whose runs a worker just recorded; return their changes.

    ``ended`` holds (step run id, workflow run id, step id, the run's new status),
    as the step's start loaded them: unlike :func:`advance`, nothing is read before
    the lock. Each step run is moved only if still ``started`` (checked by its
    UPDATE); one that is not sends its workflow run the long way.
    """
    moved: dict[int, list[_Moved]] = {}
    for pk, wr_id, step_id, run_status in ended:
        moved.setdefault(wr_id, []).append(_Moved(pk, wr_id, step_id, None, run_status))
    if not moved:
        return []
    with transaction.atomic(using=alias, savepoint=False):
        locked, changes = _lock(alias, sorted(moved), now)
        changes += [c for wr in locked for c in _guarded(alias, wr, now, moved[wr.pk])]
        _announce(alias, changes, now)
    return changes


def advance_workflow_runs(alias: str, wr_ids: Iterable[int], now: dt.datetime) -> list[Change]:
    """Lock the workflow runs ``wr_ids`` and move each on, reading all its steps; announce changes after commit."""
    with transaction.atomic(using=alias, savepoint=False):
        locked, changes = _lock(alias, sorted(wr_ids), now)
        changes += [c for wr in locked for c in _guarded(alias, wr, now)]
        _announce(alias, changes, now)
    return changes


def _guarded(
    alias: str, wr: WorkflowRun, now: dt.datetime, moved: list[_Moved] | None = None
) -> list[Change]:
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
        return _step_forward(alias, wr, moved, now) if moved else _advance_one(alias, wr, now)
    except rows.SetAside as exc:
        return _fail_unreadable(alias, wr.pk, wr.workflow.name, exc.problems, now)


_RUN_STATUSES = frozenset(WorkflowRunStatus.values)


def _lock(
    alias: str, wr_ids: Sequence[int], now: dt.datetime
) -> tuple[list[WorkflowRun], list[Change]]:
    """Lock workflow runs in id order (their workflow rows stay free for define_workflow);
    return them, and the changes of those failed because their row cannot be read.

    Raw SQL: it runs once per record batch of steps, and the ORM's select_related
    query cost more to build than to run. Each run's workflow carries its name and
    ``updated_at`` (what the DAG reads); any other field loads when read.
    """
    connection = connections[alias]
    sql, params = _statement(connection, _LOCK, [Ids(wr_ids)])
    if connection.features.has_select_for_update_of:
        sql += " FOR UPDATE OF wr"
    try:
        runs = list(WorkflowRun.objects.using(alias).raw(sql, params))
    except Exception as exc:
        if not rows.one_rows_doing(alias, exc):
            raise
        return _lock_guarded(alias, wr_ids, now)
    for wr in runs:
        wr.workflow = Workflow.from_db(
            alias,
            ["id", "name", "updated_at"],
            [wr.workflow_id, wr.workflow_name, _as_datetime(wr.workflow_updated_at)],
        )
    return runs, []


def _lock_guarded(
    alias: str, wr_ids: Sequence[int], now: dt.datetime
) -> tuple[list[WorkflowRun], list[Change]]:
    """:func:`_lock` when a row cannot be read: the runs that can, and the others failed."""
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
    changes = [
        c
        for pk, problems in sorted(by_run.items())
        for c in _fail_unreadable(alias, pk, names.get(pk, ""), problems, now)
    ]
    return found.rows, changes


#: Each workflow run's fields a move reads (the rest load if read).
_LOCKED_FIELDS = (
    "workflow__name", "workflow__updated_at", "payload", "status", "error_type", "last_error",
    "created_at", "finished_at", "progressed_at", "idempotency_key",
)  # fmt: skip
#: The error type of a workflow run failed because a row it needs cannot be read.
INVALID_ERROR = "workflow.invalid"


def _fail_unreadable(
    alias: str, wr_id: int, name: str, problems: Sequence[rows.Unreadable], now: dt.datetime
) -> list[Change]:
    """Fail a workflow run that a row of its own makes impossible to move, saying which.

    The guarded UPDATE writes every column it reads, so an unreadable ``progressed_at``
    or ``status`` is replaced; the run can be replayed once the row is fixed.
    """
    error = "; ".join(map(str, problems))[:2000]
    moved = (
        WorkflowRun.objects.using(alias)
        .filter(pk=wr_id)
        .exclude(status__in=(WorkflowRunStatus.COMPLETED, WorkflowRunStatus.CANCELED))
        .update(
            status=WorkflowRunStatus.FAILED,
            finished_at=now,
            progressed_at=now,
            error_type=INVALID_ERROR,
            last_error=error,
        )  # fmt: skip
    )
    if not moved:
        return []
    logger.error("workflow run %s failed: %s", wr_id, error, extra={"workflow_run_id": wr_id})
    return [Change(wr_id, name, WorkflowRunStatus.FAILED, INVALID_ERROR, error)]


_LOCK = """
SELECT wr.*, w.name AS workflow_name, w.updated_at AS workflow_updated_at
FROM {workflowrun} wr JOIN {workflow} w ON w.id = wr.workflow_id
WHERE wr.id {in} ORDER BY wr.id
"""


def _announce(alias: str, changes: list[Change], now: dt.datetime) -> None:
    """Write the webhook deliveries the changes owe (same transaction); signal them after commit."""
    if changes:
        webhooks.notify_workflows(alias, changes, now)
        transaction.on_commit(lambda: signals.send_workflow_changes(changes), using=alias)


@dataclass(frozen=True, slots=True)
class Ids:
    """Ids for one ``{in}`` of a statement: one array parameter on PostgreSQL, ``IN (%s, ...)`` elsewhere.

    One parameter keeps a batch's statement the same text whatever its size, so
    psycopg converts it once (its cache skips statements of over 50 parameters,
    and a 100-id batch spent more time being split than being run).
    """

    values: Sequence[int]


def _sql(alias: str, template: str, params: Sequence) -> list[tuple]:
    """Run ``template`` (tables as ``{steprun}``, ``{jobrun}``, ``{job}``, ``{step}``,
    ``{workflow}``, ``{workflowrun}``; each ``{in}`` filled by the next :class:`Ids` of ``params``);
    return its rows.

    The hot statements of a wide DAG, written once for every backend: the ORM
    would build each anew per record batch, which costs more than the statement.
    """
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(*_statement(connection, template, params))
        return cursor.fetchall() if cursor.description else []


def _update(alias: str, template: str, params: Sequence) -> int:
    """Run the UPDATE ``template`` as :func:`_sql` does; return how many rows it changed."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(*_statement(connection, template, params))
        return cursor.rowcount


_ANY = "= ANY(%s::bigint[])"
#: (vendor, template) -> the template with its tables named (and, on PostgreSQL, its lists).
_RENDERED: dict[tuple[str, str], str] = {}


def _statement(connection: Any, template: str, params: Sequence) -> tuple[str, list]:
    arrays = connection.vendor == "postgresql"
    key = (connection.vendor, template)
    text = _RENDERED.get(key)
    if text is None:
        quote = connection.ops.quote_name
        text = template.format(
            steprun=quote(WorkflowStepRun._meta.db_table),
            jobrun=quote(JobRun._meta.db_table),
            job=quote(Job._meta.db_table),
            step=quote(WorkflowStep._meta.db_table),
            workflow=quote(Workflow._meta.db_table),
            workflowrun=quote(WorkflowRun._meta.db_table),
            **{"in": _ANY if arrays else "{in}"},
        )
        _RENDERED[key] = text
    flat: list = []
    lists: list[int] = []
    for param in params:
        if not isinstance(param, Ids):
            flat.append(param)
        elif arrays:
            flat.append("{" + ",".join(map(str, map(int, param.values))) + "}")
        else:
            flat += param.values
            lists.append(len(param.values))
    if lists:
        text = text.replace("{in}", "{}").format(*(f"IN ({', '.join(['%s'] * n)})" for n in lists))
    return text, flat


# -- the definition, cached --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Step:
    """A step as the DAG needs it: its parents and children by step id, what its run is made of."""

    name: str
    parents: tuple[int, ...]  # in depends_on order
    children: tuple[int, ...]
    lenient: bool
    job_id: int
    max_attempts: int | None
    retry: dict[str, Any]


#: (alias, workflow id) -> (the workflow's updated_at, its steps by id). define_workflow
#: always saves the workflow row, so a redefinition is a new updated_at.
_GRAPHS: dict[tuple[str, int], tuple[dt.datetime, dict[int, _Step]]] = {}
_GRAPHS_KEPT = 256


def _graph(alias: str, workflow: Workflow, step_ids: Iterable[int] = ()) -> dict[int, _Step]:
    """The workflow's steps by id, read once per definition (a 1,000-wide one is 1,000 rows)."""
    key = (alias, workflow.pk)
    cached = _GRAPHS.get(key)
    if cached and cached[0] == workflow.updated_at and all(s in cached[1] for s in step_ids):
        return cached[1]
    specs = _step_specs(alias, workflow)
    ids = {name: pk for pk, name, *_ in specs}
    parents = {pk: tuple(ids[p] for p in deps if p in ids) for pk, _, deps, *_ in specs}
    children: dict[int, list[int]] = {pk: [] for pk in parents}
    for pk, mine in parents.items():
        for parent in mine:
            children[parent].append(pk)
    graph = {
        pk: _Step(
            name,
            parents[pk],
            tuple(children[pk]),
            lenient,
            job_id,
            max_attempts,
            dict(zip(STEP_FIELDS.values(), retry, strict=True)),
        )
        for pk, name, _, lenient, job_id, max_attempts, *retry in specs
    }
    if len(_GRAPHS) >= _GRAPHS_KEPT:
        _GRAPHS.clear()
    _GRAPHS[key] = (workflow.updated_at, graph)
    return graph


_SPEC_FIELDS = ("pk", "name", "depends_on", "continue_on_failure", "job_id", "max_attempts")


def _step_specs(alias: str, workflow: Workflow) -> list[tuple]:
    """The workflow's steps as (pk, name, depends_on, lenient, job id, max_attempts, *retry);
    raise ``rows.SetAside`` naming each step row that cannot be read or used."""
    steps = WorkflowStep.objects.using(alias).filter(workflow=workflow).order_by()
    found = rows.read(steps.only(*_SPEC_FIELDS, *STEP_FIELDS.values()))
    problems = list(found.unreadable)
    table = WorkflowStep._meta.db_table
    for step in found.rows:
        deps = step.depends_on
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            problems.append(
                rows.Unreadable(table, step.pk, "depends_on", "is not a list of step names")
            )
        try:
            step_partial({name: getattr(step, name) for name in STEP_FIELDS.values()})
        except PolicyError as exc:
            problems.append(rows.Unreadable(table, step.pk, exc.field.partition(".")[2], str(exc)))
    if problems:
        raise rows.SetAside(problems)
    return [
        (*(getattr(s, f) for f in _SPEC_FIELDS), *(getattr(s, f) for f in STEP_FIELDS.values()))
        for s in found.rows
    ]


# -- the common case: steps that ended well, their children started ----------------


@dataclass(frozen=True, slots=True)
class _Moved:
    """A step run whose JobRun was just moved."""

    pk: int
    workflow_run_id: int
    step_id: int
    #: The step run's status; None when not read (a worker's record: ``started``
    #: then, which the UPDATE that moves it checks).
    status: str | None
    run_status: str | None


_MOVED = """
SELECT s.id, s.workflow_run_id, s.step_id, s.status, r.status
FROM {steprun} s JOIN {jobrun} r ON r.id = s.run_id WHERE s.run_id {in}
"""
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


def _step_forward(
    alias: str, wr: WorkflowRun, moved: list[_Moved], now: dt.datetime
) -> list[Change]:
    """Move ``wr`` on in a few statements, however wide it is, when its steps simply ended well.

    Ended well: started, and now completed (or failed with continue_on_failure).
    Each child's ``parents_left`` drops by its parents among them; a waiting
    child at 0 starts; the run completes when no step is left to end. Anything
    else (a step that blocks, a cancel, a replay, a run not running) takes
    :func:`_advance_one`, which reads every step and counts ``parents_left``
    anew, as does a redefinition that changes the DAG (``define_workflow``).
    """
    if wr.status != WorkflowRunStatus.RUNNING:
        return _advance_one(alias, wr, now)
    graph = _graph(alias, wr.workflow, (m.step_id for m in moved))
    ended: dict[str, list[int]] = {}
    ended_steps: list[int] = []
    for m in moved:
        new = STEP_STATUS.get(m.run_status, StepRunStatus.STARTED)
        if new == (m.status or StepRunStatus.STARTED):
            continue  # a retry scheduled, a hold: progress, nothing to release
        if m.status not in (StepRunStatus.STARTED, None) or not dag.ended_well(
            new, graph[m.step_id].lenient
        ):
            return _advance_one(alias, wr, now)
        ended.setdefault(new, []).append(m.pk)
        ended_steps.append(m.step_id)
    if not ended:
        return _set_status(alias, wr, wr.status, now)
    for status, ids in ended.items():
        if _update(alias, _SET_STATUS, [status, StepRunStatus.STARTED, Ids(ids)]) < len(ids):
            return _advance_one(alias, wr, now)  # a step run was not started after all
    due, still_waiting = _release(alias, wr, graph, ended_steps)
    if due:
        _start(alias, wr, graph, due, now)
    elif not still_waiting and not _unfinished(alias, wr, graph):
        return _set_status(alias, wr, WorkflowRunStatus.COMPLETED, now)
    return _set_status(alias, wr, wr.status, now)


def _release(
    alias: str, wr: WorkflowRun, graph: dict[int, _Step], ended: list[int]
) -> tuple[list[tuple[int, int]], bool]:
    """Count the steps ``ended`` off their waiting children; return the children due, and whether a step still waits.

    Read, then written, under the workflow run's lock: a due child's count is
    not written (it starts), a 1,000-wide fan-out is one SELECT and no UPDATE.
    """
    drop: dict[int, int] = {}
    for step_id in ended:
        for child in graph[step_id].children:
            drop[child] = drop.get(child, 0) + 1
    if not drop:
        return [], False
    if len(drop) > _LISTED_CHILDREN:
        waiting = _sql(alias, _WAITING, [wr.pk, StepRunStatus.WAITING])
    else:
        waiting = _sql(alias, _WAITING_CHILDREN, [wr.pk, StepRunStatus.WAITING, Ids(list(drop))])
    due: list[tuple[int, int]] = []
    by_left: dict[int, list[int]] = {}
    for pk, step_id, left in waiting:
        if step_id not in drop:
            continue
        left -= drop[step_id]
        if left <= 0:
            due.append((pk, step_id))
        else:
            by_left.setdefault(left, []).append(pk)
    for left, ids in by_left.items():
        _sql(alias, _SET_LEFT, [left, Ids(ids)])
    return due, len(waiting) > len(due)


def _unfinished(alias: str, wr: WorkflowRun, graph: dict[int, _Step]) -> bool:
    """Whether a step of ``wr`` has not ended well: one EXISTS."""
    rows = WorkflowStepRun.objects.using(alias).filter(workflow_run=wr).order_by()
    rows = rows.exclude(status=StepRunStatus.COMPLETED)
    lenient = [s for s, step in graph.items() if step.lenient]
    if lenient:
        rows = rows.exclude(status=StepRunStatus.FAILED, step_id__in=lenient)
    return rows.exists()


# -- any change: the whole run read and settled -------------------------------------


@dataclass(slots=True)
class _StepRun:
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
        return STEP_STATUS.get(self.run_status, StepRunStatus.STARTED)


_STEP_RUN_COLUMNS = (
    "pk", "step_id", "step__name", "step__depends_on", "step__continue_on_failure", "status",
    "parents_left", "run_id", "run__status", "run__error_type",
)  # fmt: skip
_STEP_RUN_STATUSES = frozenset(StepRunStatus.values)


def _step_runs(alias: str, wr: WorkflowRun) -> list[_StepRun]:
    """Every step run of ``wr``; raise ``rows.SetAside`` naming each that cannot be read or used."""
    step_runs = WorkflowStepRun.objects.using(alias).filter(workflow_run=wr).order_by()
    found = rows.read(step_runs.values_list(*_STEP_RUN_COLUMNS))
    read = [_StepRun(*t) for t in found.rows]
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


def _advance_one(alias: str, wr: WorkflowRun, now: dt.datetime) -> list[Change]:
    by_name = {r.name: r for r in _step_runs(alias, wr)}
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
    _count_parents_left(alias, by_name, parents, new, lenient)
    why = _why(by_name, new, lenient) if wf_status == WorkflowRunStatus.FAILED else ("", "")
    return _set_status(alias, wr, wf_status, now, why)


def _save_steps(
    alias: str, by_name: dict[str, _StepRun], new: dict[str, str], wr: WorkflowRun, now: dt.datetime
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
    rows = WorkflowStepRun.objects.using(alias)
    for status, ids in by_status.items():
        rows.filter(pk__in=ids).update(status=status)
    if starting:
        _start(alias, wr, _graph(alias, wr.workflow, (s for _, s in starting)), starting, now)


def _count_parents_left(
    alias: str,
    by_name: dict[str, _StepRun],
    parents: dict[str, list[str]],
    new: dict[str, str],
    lenient: set[str],
) -> None:
    """Write each waiting step's ``parents_left`` where it is not what the statuses say."""
    done = {n for n, s in new.items() if dag.ended_well(s, n in lenient)}
    by_left: dict[int, list[int]] = {}
    for name, r in by_name.items():
        left = sum(1 for p in parents[name] if p not in done)
        if new[name] == StepRunStatus.WAITING and left != r.parents_left:
            by_left.setdefault(left, []).append(r.pk)
    rows = WorkflowStepRun.objects.using(alias)
    for left, ids in by_left.items():
        rows.filter(pk__in=ids).update(parents_left=left)


def _start(
    alias: str,
    wr: WorkflowRun,
    graph: dict[int, _Step],
    starting: list[tuple[int, int]],
    now: dt.datetime,
) -> None:
    """Queue the JobRuns of the step runs ``starting`` (pk, step id) and mark them started.

    One INSERT ... SELECT per kind of step (job, max_attempts, retry fields) and
    one UPDATE: a 1,000-wide fan-out builds no model in Python.
    """
    kinds: dict[tuple, list[int]] = {}
    for pk, step_id in starting:
        step = graph[step_id]
        kind = (step.job_id, step.max_attempts, tuple(sorted(step.retry.items())))
        kinds.setdefault(kind, []).append(pk)
    for (job_id, max_attempts, retry), pks in kinds.items():
        partial = step_partial(dict(retry))
        template = JobRun(
            payload=wr.payload, available_at=now, created_at=now,
            max_attempts=max_attempts, retry_overrides=partial or None,
        )  # fmt: skip
        _insert_runs(alias, job_id, pks, template)
    pks = [pk for pk, _ in starting]
    for at in range(0, len(pks), _INSERT_CHUNK):
        _sql(alias, _STARTED, [StepRunStatus.STARTED, Ids(pks[at : at + _INSERT_CHUNK])])
    if signals.listened(signals.run_enqueued):
        created = JobRun.objects.using(alias).filter(workflow_step_run__in=pks)
        by_job: dict[str, list[JobRun]] = {}
        for run in created.select_related("job"):
            by_job.setdefault(run.job.name, []).append(run)
        for job, runs in by_job.items():
            signals.send_enqueued(job, runs, using=alias)


#: Rows per INSERT ... SELECT or UPDATE (SQLite's bound-variable limit is far above it).
_INSERT_CHUNK = 1000
#: Started step runs point at their new runs (one index probe each, by
#: ``strait_run_workflow_step``; the newest, just inserted, should an older run point
#: there too). Raw: the ORM's version bound one parameter per
#: step run, which psycopg quoted one by one for a 10,000-wide fan-out. The new runs
#: are queued, in the live leaf of a partitioned runs table: naming the live statuses
#: keeps the probe there, where it probed every day of history too. Not ``= 'queued'``:
#: that matches the claim's partial index, which PostgreSQL then walked whole for
#: each step run (1 s per 1,000 of a 5,000-wide fan-out).
_STARTED = f"""
UPDATE {{steprun}} SET status = %s,
run_id = (
    SELECT r.id FROM {{jobrun}} r WHERE r.workflow_step_run_id = {{steprun}}.id
    AND r.status IN ({listed(LIVE)})
    ORDER BY r.id DESC LIMIT 1
)
WHERE id {{in}}
"""


def _insert_runs(alias: str, job_id: int, step_run_ids: list[int], template: JobRun) -> None:
    """INSERT the runs of ``step_run_ids`` for job ``job_id``: its queue and priority, ``template``'s columns."""
    constant = columns.prepared(template, alias, ("job", "priority", "queue", "workflow_step_run"))
    quoted = ", ".join(map(connections[alias].ops.quote_name, constant))
    insert = (
        f"INSERT INTO {{jobrun}} (job_id, priority, queue, workflow_step_run_id, {quoted}) "
        f"SELECT j.id, j.priority, j.queue, s.id, {', '.join(['%s'] * len(constant))} "
        "FROM {job} j, {steprun} s WHERE j.id = %s AND s.id {in}"
    )
    for at in range(0, len(step_run_ids), _INSERT_CHUNK):
        chunk = step_run_ids[at : at + _INSERT_CHUNK]
        _sql(alias, insert, [*constant.values(), job_id, Ids(chunk)])


def _set_status(
    alias: str,
    wr: WorkflowRun,
    status: str,
    now: dt.datetime,
    why: tuple[str, str] = ("", ""),
) -> list[Change]:
    """Note the progress, and the run's new status if it moved; return the change to announce.

    Progress is written at most once per :data:`PROGRESS_EVERY` while the status
    stays: it only has to tell a stall of an hour, and a wide fan-in records
    many batches a second.
    """
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
        wr.save(using=alias, update_fields=fields)
    if not changed or status == WorkflowRunStatus.RUNNING:
        return []  # a resumed workflow announces nothing until it ends again
    return [Change(wr.pk, wr.workflow.name, status, wr.error_type, wr.last_error)]


def _why(by_name: dict, new: dict, lenient: set[str]) -> tuple[str, str]:
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
        # Only the columns it writes from: a run whose other columns cannot be read still fails.
        stalled = candidates.select_for_update().order_by("pk").values_list("pk", "workflow__name")
        for pk, name in stalled:
            error = f"no step progressed for {stale_after:g} s while steps wait"
            WorkflowRun.objects.using(alias).filter(pk=pk).update(
                status=WorkflowRunStatus.FAILED, finished_at=now, error_type="workflow.stalled",
                last_error=error,
            )  # fmt: skip
            changes.append(Change(pk, name, "failed", "workflow.stalled", error))
        _announce(alias, changes, now)
    return changes


def members(
    alias: str, step_run_ids: list[int]
) -> dict[int, tuple[tuple[int, int], dict[str, Any] | None, str]]:
    """Each step run's (workflow run id, step id), its ``{"run_id", "step", "parents"}``
    (parents being its parents' results by step name), and why that cannot be made ("").

    Two statements for a whole claimed batch, whatever its size: the step runs with
    their workflows' ``updated_at`` (which says whether the cached definition, see
    :func:`_graph`, still holds), then the parents' results. A step whose workflow's
    steps or parents' results cannot be read gets the reason instead (its run fails
    with it, and the other steps of the batch start).
    """
    rows_ = _sql(alias, _MEMBERS, [Ids(step_run_ids)])
    if not rows_:
        return {}
    steps_of: dict[tuple[int, Any], set[int]] = {}
    for _, _, step_id, workflow_id, updated_at in rows_:
        steps_of.setdefault((workflow_id, updated_at), set()).add(step_id)
    graphs: dict[int, dict[int, _Step]] = {}
    broken: dict[int, str] = {}
    for (workflow_id, at), steps in steps_of.items():
        try:
            graphs[workflow_id] = _graph(alias, _workflow(workflow_id, at), steps)
        except rows.SetAside as exc:
            broken[workflow_id] = f"its workflow cannot be used: {exc}"
    results, unreadable = _parent_results(alias, rows_, graphs)
    out: dict[int, tuple[tuple[int, int], dict[str, Any] | None, str]] = {}
    for pk, wr, step_id, workflow_id, _ in rows_:
        graph = graphs.get(workflow_id)
        if graph is None:
            out[pk] = ((wr, step_id), None, broken[workflow_id])
            continue
        parents = graph[step_id].parents
        bad = [unreadable[(wr, p)] for p in parents if (wr, p) in unreadable]
        member = {
            "run_id": wr,
            "step": graph[step_id].name,
            "parents": {graph[p].name: results.get((wr, p)) for p in parents},
        }
        out[pk] = ((wr, step_id), None if bad else member, "; ".join(bad))
    return out


def _parent_results(
    alias: str, rows_: list[tuple], graphs: dict[int, dict[int, _Step]]
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], str]]:
    """The results of the steps' parents by (workflow run id, step id), and why those
    that cannot be read cannot."""
    results: dict[tuple[int, int], Any] = {}
    unreadable: dict[tuple[int, int], str] = {}
    runs = list({wr for _, wr, _, w, _ in rows_ if w in graphs})
    wanted = list({p for _, _, s, w, _ in rows_ if w in graphs for p in graphs[w][s].parents})
    if not wanted:
        return results, unreadable
    for wr, step_id, run_id, result in _sql(alias, _PARENT_RESULTS, [Ids(runs), Ids(wanted)]):
        try:
            results[(wr, step_id)] = json_column(result)
        except (ValueError, RecursionError) as exc:
            problem = rows.Unreadable(JobRun._meta.db_table, run_id, "result", rows.problem_of(exc))
            rows.say(problem)
            unreadable[(wr, step_id)] = f"a parent step's {problem}"
    return results, unreadable


#: ``updated_at`` as text: it is the same for every row of a batch, and one timestamp
#: parsed per workflow costs less than one per step run.
_MEMBERS = """
SELECT sr.id, sr.workflow_run_id, sr.step_id, w.id, CAST(w.updated_at AS TEXT)
FROM {steprun} sr JOIN {workflowrun} wr ON wr.id = sr.workflow_run_id
JOIN {workflow} w ON w.id = wr.workflow_id
WHERE sr.id {in}
"""
_PARENT_RESULTS = """
SELECT sr.workflow_run_id, sr.step_id, r.id, r.result
FROM {steprun} sr JOIN {jobrun} r ON r.id = sr.run_id
WHERE sr.workflow_run_id {in} AND sr.step_id {in}
"""


def _workflow(workflow_id: int, updated_at: str) -> Workflow:
    """A workflow as :func:`members` reads it (id, ``updated_at`` as text); raise
    ``rows.SetAside`` if the timestamp is none Python can hold ('infinity')."""
    try:
        return Workflow(pk=workflow_id, updated_at=_as_datetime(updated_at))
    except (ValueError, TypeError, AttributeError) as exc:
        problem = f"cannot be read ({updated_at!r}: {exc})"
        raise rows.SetAside(
            [rows.Unreadable(Workflow._meta.db_table, workflow_id, "updated_at", problem)]
        ) from exc


def _as_datetime(value: dt.datetime | str) -> dt.datetime:
    """A timestamp read by raw SQL as text, as the ORM gives it: aware in UTC with
    ``USE_TZ`` (SQLite's text is naive UTC), naive in the connection's zone without."""
    if isinstance(value, str):
        value = dateparse.parse_datetime(value)
        if not settings.USE_TZ:
            return value.replace(tzinfo=None)  # PostgreSQL wrote it in the connection's zone
        if timezone.is_naive(value):
            value = timezone.make_aware(value, dt.UTC)
    return value
