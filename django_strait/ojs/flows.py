"""OJS workflows (level 3): chain, group and batch, each a run of a native workflow.

An OJS workflow is a workflow of its own (``ojs-<id>``, one run): each of its jobs
a step whose run is an ordinary OJS job on the step's queue (``WorkflowStep.run_template``),
so OJS workers fetch and ack it as any job, the DAG moves on through the same record,
and the admin's DAG view shows it. A chain's steps each depend on the one before; a
group's and a batch's all start at once. A batch's callbacks are OJS jobs queued when
the DAG has ended (:func:`fire_callbacks`, on ``workflow_completed``/``workflow_failed``),
each with the id chosen at creation: queued once, however often that is called.
With several databases a workflow lives on its jobs' alias, as a native workflow
does: their queues must be on one database (a callback's may be on any).
See docs/ojs.md (Workflows).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from django_strait.api.auth import QueueScope
from django_strait.database import alias_for_id, alias_for_queue, aliases
from django_strait.models import JobRun, StepRunStatus, WorkflowRun, WorkflowStepRun
from django_strait.ojs import errors, inputs, placed
from django_strait.ojs.ids import parse_any, uuid7
from django_strait.ojs.present import stamp
from django_strait.ojs.states import ojs_state
from django_strait.ojs.work import enqueue, external_job
from django_strait.services.triggering import TriggerError, external_columns
from django_strait.workflows import WorkflowError, cancel_workflow_run, define_workflow
from django_strait.workflows.running import trigger_workflow

logger = logging.getLogger(__name__)

KINDS = ("chain", "group", "batch")
#: Jobs (steps) one workflow may hold.
JOBS_MAX = 100
NAME_MAX_LENGTH = 200
CALLBACKS = ("on_complete", "on_success", "on_failure")
#: The top-level fields a workflow may have; another is refused, naming it.
KNOWN_KEYS = frozenset({"type", "name", "steps", "jobs", "callbacks", "options", "metadata"})
#: The name of the native workflow of OJS workflow ``id``.
PREFIX = "ojs-"


@dataclass
class Plan:
    """A workflow to create, checked: its kind, name, jobs and callbacks."""

    kind: str
    name: str
    jobs: list[inputs.Enqueue]
    callbacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def queues(self) -> list[tuple[str, str]]:
        """Each queue the workflow puts a job on, with the field that names it."""
        key = "steps" if self.kind == "chain" else "jobs"
        out = [(j.queue, f"{key}[{i}].options.queue") for i, j in enumerate(self.jobs)]
        for name, body in self.callbacks.items():
            out.append((body["queue"], f"callbacks.{name}.options.queue"))
        return out


def plan(body: Mapping[str, Any]) -> Plan:
    """Check a ``POST /ojs/v1/workflows`` body; raise ``invalid_request`` naming the field."""
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise errors.invalid_request(
            unknown[0], f"is not a workflow field; allowed: {', '.join(sorted(KNOWN_KEYS))}"
        )
    kind = body.get("type")
    if kind not in KINDS:
        raise errors.invalid_request("type", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    name = body.get("name", kind)
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_MAX_LENGTH:
        raise errors.invalid_request(
            "name", f"must be a string of 1 to {NAME_MAX_LENGTH} characters"
        )
    key, other = ("steps", "jobs") if kind == "chain" else ("jobs", "steps")
    if other in body:
        raise errors.invalid_request(other, f"a {kind} lists its jobs in {key!r}, not {other!r}")
    jobs = body.get(key)
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= JOBS_MAX:
        raise errors.invalid_request(key, f"must be an array of 1 to {JOBS_MAX} jobs")
    defaults = body.get("options") or {}
    if not isinstance(defaults, Mapping):
        raise errors.invalid_request("options", "must be a JSON object (options for every job)")
    checked = [_job(j, f"{key}[{i}].", defaults) for i, j in enumerate(jobs)]
    _refuse_repeated_ids(checked)
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise errors.invalid_request("metadata", "must be a JSON object")
    return Plan(
        kind, name, checked, _callbacks(kind, body.get("callbacks"), defaults), dict(metadata)
    )


def _job(job: Any, prefix: str, defaults: Mapping[str, Any]) -> inputs.Enqueue:
    if isinstance(job, Mapping) and defaults:
        own = job.get("options") or {}
        if isinstance(own, Mapping):
            job = {**job, "options": {**defaults, **own}}
    if isinstance(job, Mapping) and ("steps" in job or "jobs" in job):
        raise errors.invalid_request(
            prefix.rstrip("."), "nested workflows are not supported: each job is one OJS job"
        )
    wanted = inputs.job_request(job, prefix)
    if wanted.run_at is not None:
        raise errors.invalid_request(
            f"{prefix}options.scheduled_at",
            "a workflow's job starts when the workflow says; it cannot be scheduled",
        )
    return wanted


def _refuse_repeated_ids(jobs: list[inputs.Enqueue]) -> None:
    """A job id given twice, or already held by a job, is a duplicate (409)."""
    given = [job.id for job in jobs if job.id is not None]
    seen: set[Any] = set()
    for ident in given:
        if ident in seen:
            raise errors.duplicate(str(ident))
        seen.add(ident)
    for where in aliases():  # several databases: an id any alias's run holds
        held = JobRun.objects.using(where).filter(ojs_id__in=given)
        taken = held.values_list("ojs_id", flat=True).first()
        if taken is not None:
            raise errors.duplicate(str(taken))


def _callbacks(kind: str, given: Any, defaults: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A batch's callbacks as stored: each one's checked body, OJS id and queue."""
    if given is None and kind != "batch":
        return {}
    if kind != "batch":
        raise errors.invalid_request("callbacks", f"only a batch has callbacks, not a {kind}")
    if not isinstance(given, Mapping) or not given:
        raise errors.invalid_request(
            "callbacks", f"must be an object with at least one of {', '.join(CALLBACKS)}"
        )
    unknown = sorted(set(given) - set(CALLBACKS))
    if unknown:
        raise errors.invalid_request(
            f"callbacks.{unknown[0]}", f"is not a callback; allowed: {', '.join(CALLBACKS)}"
        )
    out = {}
    for name, body in given.items():
        wanted = _job(body, f"callbacks.{name}.", defaults)
        out[name] = {"body": dict(body), "id": str(wanted.id or uuid7()), "queue": wanted.queue}
    return out


# Creating, reading, cancelling.


def create(wanted: Plan) -> WorkflowRun:
    """Define the workflow's DAG and start its run: the first step (chain) or every job."""
    ident = uuid7()
    key = "steps" if wanted.kind == "chain" else "jobs"
    using = placed.one_alias(wanted.jobs, key, "one database holds a workflow's jobs")
    with placed.ids_held(placed.chosen(wanted.jobs)):
        _refuse_repeated_ids(wanted.jobs)  # again, now that no other enqueue of them runs
        return _create(wanted, ident, key, using)


def _create(wanted: Plan, ident: Any, key: str, using: str) -> WorkflowRun:
    steps = []
    for i, job in enumerate(wanted.jobs):
        external_job(job.type, using)
        try:
            columns = external_columns(
                job.type, priority=job.priority, queue=job.queue, retry=job.retry, using=using
            )
        except TriggerError as exc:
            raise errors.validation_error(f"{key}[{i}].options.{exc.field}", exc.message) from None
        steps.append({
            "name": f"{'step' if wanted.kind == 'chain' else 'job'}-{i}",
            "job": job.type,
            "depends_on": [f"step-{i - 1}"] if wanted.kind == "chain" and i else [],
            # A batch's job that fails still lets the DAG end, and its callbacks fire.
            "continue_on_failure": wanted.kind == "batch",
            "run_template": {
                "payload": {"args": job.args, "meta": job.meta},
                "ojs": job.envelope,
                "ojs_id": str(job.id or uuid7()),
                **columns,
            },
        })  # fmt: skip
    for body in wanted.callbacks.values():
        external_job(body["body"]["type"], alias_for_queue(body["queue"]))
    payload = {
        "ojs_workflow": {
            "id": str(ident), "type": wanted.kind, "name": wanted.name,
            "callbacks": wanted.callbacks, "metadata": wanted.metadata,
            "queues": sorted({q for q, _ in wanted.queues()}),
        }
    }  # fmt: skip
    try:
        with transaction.atomic(using=using):
            define_workflow(
                f"{PREFIX}{ident}", steps, description=f"OJS {wanted.kind} {wanted.name!r}"
            )
            return trigger_workflow(f"{PREFIX}{ident}", payload, idempotency_key=str(ident))
    except WorkflowError as exc:
        raise errors.invalid_request(f"{key}.{exc.field}", exc.message) from None
    except IntegrityError:  # a job id taken meanwhile
        raise errors.duplicate("a job id of this workflow") from None


def find(ident: Any, scope: QueueScope) -> WorkflowRun:
    """The run of OJS workflow ``ident`` on whichever alias holds it, or not_found (also
    outside the key's queues)."""
    key = parse_any(ident) if isinstance(ident, str) else None
    wr = None
    for where in aliases() if key is not None else ():
        wr = (
            WorkflowRun.objects.using(where)
            .select_related("workflow")
            .filter(workflow__name=f"{PREFIX}{key}")
            .first()
        )
        if wr is not None:
            break
    envelope = _envelope(wr) if wr is not None else None
    if envelope is None or not all(scope.allows(q) for q in envelope.get("queues", [])):
        raise errors.not_found("workflow", str(ident))
    return wr


def _envelope(wr: WorkflowRun) -> dict[str, Any] | None:
    payload = wr.payload if isinstance(wr.payload, dict) else {}
    found = payload.get("ojs_workflow")
    return found if isinstance(found, dict) else None


def cancel(wr: WorkflowRun) -> WorkflowRun:
    """Cancel the workflow: its waiting steps, its started steps' jobs (also active ones)."""
    if wr.status in ("running", "failed"):
        cancel_workflow_run(wr.pk)
        wr.refresh_from_db(using=wr._state.db)
    return wr


def describe(wr: WorkflowRun) -> dict[str, Any]:
    """The workflow as OJS shows it: its state, counts and steps."""
    envelope = _envelope(wr) or {}
    kind = envelope.get("type", "chain")
    step_runs = list(
        WorkflowStepRun.objects.using(wr._state.db)
        .filter(workflow_run=wr)
        .select_related("step__job", "run")
        .order_by("id")
    )
    now = timezone.now()
    steps = [_step(sr, now) for sr in step_runs]
    callbacks = _callback_runs(envelope)
    done = sum(1 for s in steps if s["state"] == "completed")
    failed = sum(1 for s in steps if s["state"] in ("discarded", "failed"))
    state = _state(wr, kind, steps, callbacks)
    body: dict[str, Any] = {
        "id": envelope.get("id"),
        "type": kind,
        "name": envelope.get("name"),
        "state": state,
        "metadata": envelope.get("metadata", {}),
        "created_at": stamp(wr.created_at),
        # The native run may fail at the first failed job; OJS ends when every job has.
        "completed_at": None if state == "running" else stamp(wr.finished_at),
        "steps": steps,
    }
    prefix = "steps" if kind == "chain" else "jobs"  # as the suite reads them
    body.update({
        f"{prefix}_total": len(steps), f"{prefix}_completed": done, f"{prefix}_failed": failed,
        # The workflows spec's metadata counters (section 3.3).
        "job_count": len(steps), "completed_count": done, "failed_count": failed,
    })  # fmt: skip
    if wr.last_error:  # which step failed it, and how (the workflow run's own record)
        body["error"] = {"type": wr.error_type, "code": wr.error_type, "message": wr.last_error}
    if callbacks:
        body["callbacks"] = {
            name: {"job_id": cb["id"], "type": cb["type"], "state": cb["state"]}
            for name, cb in callbacks.items()
        }
    return body


def _step(sr: WorkflowStepRun, now: Any) -> dict[str, Any]:
    template = sr.step.run_template if isinstance(sr.step.run_template, dict) else {}
    depends = sr.step.depends_on if isinstance(sr.step.depends_on, list) else []
    out: dict[str, Any] = {
        "id": sr.step.name,
        "type": sr.step.job.name,
        "job_id": template.get("ojs_id"),
        "depends_on": depends,
    }
    run = sr.run
    if run is None:
        out["state"] = {"skipped": "cancelled", "canceled": "cancelled"}.get(sr.status, "pending")
        return out
    out["state"] = ojs_state(
        run.status, due=run.available_at, attempts=run.attempt - run.attempts_before_replay, now=now
    )
    if run.started_at:
        out["started_at"] = stamp(run.started_at)
    if out["state"] == "completed":
        out["completed_at"] = stamp(run.finished_at)
        out["result"] = run.result
    return out


TERMINAL = frozenset({"completed", "cancelled", "discarded"})


def _state(
    wr: WorkflowRun, kind: str, steps: list[dict[str, Any]], callbacks: dict[str, dict]
) -> str:
    """running until every job (and, for a batch, every callback fired) has ended; then
    failed if one failed (a batch: if a callback failed), else completed."""
    if wr.status == "canceled":
        return "cancelled"
    if any(s["state"] not in TERMINAL for s in steps):
        return "running"
    if kind != "batch":
        return "completed" if all(s["state"] == "completed" for s in steps) else "failed"
    fired = [cb for cb in callbacks.values() if cb["state"] is not None]
    if not fired and wr.status not in ("completed", "failed"):
        return "running"
    if any(cb["state"] not in TERMINAL for cb in fired):
        return "running"
    return "failed" if any(cb["state"] != "completed" for cb in fired) else "completed"


def _callback_runs(envelope: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each callback's id, type and state (None: not queued)."""
    given = envelope.get("callbacks") or {}
    ids = {name: parse_any(cb.get("id", "")) for name, cb in given.items()}
    wanted = [i for i in ids.values() if i]
    runs = {  # each callback on its own queue's alias
        r.ojs_id: r
        for where in aliases()
        for r in JobRun.objects.using(where).filter(ojs_id__in=wanted)
    }
    now = timezone.now()
    out = {}
    for name, cb in given.items():
        run = runs.get(ids[name])
        state = None
        if run is not None:
            spent = run.attempt - run.attempts_before_replay
            state = ojs_state(run.status, due=run.available_at, attempts=spent, now=now)
        out[name] = {"id": cb.get("id"), "type": (cb.get("body") or {}).get("type"), "state": state}
    return out


# A batch's callbacks.


def fire_callbacks(workflow_run_id: int) -> list[str]:
    """Queue the callbacks of a batch whose jobs have all ended; return the names queued.

    on_complete always, on_success when every job completed, on_failure when one did
    not. Each has its id from creation: a second call queues nothing again.
    """
    using = alias_for_id(workflow_run_id)
    wr = WorkflowRun.objects.using(using).filter(pk=workflow_run_id).first() if using else None
    envelope = _envelope(wr) if wr is not None else None
    if envelope is None or envelope.get("type") != "batch" or wr.status == "canceled":
        return []
    statuses = list(
        WorkflowStepRun.objects.using(using)
        .filter(workflow_run=wr)
        .values_list("status", flat=True)
    )
    if any(s in (StepRunStatus.WAITING, StepRunStatus.STARTED) for s in statuses):
        return []
    succeeded = all(s == StepRunStatus.COMPLETED for s in statuses)
    wanted = ["on_complete", "on_success" if succeeded else "on_failure"]
    parents = _results(wr)
    queued = []
    for name in wanted:
        cb = (envelope.get("callbacks") or {}).get(name)
        if cb and _queue_callback(cb, envelope, name, parents):
            queued.append(name)
    return queued


def _results(wr: WorkflowRun) -> list[Any]:
    runs = WorkflowStepRun.objects.using(wr._state.db).filter(workflow_run=wr).order_by("id")
    return [sr.run.result if sr.run else None for sr in runs.select_related("run")]


def _queue_callback(cb: Mapping[str, Any], envelope: Mapping[str, Any], name: str, parents) -> bool:
    body = {**cb["body"], "id": cb["id"]}
    try:
        wanted = inputs.job_request(body, f"callbacks.{name}.")
    except errors.OjsError as exc:  # checked at creation; a setting changed since
        logger.warning("OJS workflow %s: callback %s not queued: %s", envelope.get("id"), name, exc)
        return False
    extra = dict(wanted.envelope.get("extra") or {})
    extra.update(parent_results=parents, workflow_id=envelope.get("id"), callback=name)
    wanted = replace(wanted, envelope={**wanted.envelope, "extra": extra})
    try:
        enqueue(wanted)
    except errors.OjsError as exc:  # already queued (a second call), or refused
        if exc.code != "duplicate":
            logger.warning(
                "OJS workflow %s: callback %s not queued: %s", envelope.get("id"), name, exc
            )
        return False
    return True
