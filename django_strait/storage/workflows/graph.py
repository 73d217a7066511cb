"""A workflow's definition as the DAG needs it, cached; and the members a claimed step starts with."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django_strait.models import JobRun, Workflow, WorkflowStep
from django_strait.rules.retry import STEP_FIELDS, PolicyError, step_partial
from django_strait.storage import rows
from django_strait.storage.values import json_column
from django_strait.storage.workflows.sql import Db, Ids, as_datetime


@dataclass(frozen=True, slots=True)
class Step:
    """A step as the DAG needs it: its parents and children by step id, what its run is made of."""

    name: str
    parents: tuple[int, ...]  # in depends_on order
    children: tuple[int, ...]
    lenient: bool
    job_id: int
    max_attempts: int | None
    retry: dict[str, Any]
    #: The step's own run (``WorkflowStep.run_template``), or None.
    template: dict[str, Any] | None = None


#: (alias, workflow id) -> (the workflow's updated_at, its steps by id). define_workflow
#: always saves the workflow row, so a redefinition is a new updated_at.
GRAPHS: dict[tuple[str, int], tuple[dt.datetime, dict[int, Step]]] = {}
GRAPHS_KEPT = 256


def graph(db: Db, workflow: Workflow, step_ids: Iterable[int] = ()) -> dict[int, Step]:
    """The workflow's steps by id, read once per definition (a 1,000-wide one is 1,000 rows)."""
    key = (db.alias, workflow.pk)
    cached = GRAPHS.get(key)
    if cached and cached[0] == workflow.updated_at and all(s in cached[1] for s in step_ids):
        return cached[1]
    specs = _step_specs(db.alias, workflow)
    ids = {name: pk for pk, name, *_ in specs}
    parents = {pk: tuple(ids[p] for p in deps if p in ids) for pk, _, deps, *_ in specs}
    children: dict[int, list[int]] = {pk: [] for pk in parents}
    for pk, mine in parents.items():
        for parent in mine:
            children[parent].append(pk)
    steps = {
        pk: Step(
            name,
            parents[pk],
            tuple(children[pk]),
            lenient,
            job_id,
            max_attempts,
            dict(zip(STEP_FIELDS.values(), retry, strict=True)),
            template,
        )
        for pk, name, _, lenient, job_id, max_attempts, template, *retry in specs
    }
    if len(GRAPHS) >= GRAPHS_KEPT:
        GRAPHS.clear()
    GRAPHS[key] = (workflow.updated_at, steps)
    return steps


_SPEC_FIELDS = (
    "pk", "name", "depends_on", "continue_on_failure", "job_id", "max_attempts", "run_template",
)  # fmt: skip


def _step_specs(alias: str, workflow: Workflow) -> list[tuple]:
    """The workflow's steps as (pk, name, depends_on, lenient, job id, max_attempts, template,
    *retry);
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
        if step.run_template is not None and not isinstance(step.run_template, dict):
            problems.append(rows.Unreadable(table, step.pk, "run_template", "is not an object"))
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


def members(
    db: Db, step_run_ids: list[int]
) -> dict[int, tuple[tuple[int, int], dict[str, Any] | None, str]]:
    """Each step run's (workflow run id, step id), its ``{"run_id", "step", "parents"}``
    (parents being its parents' results by step name), and why that cannot be made ("").

    Two statements for a whole claimed batch, whatever its size: the step runs with
    their workflows' ``updated_at`` (which says whether the cached definition, see
    :func:`graph`, still holds), then the parents' results. A step whose workflow's
    steps or parents' results cannot be read gets the reason instead (its run fails
    with it, and the other steps of the batch start).
    """
    rows_ = db.rows(_MEMBERS, [Ids(step_run_ids)])
    if not rows_:
        return {}
    steps_of: dict[tuple[int, Any], set[int]] = {}
    for _, _, step_id, workflow_id, updated_at in rows_:
        steps_of.setdefault((workflow_id, updated_at), set()).add(step_id)
    graphs: dict[int, dict[int, Step]] = {}
    broken: dict[int, str] = {}
    for (workflow_id, at), steps in steps_of.items():
        try:
            graphs[workflow_id] = graph(db, _workflow(workflow_id, at), steps)
        except rows.SetAside as exc:
            broken[workflow_id] = f"its workflow cannot be used: {exc}"
    results, unreadable = _parent_results(db, rows_, graphs)
    out: dict[int, tuple[tuple[int, int], dict[str, Any] | None, str]] = {}
    for pk, wr, step_id, workflow_id, _ in rows_:
        steps_of_run = graphs.get(workflow_id)
        if steps_of_run is None:
            out[pk] = ((wr, step_id), None, broken[workflow_id])
            continue
        parents = steps_of_run[step_id].parents
        bad = [unreadable[(wr, p)] for p in parents if (wr, p) in unreadable]
        member = {
            "run_id": wr,
            "step": steps_of_run[step_id].name,
            "parents": {steps_of_run[p].name: results.get((wr, p)) for p in parents},
        }
        out[pk] = ((wr, step_id), None if bad else member, "; ".join(bad))
    return out


def _parent_results(
    db: Db, rows_: list[tuple], graphs: dict[int, dict[int, Step]]
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], str]]:
    """The results of the steps' parents by (workflow run id, step id), and why those
    that cannot be read cannot."""
    results: dict[tuple[int, int], Any] = {}
    unreadable: dict[tuple[int, int], str] = {}
    runs = list({wr for _, wr, _, w, _ in rows_ if w in graphs})
    wanted = list({p for _, _, s, w, _ in rows_ if w in graphs for p in graphs[w][s].parents})
    if not wanted:
        return results, unreadable
    for wr, step_id, run_id, result in db.rows(_PARENT_RESULTS, [Ids(runs), Ids(wanted)]):
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
        return Workflow(pk=workflow_id, updated_at=as_datetime(updated_at))
    except (ValueError, TypeError, AttributeError) as exc:
        problem = f"cannot be read ({updated_at!r}: {exc})"
        raise rows.SetAside(
            [rows.Unreadable(Workflow._meta.db_table, workflow_id, "updated_at", problem)]
        ) from exc
