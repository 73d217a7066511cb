"""Starting steps: their JobRuns queued, their step runs marked started, in a few statements."""

from __future__ import annotations

from django.db import connections

from django_strait.models import JobRun, StepRunStatus, WorkflowRun
from django_strait.rules.retry import step_partial
from django_strait.rules.states import LIVE
from django_strait.storage import columns
from django_strait.storage.sql import listed
from django_strait.storage.workflows.changes import Move
from django_strait.storage.workflows.graph import Step
from django_strait.storage.workflows.sql import Db, Ids


def start(
    move: Move, wr: WorkflowRun, steps: dict[int, Step], starting: list[tuple[int, int]]
) -> None:
    """Queue the JobRuns of the step runs ``starting`` (pk, step id) and mark them started.

    One INSERT ... SELECT per kind of step (job, max_attempts, retry fields) and
    one UPDATE: a 1,000-wide fan-out builds no model in Python. The step runs
    go in ``move.out.started`` (their runs were enqueued: transitions say so).
    """
    kinds: dict[tuple, list[int]] = {}
    # In step run order: steps with runs of their own are inserted one by one, and their
    # ids then order them as the workflow lists them (a batch's jobs are fetched so).
    for pk, step_id in sorted(starting):
        step = steps[step_id]
        if step.template is not None:  # a run of its own: one INSERT for this step run
            _insert_own(move, step, pk)
            continue
        kind = (step.job_id, step.max_attempts, tuple(sorted(step.retry.items())))
        kinds.setdefault(kind, []).append(pk)
    for (job_id, max_attempts, retry), pks in kinds.items():
        partial = step_partial(dict(retry))
        template = JobRun(
            payload=wr.payload, available_at=move.now, created_at=move.now,
            max_attempts=max_attempts, retry_overrides=partial or None,
        )  # fmt: skip
        _insert_runs(move.db, job_id, pks, template)
    pks = [pk for pk, _ in starting]
    for at in range(0, len(pks), _INSERT_CHUNK):
        move.db.rows(STARTED, [StepRunStatus.STARTED, Ids(pks[at : at + _INSERT_CHUNK])])
    move.out.started += pks


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
STARTED = f"""
UPDATE {{steprun}} SET status = %s,
run_id = (
    SELECT r.id FROM {{jobrun}} r WHERE r.workflow_step_run_id = {{steprun}}.id
    AND r.status IN ({listed(LIVE)})
    ORDER BY r.id DESC LIMIT 1
)
WHERE id {{in}}
"""


#: The columns of a step's own run (``WorkflowStep.run_template``) taken from it.
OWN_COLUMNS = ("payload", "queue", "priority", "ojs", "ojs_id", "max_attempts", "retry_overrides")


def _insert_own(move: Move, step: Step, step_run_id: int) -> None:
    """INSERT the run of a step that says what its run is (an OJS workflow's step): its
    payload, queue, priority, envelope, OJS id (also its idempotency key) and retry."""
    own = {k: step.template[k] for k in OWN_COLUMNS if step.template.get(k) is not None}
    key = str(own["ojs_id"]) if own.get("ojs_id") else None
    template = JobRun(
        available_at=move.now, created_at=move.now, idempotency_key=key,
        **{"payload": {}, **own},
    )  # fmt: skip
    _insert_runs(move.db, step.job_id, [step_run_id], template, own=True)


def _insert_runs(
    db: Db, job_id: int, step_run_ids: list[int], template: JobRun, *, own: bool = False
) -> None:
    """INSERT the runs of ``step_run_ids`` for job ``job_id``: its queue and priority (or,
    ``own``, the template's), ``template``'s columns."""
    kept = (
        ("job", "workflow_step_run") if own else ("job", "priority", "queue", "workflow_step_run")
    )
    constant = columns.prepared(template, db.alias, kept)
    quoted = ", ".join(map(connections[db.alias].ops.quote_name, constant))
    from_job = "" if own else "j.priority, j.queue, "
    insert = (
        f"INSERT INTO {{jobrun}} (job_id, {'' if own else 'priority, queue, '}"
        f"workflow_step_run_id, {quoted}) "
        f"SELECT j.id, {from_job}s.id, {', '.join(['%s'] * len(constant))} "
        "FROM {job} j, {steprun} s WHERE j.id = %s AND s.id {in}"
    )
    for at in range(0, len(step_run_ids), _INSERT_CHUNK):
        chunk = step_run_ids[at : at + _INSERT_CHUNK]
        db.rows(insert, [*constant.values(), job_id, Ids(chunk)])
