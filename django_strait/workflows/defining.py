"""``define_workflow()``: write a workflow and its steps, refusing a shape that cannot run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from django.db.models import ProtectedError
from django.utils.timezone import now

from django_strait.conf import strait_settings
from django_strait.database import alias, aliases, placed
from django_strait.dispatch.events import all_workflow_events
from django_strait.models import Job, Workflow, WorkflowStep
from django_strait.rules import dag
from django_strait.rules.retry import STEP_FIELDS, PolicyError, resolve, step_partial
from django_strait.services.triggering import TriggerError, resolve_job
from django_strait.storage import backend
from django_strait.transitions.workflows import announce

#: The keys a step may have.
STEP_KEYS = frozenset(
    {"name", "job", "depends_on", "continue_on_failure", "run_template", *STEP_FIELDS.values()}
)


class WorkflowError(ValueError):
    """A workflow definition that cannot be used; ``step`` and ``field`` name where."""

    def __init__(self, step: str, field: str, message: str) -> None:
        super().__init__(f"step {step!r}: {field}: {message}")
        self.step = step
        self.field = field
        self.message = message


def define_workflow(
    name: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    description: str = "",
    webhook_url: str = "",
    webhook_events: Sequence[str] | None = None,
    signing_secret: str = "",
) -> Workflow:
    """Create or update workflow ``name`` with ``steps``; steps no longer named are removed.

    Each step is ``{"name", "job", "depends_on": [...], "continue_on_failure",
    "retry_backoff", "retry_initial_delay_secs", "retry_max_delay_secs",
    "max_attempts", "run_template"}`` (``run_template``: the step's own run, see
    ``WorkflowStep.run_template``; the OJS binding's workflows use it). ``webhook_url`` is notified when a run completes or fails
    (``webhook_events``: both by default), signed with ``signing_secret``. Raises
    WorkflowError naming the step (empty for the workflow's own fields) and the field.
    """
    _check_name(name)
    hook = _check_webhook(webhook_url, webhook_events, signing_secret)
    specs = [_check_shape(i, spec) for i, spec in enumerate(steps)]
    try:
        dag.check([(s["name"], s["depends_on"]) for s in specs])
    except dag.DagError as exc:
        raise WorkflowError(exc.step, exc.field, exc.message) from None
    jobs = {s["name"]: _job(s) for s in specs}
    for spec in specs:
        _check_policy(spec, jobs[spec["name"]])
    return _save(name, description, specs, jobs, hook, _alias_of(name, specs, jobs))


def _check_webhook(url: str, events: Sequence[str] | None, secret: str) -> dict[str, Any]:
    """Return the workflow's webhook fields, checked as ``Workflow.clean`` checks them."""
    hook = {
        "webhook_url": url,
        "webhook_events": list(events) if events is not None else all_workflow_events(),
        "signing_secret": secret,
    }
    try:
        candidate = Workflow(name="x", **hook)
        candidate.clean_fields(exclude=["name", "description"])
        candidate.clean()
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise WorkflowError("", field, " ".join(messages)) from None
    return hook


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise WorkflowError("", "name", f"must be a non-empty slug, got {name!r}")
    try:
        Workflow(name=name).clean_fields(exclude=["description"])
    except ValidationError as exc:
        raise WorkflowError("", "name", "; ".join(exc.messages)) from None


def _check_shape(index: int, spec: Any) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise WorkflowError(f"#{index}", "steps", f"must be a dict, got {type(spec).__name__}")
    step = spec.get("name")
    if not isinstance(step, str) or not step:
        raise WorkflowError(f"#{index}", "name", f"must be a non-empty string, got {step!r}")
    unknown = sorted(set(spec) - STEP_KEYS)
    if unknown:
        raise WorkflowError(
            step, unknown[0], f"unknown key; allowed: {', '.join(sorted(STEP_KEYS))}"
        )
    deps = spec.get("depends_on") or []
    if not isinstance(deps, list | tuple) or not all(isinstance(d, str) for d in deps):
        raise WorkflowError(step, "depends_on", f"must be a list of step names, got {deps!r}")
    cof = spec.get("continue_on_failure", False)
    if not isinstance(cof, bool):
        raise WorkflowError(step, "continue_on_failure", f"must be true or false, got {cof!r}")
    template = spec.get("run_template")
    if template is not None and not isinstance(template, Mapping):
        raise WorkflowError(step, "run_template", f"must be a dict or None, got {template!r}")
    return {**spec, "depends_on": list(deps), "continue_on_failure": cof}


def _job(spec: Mapping[str, Any]) -> Job:
    try:
        return resolve_job(spec.get("job"))  # on its own alias (its queue's)
    except TriggerError as exc:
        raise WorkflowError(spec["name"], "job", exc.message) from None


def _alias_of(name: str, specs: list[dict], jobs: dict[str, Job]) -> str:
    """The alias the workflow lives on: its steps' jobs', which must share one.

    A workflow's runs move in the transactions that record its steps' runs, so
    its rows and its steps' jobs' rows live on one database (docs/operations.md,
    "Where a job lives").
    """
    first = specs[0]["name"] if specs else ""
    where = jobs[first]._state.db if specs else alias()
    for spec in specs:
        other = jobs[spec["name"]]._state.db
        if other != where:
            raise WorkflowError(
                spec["name"], "job",
                f"job {spec['job']!r} lives on database {other!r}, step {first!r}'s job on "
                f"{where!r}; allowed: jobs of one database (a workflow lives with its jobs)",
            )  # fmt: skip
    elsewhere = workflow_alias(name)
    if elsewhere != where and Workflow.objects.using(elsewhere).filter(name=name).exists():
        raise WorkflowError(
            "", "name",
            f"workflow {name!r} lives on database {elsewhere!r}, its steps' jobs now on "
            f"{where!r}; allowed: jobs of {elsewhere!r} (or a new workflow name)",
        )  # fmt: skip
    return where


def workflow_alias(name: str) -> str:
    """The alias workflow ``name`` lives on: each alias is asked, the first first.

    One alias: that one, asking nothing. None has it: the first.
    """
    if not placed():
        return alias()
    for where in aliases():
        try:
            if Workflow.objects.using(where).filter(name=name).exists():
                return where
        except DatabaseError:
            continue  # a database that is away: the workflow may be on another
    return alias()


def _check_policy(spec: Mapping[str, Any], job: Job) -> None:
    """The step's retry fields: each within bounds, and whole once merged with its job's policy."""
    step = spec["name"]
    try:
        WorkflowStep(**_fields(spec)).clean_fields(
            exclude=["workflow", "job", "name", "depends_on", "run_template"]
        )
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise WorkflowError(step, field, "; ".join(messages)) from None
    try:
        resolve(job, step=step_partial(spec), defaults=strait_settings.DEFAULT_RETRY)
    except PolicyError as exc:
        field = exc.field.removeprefix("step.")
        raise WorkflowError(step, field, f"{exc.problem}; must be {exc.allowed}") from None


def _fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": spec["name"],
        "depends_on": spec["depends_on"],
        "continue_on_failure": spec["continue_on_failure"],
        "run_template": spec.get("run_template"),
        **{column: spec.get(column) for column in STEP_FIELDS.values()},
    }


def _save(
    name: str,
    description: str,
    specs: list[dict],
    jobs: dict[str, Job],
    hook: dict[str, Any],
    alias: str,
) -> Workflow:
    storage = backend(alias)
    with transaction.atomic(using=alias):
        workflow, _ = Workflow.objects.using(alias).get_or_create(name=name)
        before = _shape(alias, workflow)
        if description and workflow.description != description:
            workflow.description = description
        for field, value in hook.items():
            setattr(workflow, field, value)
        workflow.save(using=alias)
        for spec in specs:
            WorkflowStep.objects.using(alias).update_or_create(
                workflow=workflow,
                name=spec["name"],
                defaults={**_fields(spec), "job": jobs[spec["name"]]},
            )
        kept = [s["name"] for s in specs]
        gone = WorkflowStep.objects.using(alias).filter(workflow=workflow).exclude(name__in=kept)
        try:
            gone.delete()
        except ProtectedError:
            step = gone.values_list("name", flat=True).first() or ""
            raise WorkflowError(step, "name", "has runs and cannot be removed") from None
        if _shape(alias, workflow) != before:
            # Runs under way follow the new dependencies from now on: each is settled
            # again, its steps' parents_left counted anew (Storage.settle_workflow_runs).
            under_way = workflow.runs.using(alias).filter(status__in=dag.MOVING)
            settled = storage.settle_workflow_runs(
                under_way.values_list("pk", flat=True), now=now()
            )
            announce(settled, using=alias)
    return workflow


def _shape(alias: str, workflow: Workflow) -> set[tuple]:
    """What the DAG moves by: each step's parents, and whether its failure stops them."""
    steps = WorkflowStep.objects.using(alias).filter(workflow=workflow)
    return {
        (name, tuple(depends_on), lenient)
        for name, depends_on, lenient in steps.values_list(
            "name", "depends_on", "continue_on_failure"
        )
    }
