"""Sending django-strait's signals (``django_strait.signals``, docs/observability.md): the one place they are sent.

The transitions send a run's signals once the change they announce commits;
the circuit breaker and the webhook deliverer announce theirs through here too.
Receivers are called with ``send_robust``: one that raises is logged (by
Django's ``django.dispatch`` logger, with the traceback) and never stops the
worker or the other receivers. When nobody listens, sending costs one attribute
check. Circuit changes and budget soft limits are also logged, by this
module's logger (``django_strait.transitions.sending``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from django_strait.database import alias
from django_strait.models import (
    CircuitState,
    DeliveryStatus,
    EndpointCircuit,
    JobRun,
    Project,
    WebhookDelivery,
    WorkflowRun,
)
from django_strait.rules.outcome import Outcome
from django_strait.rules.presets import OOM_OUTCOME
from django_strait.rules.states import RunStatus
from django_strait.signals import (
    ATTEMPT_SIGNALS,
    SIGNAL_FOR_STATUS,
    WORKFLOW_SIGNALS,
    budget_soft_limit,
    circuit_closed,
    circuit_opened,
    run_enqueued,
    run_oom,
    run_started,
    webhook_delivered,
    webhook_failed,
)
from django_strait.storage import webhooks as outbox

if TYPE_CHECKING:
    from django_strait.rules.resilience.budgets import LedgerDay
    from django_strait.rules.resilience.policy import Change
    from django_strait.storage.values import Change as WorkflowChange
    from django_strait.storage.values import Claimed, Record, Recorded, Rescued

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sent:
    """One webhook delivery attempt and what became of the delivery."""

    due: outbox.Due
    outcome: Outcome
    settled: outbox.Settled


def listened(signal: Signal) -> bool:
    """Return whether any receiver is connected to ``signal`` for runs."""
    # ``receivers`` is a plain list: this is the whole cost when nobody listens.
    return bool(signal.receivers) and signal.has_listeners(JobRun)


def _send(signal: Signal, **kwargs: Any) -> None:
    signal.send_robust(sender=JobRun, **kwargs)


# -- enqueued ----------------------------------------------------------------------


def send_enqueued(job: str, runs: Sequence[JobRun], *, using: str | None = None) -> None:
    """Send ``run_enqueued`` for each run once the current transaction commits.

    Pass only the runs this call created; a run flagged ``idempotency_hit`` (an
    existing run returned for a reused key) is left out.
    """
    if not listened(run_enqueued):
        return
    new = [run for run in runs if not getattr(run, "idempotency_hit", False)]
    if new:
        transaction.on_commit(lambda: _send_enqueued(job, new), using=alias(using))


def _send_enqueued(job: str, runs: Sequence[JobRun]) -> None:
    for run in runs:
        _send(
            run_enqueued,
            run_id=run.pk,
            job=job,
            attempt=run.attempt,
            status=run.status,
            duration_ms=None,
            error="",
            error_type="",
            run=run,
            queue=run.queue,
            available_at=run.available_at,
        )


# -- started -----------------------------------------------------------------------


def send_started(
    runs: Sequence[Claimed],
    job_names: Mapping[int, str] | None = None,
    *,
    using: str | None = None,
) -> None:
    """Send ``run_started`` for each run a worker just started.

    ``job_names`` maps run id to job name; runs it lacks are looked up in one
    query (only when someone listens), so call this off the event loop.
    """
    if not runs or not listened(run_started):
        return
    names = _names([r.id for r in runs], job_names, using)
    for run in runs:
        _send(
            run_started,
            run_id=run.id,
            job=names.get(run.id, ""),
            attempt=run.attempt,
            status=RunStatus.EXECUTING,
            duration_ms=None,
            error="",
            error_type="",
        )


# -- an attempt ended --------------------------------------------------------------


def send_recorded(
    records: Sequence[Record],
    recorded: Recorded,
    job_names: Mapping[int, str] | None = None,
    *,
    using: str | None = None,
) -> None:
    """Send the signal for each record whose run moved, by the status it moved to.

    ``recorded`` is what ``transitions.record`` returned: its ``moved`` is
    the truth (a run whose cancel was asked meanwhile is canceled, whatever its
    record said); records of lost runs send nothing.
    """
    if not recorded.moved or not any(listened(s) for s in ATTEMPT_SIGNALS):
        return
    moved = [rec for rec in records if rec.run_id in recorded.moved]
    names = _names([rec.run_id for rec in moved], job_names, using)
    for rec in moved:
        status = recorded.moved[rec.run_id]
        signal = SIGNAL_FOR_STATUS.get(status)
        kwargs = _record_kwargs(rec, status, names.get(rec.run_id, ""))
        if signal is not None and listened(signal):
            _send(signal, **kwargs)
        if rec.outcome == OOM_OUTCOME and listened(run_oom):
            following = rec.run_preset if rec.free_attempt else None
            _send(run_oom, **kwargs, preset=rec.preset, next_preset=following)


def _record_kwargs(rec: Record, status: str, job: str) -> dict[str, Any]:
    return {
        "run_id": rec.run_id,
        "job": job,
        "attempt": rec.attempt,
        "status": status,
        "duration_ms": rec.duration_ms,
        "error": rec.error,
        "error_type": rec.error_type,
        "outcome": rec.outcome,
        "endpoint": rec.endpoint,
        "status_code": rec.status_code,
        "available_at": rec.available_at if status == RunStatus.QUEUED else None,
    }


# -- a person acted ----------------------------------------------------------------


def send_changed(runs: Iterable[JobRun]) -> None:
    """Send the signal for each run's current status after a person's transition.

    For cancel and discard (admin, API, commands). A queued run (a replay)
    sends nothing: ``run_failed`` means a failed attempt, not a replay.
    """
    for run in runs:
        signal = SIGNAL_FOR_STATUS.get(run.status)
        if signal is None or run.status == RunStatus.QUEUED or not listened(signal):
            continue
        _send(
            signal,
            run_id=run.pk,
            job=run.job.name,
            attempt=run.attempt,
            status=run.status,
            duration_ms=None,
            error=run.last_error,
            error_type=run.error_type,
        )


def _names(
    run_ids: list[int], given: Mapping[int, str] | None, using: str | None
) -> Mapping[int, str]:
    """Return job names for ``run_ids``: ``given``, completed by one query if needed."""
    given = given or {}
    missing = [rid for rid in run_ids if rid not in given]
    if not missing:
        return given
    runs = JobRun.objects.db_manager(using).filter(pk__in=missing)
    found = dict(runs.values_list("id", "job__name"))
    return {**given, **found}


# -- the reaper ----------------------------------------------------------------------


def send_rescued(rescued: Sequence[Rescued]) -> None:
    """Send the signal of each rescued run's end, as a worker would for a failed attempt.

    The rescued run's attempt was lost with its worker (``outcome`` ``system_failed``,
    ``error_type`` ``worker.lost``).
    """
    if not rescued or not any(listened(s) for s in SIGNAL_FOR_STATUS.values()):
        return
    names = _names([r.run.id for r in rescued], None, None)
    for r in rescued:
        status = r.transition.target
        signal = SIGNAL_FOR_STATUS.get(status)
        if signal is None or not listened(signal):
            continue
        _send(
            signal,
            run_id=r.run.id,
            job=names.get(r.run.id, ""),
            attempt=r.run.lost_attempt,
            status=status,
            duration_ms=None,
            error=r.error,
            error_type="worker.lost",
            outcome="system_failed",
            endpoint="",
            status_code=None,
            available_at=r.available_at,
        )


# -- circuits ------------------------------------------------------------------------


def announce_circuit_changes(changes: Iterable[Change]) -> None:
    """Log and send ``circuit_opened`` / ``circuit_closed`` (``sender=EndpointCircuit``) for each change.

    Keyword arguments: ``endpoint_url``, ``failures`` (consecutive) and
    ``previous_state``. A circuit going half-open (a probe) is not announced.
    """
    for change in changes:
        circuit = change.circuit
        if circuit.state == CircuitState.HALF_OPEN:
            continue
        opened = circuit.state == CircuitState.OPEN
        if opened:
            logger.warning(
                "circuit opened for %s after %s consecutive failures",
                circuit.endpoint_url,
                circuit.failures,
            )
        else:
            logger.info("circuit closed for %s", circuit.endpoint_url)
        (circuit_opened if opened else circuit_closed).send_robust(
            sender=EndpointCircuit,
            endpoint_url=circuit.endpoint_url,
            failures=circuit.failures,
            previous_state=change.previous_state,
        )


# -- budgets -----------------------------------------------------------------------


def announce_budget_soft_limits(ledgers: Iterable[LedgerDay]) -> None:
    """Log and send ``budget_soft_limit`` (``sender=Project``) for each day that crossed it.

    Keyword arguments: ``project`` (the ``Project``), ``day`` (a date),
    ``daily_budget``, ``spent``, ``reserved`` (Decimals) and ``ratio`` (the
    project's ``soft_limit_ratio``).
    """
    for ledger in ledgers:
        project = Project.objects.get(pk=ledger.project_id)
        logger.warning(
            "project %s has committed %s of its daily budget of %s on %s (soft limit %.0f%%)",
            project.name,
            f"{ledger.committed.normalize():f}",
            f"{project.daily_budget.normalize():f}",
            ledger.day,
            project.soft_limit_ratio * 100,
            extra={"project": project.name, "budget_day": str(ledger.day)},
        )
        budget_soft_limit.send_robust(
            sender=Project,
            project=project,
            day=ledger.day,
            daily_budget=project.daily_budget,
            spent=ledger.spent,
            reserved=ledger.reserved,
            ratio=project.soft_limit_ratio,
        )


# -- workflows -----------------------------------------------------------------------


def send_workflow_changes(changes: Iterable[WorkflowChange]) -> None:
    """Send the signal of each workflow run's new status (call it after the commit)."""
    for change in changes:
        signal = WORKFLOW_SIGNALS.get(change.status)
        if signal is not None and signal.receivers:
            signal.send_robust(
                sender=WorkflowRun,
                workflow_run_id=change.workflow_run_id,
                workflow=change.workflow,
                status=change.status,
                error_type=change.error_type,
                error=change.error,
            )


# -- webhooks ----------------------------------------------------------------------


def send_webhooks(sent: Iterable[Sent]) -> None:
    """Send ``webhook_delivered`` or ``webhook_failed`` for each delivery attempt."""
    if not (webhook_delivered.receivers or webhook_failed.receivers):
        return
    for s in sent:
        settled, outcome = s.settled, s.outcome
        common = {
            "delivery_id": s.due.delivery_id,
            "event": s.due.event,
            "url": s.due.url,
            "run_id": s.due.run_id,
            "attempt": settled.attempt,
            "status_code": outcome.status_code,
            "duration_ms": outcome.duration_ms,
        }
        if settled.status == DeliveryStatus.DELIVERED:
            webhook_delivered.send_robust(sender=WebhookDelivery, **common)
        else:
            webhook_failed.send_robust(
                sender=WebhookDelivery,
                **common,
                error_type=outcome.error_type,
                error=outcome.error,
                retrying=settled.status == DeliveryStatus.PENDING,
                next_attempt_at=settled.next_attempt_at,
            )
