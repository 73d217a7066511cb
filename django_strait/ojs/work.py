"""What each OJS request does: enqueue, read, cancel, fetch, ack, nack, heartbeat, dead letters.

The views parse and answer; this module maps OJS onto Strait's jobs and runs
and calls the named transitions for every change of a run's status.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from django_strait import transitions
from django_strait.api.auth import QueueScope
from django_strait.api.pagination import said
from django_strait.conf import strait_settings
from django_strait.database import alias, alias_for_queue, aliases
from django_strait.database import placed as placed_aliases
from django_strait.models import Execution, Job, JobRun, RunAttempt
from django_strait.ojs import errors, inputs, placed
from django_strait.ojs.ids import parse_any, uuid7
from django_strait.ojs.parents import parent_results
from django_strait.ojs.present import job_body, stamp
from django_strait.ojs.states import in_state
from django_strait.rules.states import InvalidTransition, RunStatus, Transition
from django_strait.services.triggering import TriggerError, trigger_external
from django_strait.storage import Claimed, backend
from django_strait.storage import queues as queue_states
from django_strait.storage.rows import read
from django_strait.storage.values import Record
from django_strait.transitions import decisions
from django_strait.transitions.decisions import Decision, trim

#: Heartbeat answers: keep going, stop fetching, or stop.
RUNNING, QUIET, TERMINATE = "running", "quiet", "terminate"
_rng = random.Random()


# Jobs and runs.


def external_job(kind: str, using: str | None = None) -> Job:
    """Return the external-worker job of OJS type ``kind`` on alias ``using`` (default: the
    first), made on first use: several aliases each hold the type's job of their queues."""
    using = alias(using)
    job = Job.objects.using(using).filter(name=kind).first()
    if job is None:
        job = Job(name=kind, execution=Execution.EXTERNAL, ojs={"type": kind})
        try:
            job.full_clean(validate_unique=False)
            with transaction.atomic(using=using):
                job.save(force_insert=True, using=using)
        except ValidationError as exc:
            raise errors.invalid_request("type", "; ".join(exc.messages)) from None
        except IntegrityError:  # made meanwhile by another request
            job = Job.objects.using(using).get(name=kind)
    if job.execution != Execution.EXTERNAL:
        raise errors.conflict(
            f"type {kind!r} names a job of this project that is not an external-worker job"
        )
    return job


def find(ident: Any, scope: QueueScope, what: str = "job") -> JobRun:
    """Return the OJS run with id ``ident`` (and its job), or raise not_found.

    A run of a queue outside ``scope`` is not found either: a key limited to
    other queues cannot even learn that the id exists.
    """
    key = parse_any(ident) if isinstance(ident, str) else None
    run = placed.find_run(key) if key else None  # on whichever alias holds it
    if run is None or run.job.execution != Execution.EXTERNAL or not scope.allows(run.queue):
        raise errors.not_found(what, str(ident))
    return run


def describe(run: JobRun, *, with_errors: bool = True) -> dict[str, Any]:
    """Return ``run`` as an OJS job object, with its error history."""
    attempts = (
        read(RunAttempt.objects.using(run._state.db).filter(run=run).order_by("number", "id")).rows
        if with_errors
        else None
    )
    body = job_body(run, run.job, timezone.now(), attempts)
    if run.workflow_step_run_id:  # a workflow's step: its parents' results (level 3)
        parents = parent_results([run]).get(run.pk)
        if parents is not None:
            body["parent_results"] = parents
    if getattr(run, "unreadable", None):  # a stand-in: what cannot be read, by field
        body["unreadable"] = said(run.unreadable)
    return body


def reload(run: JobRun) -> JobRun:
    """Return ``run`` as it is now in the database."""
    return JobRun.objects.using(run._state.db).select_related("job").get(pk=run.pk)


# Enqueue.


def enqueue(request: inputs.Enqueue, scope: QueueScope | None = None) -> JobRun:
    """Queue one run for an OJS job; a reused id is a duplicate.

    With ``options.unique`` (``ojs.unique``), a run of the same key in the policy's
    states (within ``scope``'s queues) is a conflict: refused (409), kept (the
    existing run comes back with ``deduplicated`` set) or cancelled and replaced.
    """
    if request.unique is not None:
        return _enqueue_unique(request, scope or QueueScope())
    return _enqueue(request)


def enqueued(run: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    """An enqueue's answer: 201 and the new job, or 200 and the job a unique policy kept."""
    body: dict[str, Any] = {"job": describe(run, with_errors=False)}
    if getattr(run, "deduplicated", False):
        return 200, {**body, "deduplicated": True}, {}
    return 201, body, {"Location": f"/ojs/v1/jobs/{run.ojs_id}"}


def _enqueue_unique(request: inputs.Enqueue, scope: QueueScope) -> JobRun:
    policy = request.unique
    assert policy is not None
    using = alias_for_queue(request.queue)
    with transaction.atomic(using=using):
        job = external_job(request.type, using)
        # Enqueues of one type with a policy take turns: each sees the runs the last made.
        list(Job.objects.using(using).select_for_update().filter(pk=job.pk).values_list("pk"))
        now = timezone.now()
        by_state = in_state(now)
        where = Q()
        for state in policy.states:
            where |= by_state[state]
        held = (
            JobRun.objects.using(using)
            .select_related("job")
            .filter(where, job=job, ojs__unique_key=policy.key)
        )
        if policy.period_secs is not None:
            held = held.filter(created_at__gt=now - dt.timedelta(seconds=policy.period_secs))
        existing = scope.only(held).order_by("-id").first()
        if existing is None:
            return _enqueue(request)
        state = job_body(existing, job, now)["state"]
        if policy.on_conflict == "ignore":
            existing.deduplicated = True
            return existing
        if policy.on_conflict == "reject" or state == "active":
            raise errors.OjsError(
                409,
                "duplicate",
                f"job {existing.ojs_id} ({state}) has the same unique key"
                + (": an active job is not replaced" if state == "active" else ""),
                details={"existing_job_id": str(existing.ojs_id), "existing_job_state": state,
                         "uniqueness_key": policy.key},
            )  # fmt: skip
        if policy.on_conflict == "replace_except_schedule" and state == "scheduled":
            request = dataclasses.replace(request, run_at=existing.available_at)
        try:
            transitions.cancel_now(existing.pk, storage=backend(using))
        except InvalidTransition:
            raise errors.conflict(
                f"job {existing.ojs_id} is {state}: it cannot be replaced"
            ) from None
        return _enqueue(request)


def _enqueue(request: inputs.Enqueue) -> JobRun:
    if request.rate_limit is not None:
        queue_states.set_rate_limit(
            alias_for_queue(request.queue), request.queue, *request.rate_limit
        )
    using = alias_for_queue(request.queue)  # the queue's alias holds the run, and its job
    job = external_job(request.type, using)
    if placed_aliases() and request.id is not None and placed.held_elsewhere(request.id, using):
        raise errors.duplicate(str(request.id))
    try:
        run = trigger_external(
            job.name,
            {"args": request.args, "meta": request.meta},
            using=using,
            ojs_id=request.id,
            envelope=request.envelope,
            run_at=request.run_at,
            priority=request.priority,
            queue=request.queue,
            retry=request.retry,
        )
    except TriggerError as exc:
        name = f"options.{exc.field}" if exc.field.startswith("retry") else exc.field
        if exc.field.startswith("retry"):
            raise errors.validation_error(name, exc.message) from None
        raise errors.invalid_request(name, exc.message) from None
    except IntegrityError:  # the id is held by a run of another type
        raise errors.duplicate(str(request.id)) from None
    if run.idempotency_hit:
        raise errors.duplicate(str(request.id))
    run.job = job
    return run


def enqueue_batch(
    requests: Sequence[inputs.Enqueue], scope: QueueScope | None = None
) -> list[JobRun]:
    """Queue every job of a batch, or none of them, one at a time (jobs with a unique policy)."""
    with transaction.atomic(using=placed.batch_alias(requests)):
        return [enqueue(r, scope) for r in requests]


# Workers.


def fetch(queues: Sequence[str], count: int, worker: str, visibility_ms: int) -> list[JobRun]:
    """Claim and start up to ``count`` due runs of ``queues``; expired ones are discarded.

    Several aliases: each queue's alias in turn, the first first, until ``count``.
    """
    if not placed_aliases():
        return _fetch_on(alias(), queues, count, worker, visibility_ms)
    runs: list[JobRun] = []
    for where, some in placed.by_alias(queues).items():
        if len(runs) < count:
            runs += _fetch_on(where, some, count - len(runs), worker, visibility_ms)
    return runs


def _fetch_on(
    using: str, queues: Sequence[str], count: int, worker: str, visibility_ms: int
) -> list[JobRun]:
    storage = backend(using)
    plan = _FetchPlan(visibility_ms, using)
    started = transitions.external.fetch(
        worker, queues=queues, limit=count, deadline=plan.deadline, expired=plan.expired,
        storage=storage,
    )  # fmt: skip
    ids = [run.id for run in started]
    # Runs a cron schedule (or trigger()) made have no OJS id yet.
    unnamed = [i for i in ids if plan.envelopes.get(i, {}).get("_no_id")]
    transitions.external.name({run_id: uuid7() for run_id in unnamed}, storage=storage)
    runs = {r.pk: r for r in JobRun.objects.using(using).select_related("job").filter(pk__in=ids)}
    return [runs[i] for i in ids if i in runs]


class _FetchPlan:
    """The claimed runs' envelopes, read once: which have expired, and each one's deadline."""

    def __init__(self, visibility_ms: int, using: str | None = None) -> None:
        self.visibility_ms = visibility_ms
        self.using = alias(using)
        self.envelopes: dict[int, dict[str, Any]] = {}

    def expired(self, runs: Sequence[Claimed], now: dt.datetime) -> set[int]:
        ids = [r.id for r in runs]
        rows = JobRun.objects.using(self.using).filter(pk__in=ids)
        rows = rows.values_list("id", "ojs", "ojs_id")
        for rid, envelope, ojs_id in rows:
            self.envelopes[rid] = {**(envelope or {}), "_no_id": ojs_id is None}
        return {rid for rid in ids if _has_expired(self.envelopes.get(rid, {}), now)}

    def deadline(self, run: Claimed, started: dt.datetime) -> dt.datetime:
        envelope = self.envelopes.get(run.id, {})
        return _deadline(envelope, started, started, self.visibility_ms)


def _has_expired(envelope: Mapping[str, Any], now: dt.datetime) -> bool:
    text = envelope.get("expires_at")
    try:
        return bool(text) and inputs.when(text, "expires_at", now) <= now
    except errors.OjsError:
        return False


def _deadline(
    envelope: Mapping[str, Any], started: dt.datetime, now: dt.datetime, fallback_ms: int
) -> dt.datetime:
    """The run's visibility from now, but never past its own ``timeout_ms`` from its start."""
    visible = envelope.get("visibility_timeout_ms") or fallback_ms
    until = now + dt.timedelta(milliseconds=visible)
    if envelope.get("timeout_ms"):
        until = min(until, started + dt.timedelta(milliseconds=envelope["timeout_ms"]))
    return until


def deadline_from(run: JobRun, now: dt.datetime, visible_ms: int) -> dt.datetime:
    """The run's visibility deadline moved on from ``now`` (a heartbeat, a progress report)."""
    return _deadline(run.ojs or {}, run.started_at or now, now, visible_ms)


def heartbeat(
    worker: str, ids: Sequence[Any], visibility_ms: int | None, scope: QueueScope
) -> tuple[str, list[str]]:
    """Extend the visibility of the named runs ``worker`` holds; return the directive and those extended.

    A worker keeps only the jobs it fetched (one that named no worker, those fetched
    without a name): a stale worker's heartbeat extends nothing another holds now.
    """
    now = timezone.now()
    keys = [key for i in ids if (key := parse_any(i)) is not None]
    found: list[JobRun] = []
    moved: set[int] = set()
    for where in aliases():  # an OJS id does not say its alias: each alias's held runs
        runs = scope.only(
            JobRun.objects.using(where).filter(
                ojs_id__in=keys,
                status=RunStatus.EXECUTING,
                job__execution=Execution.EXTERNAL,
                claimed_by=worker,
            )
        )
        # Ids it no longer holds (acked, canceled, another's, unknown) are left out, not refused.
        here = list(runs)
        deadlines = {
            r.pk: _deadline(r.ojs or {}, r.started_at or now, now, visibility_ms or _visibility(r))
            for r in here
        }
        if deadlines or where == alias():
            moved.update(transitions.external.extend(worker, deadlines, storage=backend(where)))
        found += here
    return _directive(found), [str(r.ojs_id) for r in found if r.pk in moved]


def _visibility(run: JobRun) -> int:
    envelope = run.ojs or {}
    return envelope.get("visibility_timeout_ms") or inputs.default_visibility_ms()


def _directive(runs: Sequence[JobRun]) -> str:
    """``quiet`` / ``terminate`` from a job's ``meta.test_directive`` when tests ask for it."""
    if not strait_settings.OJS_TEST_DIRECTIVES:
        return RUNNING
    for run in runs:
        meta = (run.payload or {}).get("meta") if isinstance(run.payload, dict) else None
        directive = meta.get("test_directive") if isinstance(meta, dict) else None
        if directive in (QUIET, TERMINATE):
            return directive
    return RUNNING


def ack(ident: Any, result: Any, holder: inputs.Holder, scope: QueueScope) -> JobRun:
    """Complete an active run ``holder`` holds with the worker's result (stored as JSON)."""
    run = _held(ident, "ack", holder, scope)
    size = len(json.dumps(result, allow_nan=False))
    if size > strait_settings.RESULT_MAX_BYTES:
        raise errors.invalid_request(
            "result",
            f"is {size} bytes as JSON; at most {strait_settings.RESULT_MAX_BYTES} are allowed "
            "(STRAIT['RESULT_MAX_BYTES'])",
        )
    _finish(run, Decision(Transition.COMPLETE), outcome="succeeded", result=result)
    return reload(run)


def nack(
    ident: Any, error: Mapping[str, Any], requeue: bool, holder: inputs.Holder, scope: QueueScope
) -> tuple[JobRun, Decision]:
    """End the attempt of an active run ``holder`` holds as failed; its policy decides next."""
    run = _held(ident, "nack", holder, scope)
    kind = error.get("type") or error.get("code") or "ojs.error"
    message = error.get("message") or ""
    retryable = error.get("retryable", True) is not False
    now = timezone.now()

    def rule() -> Decision:
        return decisions.after_nack(
            error_type=str(kind),
            message=str(message),
            retryable=retryable,
            requeue=requeue,
            budget_used=run.attempt - run.attempts_before_replay,
            policy=decisions.run_policy(
                run.job, run.max_attempts, run.retry_overrides, run_id=run.pk
            ),
            now=now,
            rng=_rng,
        )

    decision = decisions.safely(rule, now=now, run_id=run.pk, job=run.job.name)
    _finish(run, decision, outcome="failed", error=str(message), error_type=str(kind)[:200])
    if decision.delay is not None:
        transitions.external.note_retry_delay(
            run.pk, decision.delay, storage=backend(run._state.db)
        )
    return reload(run), decision


def _held(ident: Any, what: str, holder: inputs.Holder, scope: QueueScope) -> JobRun:
    """Return the active run ``ident`` if ``holder`` holds its reservation, else raise conflict.

    Checked here on the row as read, for a clear answer, and again by the record's
    guarded update (its worker and attempt): a reservation that changed between
    the two is refused by the statement that would have ended it.
    """
    run = find(ident, scope)
    check_held(run, run.job, ident, what, holder)
    return run


def check_held(run: JobRun, job: Job, ident: Any, what: str, holder: inputs.Holder) -> None:
    """Raise conflict unless ``run`` is active and ``holder`` (when it names a worker or an
    attempt) holds its reservation; ``what`` (ack, nack...) names the request."""
    if run.status != RunStatus.EXECUTING:
        state = job_body(run, job, timezone.now())["state"]
        raise errors.conflict(
            f"cannot {what} job {ident}: it is {state}, not active", job_id=str(ident), state=state
        )
    attempt = run.attempt - run.attempts_before_replay
    if (holder.worker is not None and holder.worker != run.claimed_by) or (
        holder.attempt is not None and holder.attempt != attempt
    ):
        named = ", ".join(
            f"{k} {v!r}"
            for k, v in (("worker_id", holder.worker), ("attempt", holder.attempt))
            if v
        )
        raise errors.conflict(
            f"cannot {what} job {ident}: the reservation this request names ({named}) is not "
            f"the job's: attempt {attempt} holds it now (the job was requeued and fetched "
            "again); nothing was changed",
            job_id=str(ident),
            state="active",
            attempt=attempt,
        )


def _finish(run: JobRun, decision: Decision, *, outcome: str, **fields: Any) -> None:
    done = attempt_record(
        run, decision.transition, outcome, timezone.now(),
        available_at=decision.available_at, result=fields.get("result"),
        error=trim(fields.get("error", "")), error_type=fields.get("error_type", ""),
    )  # fmt: skip
    recorded = transitions.external.finish(run.claimed_by, done, storage=backend(run._state.db))
    if run.pk not in recorded.moved:
        raise errors.conflict(f"job {run.ojs_id} is no longer active (canceled or requeued)")


def attempt_record(
    run: JobRun, transition: Transition, outcome: str, now: dt.datetime, **fields: Any
) -> Record:
    """The record that ends the attempt ``run`` holds at ``now`` through ``transition``."""
    started = run.started_at or now
    return Record(
        run_id=run.pk,
        attempt=run.attempt,
        transition=transition,
        started_at=started,
        finished_at=now,
        duration_ms=max(int((now - started).total_seconds() * 1000), 0),
        outcome=outcome,
        job=run.job.name,
        job_id=run.job_id,
        step_run_id=run.workflow_step_run_id,  # a workflow's step: its DAG moves on
        **fields,
    )


def ended(run: JobRun, decision: Decision | None = None) -> dict[str, Any]:
    """The answer to an ack or nack: where the run now stands."""
    body = job_body(run, run.job, timezone.now())
    answer: dict[str, Any] = {
        "acknowledged": True,
        "id": body["id"],
        "job_id": body["id"],
        "state": body["state"],
        "attempt": body["attempt"],
        "max_attempts": body["max_attempts"],
        "job": body,
    }
    if run.status == RunStatus.QUEUED:
        answer["next_attempt_at"] = stamp(run.available_at)
        delay = decision.delay if decision is not None and decision.delay is not None else 0.0
        answer["retry_delay_ms"] = int(delay * 1000)
    for key in ("completed_at", "discarded_at"):
        if key in body:
            answer[key] = body[key]
    return answer


# People's changes.


def cancel(ident: Any, scope: QueueScope) -> JobRun:
    """Cancel a job at once, also an active one."""
    run = find(ident, scope)
    try:
        transitions.cancel_now(run.pk, storage=backend(run._state.db))
    except InvalidTransition:
        state = job_body(run, run.job, timezone.now())["state"]
        raise errors.conflict(
            f"job {ident} is {state}: it cannot be cancelled", state=state
        ) from None
    return reload(run)


def dead_letters(scope: QueueScope, using: str | None = None) -> Any:
    """The dead-letter queue's OJS runs (of the queues in ``scope``) on alias ``using``
    (the first by default), newest first."""
    return scope.only(
        JobRun.objects.using(alias(using))
        .select_related("job")
        .filter(status=RunStatus.DEAD_LETTER, job__execution=Execution.EXTERNAL)
        .order_by("-finished_at", "-id")
    )


def dead_letter(ident: Any, scope: QueueScope) -> JobRun:
    """Return one dead-lettered OJS run, or raise not_found."""
    run = find(ident, scope, "dead letter")
    if run.status != RunStatus.DEAD_LETTER:
        raise errors.not_found("dead letter", str(ident))
    return run


def retry_dead_letter(ident: Any, scope: QueueScope) -> JobRun:
    """Queue a dead-lettered job again, its attempts reset."""
    run = dead_letter(ident, scope)
    transitions.replay(run.pk, by="ojs", storage=backend(run._state.db))
    return reload(run)


def delete_dead_letter(ident: Any, scope: QueueScope) -> JobRun:
    """Take a job out of the dead-letter queue (it stays, discarded, in the history)."""
    run = dead_letter(ident, scope)
    transitions.discard(
        run.pk, by="ojs", reason="deleted from the dead-letter queue",
        storage=backend(run._state.db),
    )  # fmt: skip
    return reload(run)
