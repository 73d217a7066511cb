"""OJS cron registrations over Strait's scheduler: each is an external job with a schedule.

Both wire forms are read: the SDKs' ``{name, cron, type, args, options, meta,
timezone}`` and the conformance suite's ``{name, expression, job_template,
timezone, overlap_policy}``. The scheduler that fires ``Job.schedule`` fires
these; each tick's run is worked by OJS workers with the template's args.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from croniter import croniter
from django.db import IntegrityError, transaction

from django_strait.api.auth import QueueScope
from django_strait.database import alias_for_queue, aliases
from django_strait.models import Execution, Job
from django_strait.models.job import JOB_NAME_VALIDATOR, Overlap
from django_strait.ojs import errors, inputs
from django_strait.ojs.present import stamp
from django_strait.rules.cron import ScheduleError, check_schedule, check_timezone
from django_strait.storage.rows import read


def register(body: Mapping[str, Any], scope: QueueScope) -> Job:
    """Create (or replace) the cron registration ``body`` names, its queue within ``scope``."""
    name = body.get("name")
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 200
        or not JOB_NAME_VALIDATOR.regex.match(name)
    ):
        raise errors.invalid_request("name", "must be a name of letters, digits, '-', '_' and '.'")
    template = body.get("job_template") if "job_template" in body else body
    if not isinstance(template, Mapping):
        raise errors.invalid_request("job_template", "must be a JSON object (a job)")
    expression = body.get("expression", body.get("cron"))
    zone = body.get("timezone") or "UTC"
    try:
        schedule = check_schedule(expression if isinstance(expression, str) else "")
        check_timezone(zone)
    except ScheduleError as exc:
        raise errors.invalid_request(
            exc.field if exc.field != "schedule" else "expression", exc.message
        ) from None
    job = inputs.job_request({"args": [], **template}, "job_template.")
    if not scope.allows(job.queue):
        raise errors.forbidden("job_template.options.queue", scope.refusal(job.queue))
    overlap = body.get("overlap_policy", "allow")
    if overlap not in (Overlap.ALLOW, Overlap.SKIP):
        raise errors.invalid_request(
            "overlap_policy", f"must be 'allow' or 'skip', got {overlap!r}"
        )
    return _save(name, schedule, zone, overlap, job, body.get("meta") or {}, scope)


def _save(
    name: str,
    schedule: str,
    zone: str,
    overlap: str,
    job: inputs.Enqueue,
    meta: Any,
    scope: QueueScope,
) -> Job:
    existing = _named(name)
    if existing is not None and not scope.allows(existing.queue):
        raise errors.forbidden("name", f"cron {name!r} fires into a queue this key may not use")
    if existing is not None and not _is_cron(existing):
        raise errors.conflict(f"{name!r} names a job of this project that is not an OJS cron")
    using = alias_for_queue(job.queue)  # its scheduler and its runs: the queue's alias
    if existing is not None and existing._state.db != using:
        raise errors.conflict(
            f"cron {name!r} fires into queue {existing.queue!r} on database "
            f"{existing._state.db!r} and queue {job.queue!r} lives on {using!r}: a cron "
            "stays on the database it was first registered on; register this one under "
            "another name"
        )
    ojs = {
        "type": job.type,
        "cron": True,
        "args": job.args,
        "meta": {**job.meta, **(meta if isinstance(meta, Mapping) else {})},
        "options": job.envelope.get("options", {}),
    }
    fields = {
        "execution": Execution.EXTERNAL, "ojs": ojs, "schedule": schedule, "timezone": zone,
        "schedule_overlap": overlap, "queue": job.queue, "priority": job.priority or 0,
        # Registered again after a delete (which pauses the job): it fires again.
        "enabled": True,
    }  # fmt: skip
    try:
        with transaction.atomic(using=using):
            made, _ = Job.objects.using(using).update_or_create(name=name, defaults=fields)
    except IntegrityError:
        raise errors.conflict(f"cron {name!r} was registered meanwhile") from None
    return made


def _is_cron(job: Job) -> bool:
    return (
        job.execution == Execution.EXTERNAL
        and isinstance(job.ojs, dict)
        and bool(job.ojs.get("cron"))
    )


def crons(scope: QueueScope) -> list[Job]:
    """Every OJS cron registration firing into a queue of ``scope``, by name."""
    # A job row that cannot be read is left out (and logged), not every registration.
    found = []
    for where in aliases():
        rows = Job.objects.using(where).filter(execution=Execution.EXTERNAL).exclude(schedule="")
        found += [j for j in read(scope.only(rows)).rows if _is_cron(j)]
    return sorted(found, key=lambda j: j.name)


def _named(name: str) -> Job | None:
    """The job called ``name`` on whichever alias holds it, the first first."""
    for where in aliases():
        job = Job.objects.using(where).filter(name=name).first()
        if job is not None:
            return job
    return None


def find(name: str, scope: QueueScope) -> Job:
    """Return the cron registration ``name``, or raise not_found (also outside ``scope``)."""
    job = _named(name)
    if job is None or not _is_cron(job) or not scope.allows(job.queue):
        raise errors.not_found("cron", name)
    return job


def delete(name: str, scope: QueueScope) -> Job:
    """Stop a cron registration: its schedule is cleared and the job paused (its runs stay)."""
    job = find(name, scope)
    # The last tick goes too: registered again, it fires from then on, with no catching up.
    Job.objects.using(job._state.db).filter(pk=job.pk).update(
        schedule="", enabled=False, schedule_last_tick=None
    )
    return job


def describe(job: Job, now: dt.datetime) -> dict[str, Any]:
    """Return a registration in both wire forms (the suite's and the SDKs')."""
    ojs = job.ojs or {}
    template = {"type": ojs.get("type"), "args": ojs.get("args", []), "meta": ojs.get("meta", {}),
                "options": ojs.get("options", {})}  # fmt: skip
    return {
        "name": job.name,
        "expression": job.schedule,
        "cron": job.schedule,
        "timezone": job.timezone,
        "overlap_policy": job.schedule_overlap,
        "enabled": job.enabled and bool(job.schedule),
        "job_template": template,
        **template,
        "next_run_at": _next(job, now),
        "last_run_at": stamp(job.schedule_last_tick),
        "created_at": stamp(job.created_at),
    }


_ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
            "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
            "@hourly": "0 * * * *"}  # fmt: skip


def _next(job: Job, now: dt.datetime) -> str | None:
    if not job.schedule:
        return None
    local = now.astimezone(check_timezone(job.timezone))
    tick = croniter(_ALIASES.get(job.schedule, job.schedule), local).get_next(dt.datetime)
    return stamp(tick)
