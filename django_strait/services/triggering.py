"""``trigger()`` and ``trigger_many()``: queue runs, refusing bad input early."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from django_strait import database
from django_strait.conf import strait_settings
from django_strait.models import Job, JobRun
from django_strait.rules import bounds, payloads
from django_strait.rules.payloads import TriggerError
from django_strait.rules.retry import (
    PolicyError,
    check_registered,
    parse_duration,
    resolve,
    validate_partial,
)
from django_strait.services import registry, syncing
from django_strait.storage import backend
from django_strait.transitions import sending

logger = logging.getLogger(__name__)

_NO_KEY = object()


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Validated options shared by every run of one trigger call."""

    job: Job
    available_at: dt.datetime
    priority: int
    queue: str
    max_attempts: int | None
    retry_overrides: dict[str, Any] | None

    def new_run(self, payload: Any, idempotency_key: str | None) -> JobRun:
        return JobRun(
            job=self.job,
            payload=payload,
            available_at=self.available_at,
            priority=self.priority,
            queue=self.queue,
            max_attempts=self.max_attempts,
            retry_overrides=self.retry_overrides,
            idempotency_key=idempotency_key,
            created_at=timezone.now(),
        )


def trigger(
    name: str,
    payload: Any = None,
    *,
    delay: Any = None,
    run_at: dt.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
    retry: Mapping[str, Any] | None = None,
) -> JobRun:
    """Queue one run of job ``name`` and return it.

    With an ``idempotency_key`` already used for this job, return that run instead
    of making a second one (``run.idempotency_hit`` is then True).
    """
    key = _check_key(idempotency_key, "idempotency_key")
    storage = backend(syncing.job_alias(name))
    if max_attempts is None and retry is None and _may_insert_by_name(name):
        # One round trip where the backend can: the job's defaults are read by the INSERT.
        text = _payload_text(payload, "payload")
        run = storage.insert_by_name(
            name, {} if payload is None else payload, text, key=key,
            available_at=_when(delay, run_at),
            priority=None if priority is None else _check_priority(priority),
            queue=None if queue is None else _check_queue(queue, storage.alias),
        )  # fmt: skip
        if run is not None:
            sending.send_enqueued(name, [run], using=storage.alias)
            if AFTER_TRIGGER:
                after_trigger([run])
            return run
    opts = _options(name, delay, run_at, priority, queue, max_attempts, retry, storage.alias)
    run = storage.insert_one(opts.new_run(check_payload(payload), key))
    sending.send_enqueued(opts.job.name, [run], using=storage.alias)
    if AFTER_TRIGGER:
        after_trigger([run])
    return run


#: Called with what each ``trigger()``, ``trigger_many()`` and ``trigger_workflow()``
#: made, in the caller's transaction, before it is returned: the immediate mode of
#: ``django_strait.testing`` runs the runs there. Empty outside that mode.
AFTER_TRIGGER: list[Callable[[Sequence[Any]], object]] = []


def after_trigger(made: Sequence[Any]) -> None:
    """Call the ``AFTER_TRIGGER`` functions with what a trigger made."""
    for hook in list(AFTER_TRIGGER):
        hook(made)


def trigger_external(
    name: str,
    payload: Any,
    *,
    ojs_id: Any,
    envelope: Mapping[str, Any],
    run_at: dt.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    retry: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> JobRun:
    """Queue one run of an external-worker job with its OJS id and envelope (docs/ojs.md),
    on alias ``using`` (default: the job's; several aliases each hold an OJS type's job).

    The id is also the run's idempotency key: the run that already holds it comes
    back with ``idempotency_hit`` True. ``run_at`` is checked by the binding, which
    allows OJS's far-future times (docs/ojs.md).
    """
    storage = backend(using or syncing.job_alias(name))
    opts = _options(name, None, None, priority, queue, None, retry, storage.alias)
    run = opts.new_run(check_payload(payload), str(ojs_id))
    if run_at is not None:
        run.available_at = run_at
    run.ojs_id = ojs_id
    run.ojs = dict(envelope)
    run = storage.insert_one(run)
    if not run.idempotency_hit:
        sending.send_enqueued(opts.job.name, [run], using=storage.alias)
    return run


def external_columns(
    name: str,
    *,
    priority: int | None,
    queue: str | None,
    retry: Mapping[str, Any] | None,
    using: str | None = None,
) -> dict[str, Any]:
    """The queue, priority and retry columns a run of job ``name`` (on alias ``using``,
    the first by default) gets from these options, checked as ``trigger_external``
    checks them (TriggerError): an OJS workflow's step. A workflow lives on its steps'
    jobs' alias (docs/operations.md, "Queues on several databases")."""
    opts = _options(name, None, None, priority, queue, None, retry, database.alias(using))
    return {
        "queue": opts.queue,
        "priority": opts.priority,
        "max_attempts": opts.max_attempts,
        "retry_overrides": opts.retry_overrides,
    }


def _may_insert_by_name(name: Any) -> bool:
    # Once a @job handler's row has been synced in this process (or it is no @job).
    return isinstance(name, str) and syncing.is_synced_or_plain(name)


def trigger_many(
    name: str,
    payloads: Iterable[Any],
    *,
    idempotency_keys: Sequence[str] | None = None,
    delay: Any = None,
    run_at: dt.datetime | None = None,
    priority: int | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    retry: Mapping[str, Any] | None = None,
    batch_size: int = 5000,
    using: str | None = None,
) -> list[JobRun]:
    """Queue one run per payload in one INSERT (per ``batch_size``); return the runs.

    ``idempotency_keys``, if given, pairs one key with each payload; a key already
    used for this job returns the existing run in that position. ``using``: the
    alias of the job's row (default: the job's own; an OJS type has a job per alias).
    """
    storage = backend(using or syncing.job_alias(name))
    opts = _options(name, delay, run_at, priority, queue, max_attempts, retry, storage.alias)
    payloads = [{} if p is None else p for p in payloads]
    texts = [_payload_text(p, f"payloads[{i}]") for i, p in enumerate(payloads)]
    keys = None if idempotency_keys is None else _check_keys(idempotency_keys, len(texts))
    template = opts.new_run({}, None)
    runs, created = storage.insert_many(template, payloads, texts, keys, batch_size)
    if keys is None:
        for run in runs:
            run.idempotency_hit = False
        sending.send_enqueued(opts.job.name, runs, using=storage.alias)
        if AFTER_TRIGGER:
            after_trigger(runs)
        return runs
    # Keys already used return the run that holds them, in the caller's order: the runs
    # made here as the backend returned them, the others read (only those, where it can).
    by_key = {r.idempotency_key: r for r in runs if r.pk is not None and r.pk in created}
    missing = [k for k in keys if k not in by_key]
    if missing:
        held = JobRun.objects.using(storage.alias).filter(job=opts.job, idempotency_key__in=missing)
        by_key.update((r.idempotency_key, r) for r in held)
    for run in by_key.values():
        run.idempotency_hit = run.pk not in created
    made = [r for r in by_key.values() if r.pk in created]
    sending.send_enqueued(opts.job.name, made, using=storage.alias)
    ordered = [by_key[k] for k in keys]
    if AFTER_TRIGGER:
        after_trigger(ordered)
    return ordered


def _options(name, delay, run_at, priority, queue, max_attempts, retry, using) -> RunOptions:
    job = resolve_job(name, using)
    overrides = _check_retry(job, max_attempts, retry)
    return RunOptions(
        job=job,
        available_at=_when(delay, run_at),
        priority=job.priority if priority is None else _check_priority(priority),
        queue=job.queue if queue is None else _check_queue(queue, using),
        max_attempts=max_attempts,
        retry_overrides=overrides,
    )


def resolve_job(name: Any, using: str | None = None) -> Job:
    """Return the ``Job`` named ``name`` (on its alias, or ``using``), creating it first
    for a ``@job`` handler."""
    if not isinstance(name, str) or not name:
        raise TriggerError("name", f"must be a job name (a non-empty string), got {name!r}")
    using = using or syncing.job_alias(name)
    job = syncing.synced_row(name, using) or Job.objects.using(using).filter(name=name).first()
    if job is None:
        names = Job.objects.using(using).values_list("name", flat=True)[:20]
        known = sorted(set(names) | set(registry.registered()))
        hint = f"; known jobs: {', '.join(known)}" if known else "; no jobs are defined yet"
        raise TriggerError("name", f"unknown job {name!r}{hint}")
    return job


def check_payload(payload: Any, *, field: str = "payload") -> Any:
    """Return ``payload`` if it is JSON-serialisable within the setting's size, else raise naming ``field``."""
    return payloads.check_payload(
        payload, field=field, limit=strait_settings.TRIGGER_MAX_PAYLOAD_BYTES
    )


def _payload_text(payload: Any, field: str) -> str:
    return payloads.payload_text(payload, field, strait_settings.TRIGGER_MAX_PAYLOAD_BYTES)


def _when(delay: Any, run_at: dt.datetime | None) -> dt.datetime:
    now = timezone.now()
    if delay is not None and run_at is not None:
        raise TriggerError("delay", "give delay or run_at, not both")
    if run_at is not None:
        return _check_run_at(run_at, now)
    if delay is None:
        return now
    try:
        seconds = parse_duration(delay, field="delay")
    except PolicyError as exc:
        raise TriggerError("delay", f"{exc.problem}; must be {exc.allowed}") from None
    return now + dt.timedelta(seconds=seconds)


#: The earliest run_at accepted (earlier would be due now anyway).
RUN_AT_EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_RUN_AT_RANGE = "a timezone-aware datetime from 1970-01-01T00:00:00Z to ten years from now"


def _check_run_at(run_at: Any, now: dt.datetime) -> dt.datetime:
    if not isinstance(run_at, dt.datetime) or timezone.is_naive(run_at):
        raise TriggerError("run_at", f"must be {_RUN_AT_RANGE}, got {run_at!r}")
    try:
        utc = run_at.astimezone(dt.UTC)  # 9999-12-31T23:59:59-14:00 is past year 9999 in UTC
    except OverflowError:
        utc = None
    latest = now + dt.timedelta(seconds=bounds.MAX_DURATION_SECS)
    if utc is None or not RUN_AT_EARLIEST <= utc <= latest:
        raise TriggerError("run_at", f"must be {_RUN_AT_RANGE}, got {run_at.isoformat()}")
    return utc


def _check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise TriggerError("priority", f"must be an integer from -100 to 100, got {priority!r}")
    return priority


def _check_queue(queue: Any, using: str) -> str:
    if not isinstance(queue, str) or not queue or len(queue) > 100 or "\x00" in queue:
        raise TriggerError(
            "queue",
            f"must be a non-empty string of at most 100 characters without NUL, got {queue!r}",
        )
    if database.placed() and database.alias_for_queue(queue) != using:
        # The run lives with its job: a queue placed elsewhere would never be claimed there.
        raise TriggerError(
            "queue",
            f"{queue!r} lives on database {database.alias_for_queue(queue)!r} "
            f"(STRAIT['QUEUE_DATABASES']) and the job on {using!r}; allowed: a queue of {using!r}",
        )
    return queue


def _check_key(key: Any, field: str) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > 255 or "\x00" in key:
        raise TriggerError(
            field, f"must be a non-empty string of at most 255 characters without NUL, got {key!r}"
        )
    return key


def _check_keys(keys: Sequence[Any], count: int) -> list[str]:
    if len(keys) != count:
        raise TriggerError(
            "idempotency_keys", f"needs one key per payload ({count}), got {len(keys)}"
        )
    checked = [_check_key(k, f"idempotency_keys[{i}]") for i, k in enumerate(keys)]
    if len(set(checked)) != len(checked):
        raise TriggerError("idempotency_keys", "must not repeat a key within one call")
    return checked  # type: ignore[return-value]


def _check_retry(job: Job, max_attempts: Any, retry: Any) -> dict[str, Any] | None:
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise TriggerError("max_attempts", f"must be an integer >= 1, got {max_attempts!r}")
    if retry is not None and not isinstance(retry, Mapping):
        raise TriggerError(
            "retry", f"must be an object of policy fields, got {type(retry).__name__}"
        )
    try:
        overrides = validate_partial(retry or {}, prefix="retry")
        check_registered(overrides)
        resolve(job, max_attempts, overrides, defaults=strait_settings.DEFAULT_RETRY)
    except PolicyError as exc:
        raise TriggerError(exc.field, f"{exc.problem}; must be {exc.allowed}") from None
    return {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()} or None
