"""What the storage backends take and give: runs claimed, held, recorded, rescued.

Plain values: the worker, the transitions and the tests build and read them
without a database.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from django_strait.dispatch.events import WORKFLOW_EVENT_FOR_STATUS
from django_strait.rules.resilience.budgets import Spend
from django_strait.rules.resilience.health import Sample
from django_strait.rules.resilience.policy import Change as CircuitChange
from django_strait.rules.resilience.policy import Circuit, Result
from django_strait.rules.states import RunStatus, Transition

ZERO = Decimal(0)


@dataclass(slots=True)
class Claimed:
    """A run a worker holds, with what executing it needs."""

    id: int
    job_id: int
    payload: Any
    attempt: int
    attempts_before_replay: int
    max_attempts: int | None
    retry_overrides: dict[str, Any] | None
    #: The endpoint the run's last attempt called (where failing over starts from).
    endpoint_used: str = ""
    started_at: dt.datetime | None = None
    #: The endpoint the claim gate chose for this attempt (HTTP jobs).
    endpoint: str = ""
    #: What the claim reserved from the job's project budget for this attempt.
    reserved_cost: Decimal | None = None
    #: Why the stored payload (or retry override) could not be read: the run then
    #: fails without running (``run.invalid``), a bad row harming only itself.
    row_error: str = ""
    #: The workflow step run this run executes (None: a plain run).
    step_run_id: int | None = None
    #: A workflow step's ``{"run_id", "step", "parents"}`` (parents: each parent step's
    #: result by step name), loaded when it starts; None for a plain run.
    workflow: dict[str, Any] | None = None
    #: A workflow step's (workflow run id, step id), loaded with ``workflow``: its
    #: record moves the DAG on without reading its step run again.
    step: tuple[int, int] | None = None
    #: A process run's memory preset for this attempt (chosen after the claim from the
    #: two below and its job's preset; "" for threads).
    preset: str = ""
    #: The run's own preset, as the claim read it (set after an OOM kill; "" if none).
    run_preset: str = ""
    #: The preset its job recommends, as the claim read it ("" if none, or expired).
    recommended_preset: str = ""
    #: The claim began this attempt in the database (``claim(start=True)``): executing,
    #: its attempt spent, ``started_at`` set. ``attempt`` stays the count before it
    #: until ``start`` counts it; a hold gives it back (``hold(begun=True)``).
    begun: bool = False

    @property
    def budget_used(self) -> int:
        """Attempts spent since the run was queued or last replayed."""
        return self.attempt - self.attempts_before_replay


@dataclass(frozen=True, slots=True)
class Hold:
    """A claimed run a gate sends back unstarted: when it may be tried again, and why."""

    run_id: int
    available_at: dt.datetime
    #: The run's error type while it waits (``circuit.open``), and the message.
    error_type: str
    error: str
    endpoint: str = ""


@dataclass(frozen=True, slots=True)
class Waiting:
    """Queued runs that are not due, grouped by why: their error type and whether the job runs."""

    reason: str
    enabled: bool
    runs: int
    #: The earliest ``available_at`` among them.
    next_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Record:
    """The end of one attempt: the run's next status and its attempt row."""

    run_id: int
    attempt: int
    transition: Transition
    started_at: dt.datetime
    finished_at: dt.datetime
    duration_ms: int
    outcome: str
    available_at: dt.datetime | None = None
    result: Any = None
    error: str = ""
    error_type: str = ""
    endpoint: str = ""
    status_code: int | None = None
    response_excerpt: str = ""
    #: The job's name, for signals, logs and metrics (not written by the record).
    job: str = ""
    #: The job's id, for the per-minute rollup.
    job_id: int = 0
    #: Budgets: the job's project, what the claim reserved, and what the attempt cost.
    project_id: int | None = None
    reserved_cost: Decimal | None = None
    cost: Decimal | None = None
    #: The workflow step run of the run (None: a plain run); the DAG moves on with it.
    step_run_id: int | None = None
    #: The step's (workflow run id, step id), as its start loaded them (None: unknown).
    step: tuple[int, int] | None = None
    #: Process runs (docs/process-execution.md): the preset the attempt ran at, the run's preset from
    #: now on (the next one after an OOM), and whether the attempt is free of the retry
    #: budget (an OOM retried at the next preset).
    preset: str = ""
    run_preset: str = ""
    free_attempt: bool = False
    #: The preset the job's future runs should start at (after an OOM), or "".
    recommend: str = ""
    #: The worker holding the attempt, where a batch records several workers' attempts
    #: (the OJS fast door's acks, recorded together); "" for the batch's ``worker_id``.
    worker: str = ""

    @property
    def spent(self) -> Decimal | None:
        """What a budgeted attempt spends (None: not a budgeted attempt)."""
        return (self.cost or ZERO) if self.reserved_cost is not None else None


@dataclass(frozen=True)
class RecordBatch:
    """One write of ended attempts, with the health samples of their endpoints."""

    worker_id: str
    records: Sequence[Record]
    #: One sample per endpoint of the batch (``resilience.health.summarize``).
    health: Sequence[Sample] = ()
    #: The results to fold into circuits, by endpoint, in the order the attempts ended
    #: (``CircuitBreaker.worth``: none while every circuit is quiet and all went well).
    circuits: Mapping[str, Sequence[Result]] = field(default_factory=dict)

    def worker_of(self, record: Record) -> str:
        """The worker whose attempt ``record`` ends (the record's own, else the batch's)."""
        return record.worker or self.worker_id

    @cached_property
    def spends(self) -> list[Spend]:
        """The settlements of the records that reserved budget."""
        return [
            Spend(r.run_id, r.project_id, r.started_at, r.reserved_cost, r.spent, r.attempt)
            for r in self.records
            if r.reserved_cost is not None and r.project_id is not None and r.spent is not None
        ]


@dataclass(frozen=True, slots=True)
class Change:
    """A workflow run that changed status: what the signals announce (``transitions.workflows``)."""

    workflow_run_id: int
    workflow: str
    status: str
    error_type: str = ""
    error: str = ""


@dataclass(slots=True)
class Advanced:
    """The workflow runs a move changed, and the step runs it started (their runs are new)."""

    changes: list[Change] = field(default_factory=list)
    started: list[int] = field(default_factory=list)

    def add(self, other: Advanced) -> Advanced:
        """Take ``other``'s changes and starts after this one's; return self."""
        self.changes += other.changes
        self.started += other.started
        return self

    @property
    def ended(self) -> int:
        """How many workflow runs completed or failed (their webhooks may be owed)."""
        return sum(c.status in WORKFLOW_EVENT_FOR_STATUS for c in self.changes)


@dataclass(slots=True)
class Recorded:
    """Which records moved their run (run id -> new status), found it gone, or found it
    recorded; and what their steps changed of their workflow runs."""

    moved: dict[int, str] = field(default_factory=dict)
    #: Runs no longer executing under this worker at that attempt (canceled, replayed, reaped).
    lost: list[int] = field(default_factory=list)
    #: Runs an earlier try of the same record had recorded (its COMMIT landed, its answer not).
    already: list[int] = field(default_factory=list)
    #: What the batch's steps changed of their workflow runs (announced by ``transitions``).
    workflows: Advanced = field(default_factory=Advanced)

    @property
    def workflows_ended(self) -> int:
        """Workflow runs the batch's steps ended (completed or failed): their webhooks may be owed."""
        return self.workflows.ended

    #: The circuits the batch's results wrote, as written, and those whose state changed.
    circuits: list[Circuit] = field(default_factory=list)
    circuit_changes: list[CircuitChange] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Stale:
    """A run found without a worker: what the rescue needs to know about it."""

    id: int
    job_id: int
    status: str
    attempt: int
    attempts_before_replay: int
    max_attempts: int | None
    retry_overrides: dict[str, Any] | None
    claimed_by: str
    cancel_requested: bool
    started_at: dt.datetime | None
    #: The last sign of life: heartbeat, else dequeue (in flight) or update (waiting).
    last_sign: dt.datetime
    #: What the lost attempt reserved from its project's budget.
    reserved_cost: Decimal | None = None
    #: An external worker's run (OJS): the deadline it passed (its visibility timeout).
    visible_until: dt.datetime | None = None

    @property
    def lost_attempt(self) -> int:
        """The number of the attempt the worker lost.

        An executing run lost the attempt it had started; a dequeued run never
        started one, and a waiting run's attempt ended when it began to wait, so
        the rescue spends one for them.
        """
        if self.status == RunStatus.EXECUTING and self.attempt > 0:
            return self.attempt
        return self.attempt + 1


@dataclass(frozen=True, slots=True)
class Rescued:
    """A stale run the reaper moved on: where it ended, and why."""

    run: Stale
    transition: Transition
    error: str
    #: When a retried run is due again (None for the other ends).
    available_at: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class StaleRuns:
    """What the reaper found, locked for its transaction: the stale runs, and those whose
    rows cannot be read (run id -> what cannot be, field by field)."""

    runs: list[Stale] = field(default_factory=list)
    unreadable: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.runs) + len(self.unreadable)


#: What a rescue may end in: canceled (cancel was asked), or on from system_failed.
_RESCUE_ENDS = (Transition.CANCEL, Transition.RETRY, Transition.DEAD_LETTER, Transition.DISCARD)


@dataclass(frozen=True, slots=True)
class Rescue:
    """A stale run and what was decided for it (``decisions.after_lost``): CANCEL (its cancel
    was asked), or RETRY, DEAD_LETTER or DISCARD after it is rescued to system_failed."""

    run: Stale
    then: Transition
    #: When a retried run is due again.
    available_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.then not in _RESCUE_ENDS:
            raise ValueError(
                f"run {self.run.id}: a rescue ends in cancel, retry, dead_letter or discard, "
                f"not {self.then.name.lower()}"
            )
        if self.then is Transition.RETRY and self.available_at is None:
            raise ValueError(f"run {self.run.id}: a rescue's retry needs its available_at")


def json_column(value: Any) -> Any:
    """A JSON column read by raw SQL, decoded as the ORM would (both backends answer text)."""
    return json.loads(value) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class HistoryDay:
    """One day of finished runs kept apart (PostgreSQL, partitioned): what retention drops whole."""

    day: dt.date
    #: The day's runs and attempts tables (attempts: None if it has none).
    runs_table: str
    attempts_table: str | None
    #: The jobs (by id) with runs that finished that day.
    job_ids: frozenset[int]
    #: How many runs finished that day: counted only when asked (``history_days(counted=True)``,
    #: ``strait_prune --dry-run``); None otherwise.
    runs: int | None = None

    @property
    def start(self) -> dt.datetime:
        return utc_day(self.day)[0]

    @property
    def end(self) -> dt.datetime:
        return utc_day(self.day)[1]


def utc_day(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The day's start and end (exclusive) in UTC: the bounds of a day of history."""
    start = dt.datetime.combine(day, dt.time(), dt.UTC)
    return start, start + dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What an OJS batch enqueue gives a run it just inserted: its id, envelope and due time."""

    run_id: int
    ojs_id: Any
    envelope: dict[str, Any]
    #: When the job asked to run (None: as inserted).
    due: dt.datetime | None = None
