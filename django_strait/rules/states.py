"""Run states and the table of allowed transitions (docs/concepts.md).

This module is data only: the transitions module (``django_strait.transitions``)
is the one place that applies these rules to rows.
"""

from __future__ import annotations

import enum

from django.db import models


class RunStatus(models.TextChoices):
    """Where a run stands in its life."""

    #: Waiting to be claimed; not claimable before ``available_at``.
    QUEUED = "queued", "Queued"
    #: Claimed by a worker that has not started it yet.
    DEQUEUED = "dequeued", "Dequeued"
    #: An attempt is in progress on a worker.
    EXECUTING = "executing", "Executing"
    #: A workflow run, or a run waiting for its children.
    WAITING = "waiting", "Waiting"
    #: The last attempt succeeded.
    COMPLETED = "completed", "Completed"
    #: A recognised permanent failure (handler said FAIL); keeps its errors.
    FAILED = "failed", "Failed"
    #: Exhausted or non-retryable: the dead-letter queue, replayable, never pruned.
    DEAD_LETTER = "dead_letter", "Dead letter"
    #: Dropped on purpose (policy or handler said DISCARD); keeps its errors.
    DISCARDED = "discarded", "Discarded"
    #: Canceled by a person or by code before it finished.
    CANCELED = "canceled", "Canceled"
    #: The worker holding it died (stale heartbeat); the reaper moves it on.
    SYSTEM_FAILED = "system_failed", "System failed"


S = RunStatus

TERMINAL: frozenset[str] = frozenset(
    {S.COMPLETED, S.FAILED, S.DEAD_LETTER, S.DISCARDED, S.CANCELED}
)
#: Statuses a replay may start from.
REPLAYABLE: frozenset[str] = frozenset({S.DEAD_LETTER, S.FAILED, S.DISCARDED, S.SYSTEM_FAILED})
#: Statuses in which a worker holds the run.
IN_FLIGHT: frozenset[str] = frozenset({S.DEQUEUED, S.EXECUTING})
#: The statuses that are not terminal, in this order:
#: the live leaf of a partitioned runs table (``storage.postgres.layout``).
LIVE: tuple[str, ...] = (S.QUEUED, S.DEQUEUED, S.EXECUTING, S.WAITING, S.SYSTEM_FAILED)


class Transition(enum.Enum):
    """A named change of status: the statuses it may start from, the status it leads to, and why."""

    CLAIM = ({S.QUEUED}, S.DEQUEUED, "a worker takes it")
    #: A claimed run goes back unstarted (shutdown, or a gate): no attempt spent.
    UNCLAIM = ({S.DEQUEUED}, S.QUEUED, "held by a limit, circuit or budget; no attempt spent")
    START = ({S.DEQUEUED}, S.EXECUTING, "attempt + 1")
    COMPLETE = ({S.EXECUTING}, S.COMPLETED, "succeeded")
    RETRY = ({S.EXECUTING, S.SYSTEM_FAILED}, S.QUEUED, "failed, attempts left: due after a delay")
    DEAD_LETTER = (
        {S.EXECUTING, S.SYSTEM_FAILED},
        S.DEAD_LETTER,
        "exhausted, non-retryable, or handler DeadLetter",
    )
    #: An attempt's outcome (or the reaper) drops the run.
    DISCARD = (
        {S.EXECUTING, S.SYSTEM_FAILED},
        S.DISCARDED,
        "exhausted with on_exhaustion=discard, or handler Discard",
    )
    #: A person drops a run that no worker holds (admin, API, command).
    DROP = ({S.QUEUED, S.DEAD_LETTER, S.SYSTEM_FAILED}, S.DISCARDED, "a person drops it")
    FAIL = ({S.EXECUTING}, S.FAILED, "handler Fail, or Strait-Action fail")
    #: From executing only when the attempt returns (``cancel_requested`` set meanwhile).
    CANCEL = (
        {S.QUEUED, S.DEQUEUED, S.WAITING, S.EXECUTING},
        S.CANCELED,
        "an executing run once its attempt returns",
    )
    RESCUE = ({S.DEQUEUED, S.EXECUTING, S.WAITING}, S.SYSTEM_FAILED, "the reaper: no heartbeat")
    REPLAY = (set(REPLAYABLE), S.QUEUED, "attempt budget reset")

    def __init__(self, sources: set[str], target: str, note: str) -> None:
        self.sources = frozenset(sources)
        self.target = target
        self.note = note

    @property
    def label(self) -> str:
        return self.name.lower()


def allowed(transition: Transition, status: str) -> bool:
    """Return whether ``transition`` may start from ``status``."""
    return status in transition.sources


def diagram() -> str:
    """The state diagram of the transition table, as Mermaid (docs/concepts.md shows it)."""
    lines = ["stateDiagram-v2", "    [*] --> queued: trigger()"]
    order = list(RunStatus)
    for transition in Transition:
        for source in sorted(transition.sources, key=order.index):
            lines.append(
                f"    {source} --> {transition.target}: {transition.label} ({transition.note})"
            )
    return "\n".join(lines)


class InvalidTransition(Exception):
    """A transition was asked of a run whose status does not allow it."""

    def __init__(self, run_id: int, status: str, transition: Transition) -> None:
        allowed = ", ".join(sorted(transition.sources))
        super().__init__(
            f"run {run_id} is {status}: cannot {transition.label} it (allowed from: {allowed})"
        )
        self.run_id = run_id
        self.status = status
        self.transition = transition
