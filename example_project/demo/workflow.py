"""The demo's workflow: a fan-in, and a step that retries with its own step-level policy.

``charge`` runs ``take-payment``, a job that allows one attempt and waits 30 s
between retries; the step overrides that with three attempts, linear from 1 s.
``ship`` waits for both ``reserve`` and ``charge``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_strait import define_workflow, trigger_workflow
from django_strait.models import RunAttempt, WorkflowRun

NAME = "order-fulfilment"
STEPS = [
    {"name": "check", "job": "check-order"},
    {"name": "reserve", "job": "reserve-stock", "depends_on": ["check"]},
    {"name": "charge", "job": "take-payment", "depends_on": ["check"],
     "max_attempts": 3, "retry_backoff": "linear", "retry_initial_delay_secs": 1,
     "retry_max_delay_secs": 5},
    {"name": "ship", "job": "ship-order", "depends_on": ["reserve", "charge"]},
]  # fmt: skip
JOBS = tuple(step["job"] for step in STEPS)


def start(order: int) -> WorkflowRun:
    """Define the demo workflow (idempotent) and start a run of it for ``order``."""
    define_workflow(NAME, steps=STEPS, description="The strait_demo workflow.")
    return trigger_workflow(NAME, {"order": order, "lines": 3, "amount": 120})


@dataclass(frozen=True, slots=True)
class StepLine:
    """One step as the demo prints it: status, attempts, and the waits between attempts."""

    step: str
    job: str
    status: str
    attempts: int
    waits: tuple[float, ...]


def step_lines(wr: WorkflowRun) -> list[StepLine]:
    """Return each step of ``wr`` in definition order (two queries)."""
    steps = list(wr.step_runs.select_related("step__job", "run").order_by("id"))
    attempts: dict[int, list[RunAttempt]] = {}
    run_ids = [sr.run_id for sr in steps if sr.run_id]
    for attempt in RunAttempt.objects.filter(run_id__in=run_ids).order_by("number"):
        attempts.setdefault(attempt.run_id, []).append(attempt)
    return [_line(sr, attempts.get(sr.run_id, [])) for sr in steps]


def _line(sr, attempts: list[RunAttempt]) -> StepLine:
    waits = tuple(
        (later.started_at - earlier.finished_at).total_seconds()
        for earlier, later in zip(attempts, attempts[1:], strict=False)
        if later.started_at and earlier.finished_at
    )
    count = sr.run.attempt if sr.run is not None else 0
    return StepLine(sr.step.name, sr.step.job.name, sr.status, count, waits)


def render(wr: WorkflowRun, lines: list[StepLine]) -> str:
    """Return the workflow run's status and a table of its steps."""
    rows = [
        f"Workflow {NAME!r}, run {wr.pk}: {wr.status}",
        f"  {'step':<8}  {'job':<14}  {'status':<9}  attempts  waits between attempts",
    ]
    for line in lines:
        waits = ", ".join(f"{w:.1f} s" for w in line.waits) or "-"
        rows.append(
            f"  {line.step:<8}  {line.job:<14}  {line.status:<9}  {line.attempts:>8}  {waits}"
        )
    rows.append(
        "  (charge: the step's own retry policy, 3 attempts linear from 1 s; "
        "its job alone allows 1)"
    )
    return "\n".join(rows)
