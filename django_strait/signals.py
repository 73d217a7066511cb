"""Django signals for what happens to runs (docs/observability.md), and the helpers that send them.

Every run signal is sent with ``sender=JobRun`` (Django's convention: the model
class) and these keyword arguments:

``run_id``, ``job`` (the job's name), ``attempt``, ``status`` (the run's status
after the event), ``duration_ms`` (the attempt's, or None), ``error`` and
``error_type`` (empty strings when there is none).

Some signals add more: ``run_enqueued`` passes ``run`` (the new ``JobRun``),
``queue`` and ``available_at``; the signals sent when an attempt ends pass
``outcome`` (the attempt's: succeeded, failed, timed_out...), ``endpoint``,
``status_code`` and ``available_at`` (when a retry is due; None otherwise).

Receivers are called with ``send_robust``: one that raises is logged (by Django's
``django.dispatch`` logger, with the traceback) and never stops the worker or
the other receivers. When nobody listens, sending costs one attribute check.

This module only defines the signals (it imports no model, so a project may
connect receivers from any module); they are sent by ``transitions.sending``,
the one place that sends them (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Mapping

from django.dispatch import Signal

from django_strait.rules.states import RunStatus

#: A run was created and is queued (sent once the creating transaction commits).
run_enqueued = Signal()
#: A worker started an attempt of a run.
run_started = Signal()
#: An attempt succeeded; the run is completed.
run_succeeded = Signal()
#: An attempt failed and the run will be retried (it is queued again until ``available_at``).
run_failed = Signal()
#: An attempt failed and the handler declared the failure permanent: the run is ``failed``.
run_failed_permanently = Signal()
#: The run went to the dead-letter queue (attempts exhausted, non-retryable, or asked for).
run_dead_lettered = Signal()
#: The run was dropped (``on_exhaustion="discard"``, a Discard action, or a person).
run_discarded = Signal()
#: The run was canceled (before it started, or when its running attempt returned).
run_canceled = Signal()
#: A process run's child was killed for memory (docs/process-execution.md), sent with the attempt's
#: signal: adds ``preset`` (the attempt's) and ``next_preset`` (None at the last preset).
run_oom = Signal()

#: An endpoint's circuit opened (sent by the circuit breaker, ``sender=EndpointCircuit``).
circuit_opened = Signal()
#: An endpoint's circuit closed again (sent by the circuit breaker).
circuit_closed = Signal()
#: A project crossed its budget's soft limit (once per project per day).
budget_soft_limit = Signal()

#: A workflow run was triggered (``sender=WorkflowRun``; ``workflow_run_id``, ``workflow``).
workflow_started = Signal()
#: Every step of a workflow run finished without failing it.
workflow_completed = Signal()
#: A workflow run failed: a step failed without ``continue_on_failure``, or it stalled
#: (``error_type``: ``workflow.step_failed`` or ``workflow.stalled``; ``error``).
workflow_failed = Signal()

#: A completion webhook was delivered (``sender=WebhookDelivery``): ``delivery_id``, ``event``,
#: ``url``, ``run_id`` (the run's, or the workflow run's for workflow events), ``attempt``,
#: ``status_code``, ``duration_ms``.
webhook_delivered = Signal()
#: A delivery attempt failed: the same arguments, with ``error_type``, ``error``, and
#: ``retrying`` (True: due again at ``next_attempt_at``; False: given up, ``failed``).
webhook_failed = Signal()

#: The signal for each status a run can reach when an attempt ends or a person acts.
SIGNAL_FOR_STATUS: Mapping[str, Signal] = {
    RunStatus.COMPLETED: run_succeeded,
    RunStatus.QUEUED: run_failed,
    RunStatus.FAILED: run_failed_permanently,
    RunStatus.DEAD_LETTER: run_dead_lettered,
    RunStatus.DISCARDED: run_discarded,
    RunStatus.CANCELED: run_canceled,
}


#: Every signal an ended attempt may send.
ATTEMPT_SIGNALS = (*SIGNAL_FOR_STATUS.values(), run_oom)


#: The signal for each status a workflow run can reach (canceled sends none).
WORKFLOW_SIGNALS: Mapping[str, Signal] = {
    "running": workflow_started,
    "completed": workflow_completed,
    "failed": workflow_failed,
}
