"""The storage interface: every state change and protection step the worker and the surfaces need.

Oban's engines and River's driver interface: one contract, implementations as
siblings (``OrmStorage``, portable; ``PostgresStorage``, its hot steps in one
statement each; a project's own, named by ``STRAIT["STORAGE"]``), each a class
called with the database alias, and one conformance suite that pins the contract
for any of them (tests/conformance; docs/architecture.md, "A new storage
backend"). Callers get theirs from ``storage.backend()``.

The contract, beyond the signatures:

- every change of a run's status is guarded: it moves only runs in the statuses
  its transition allows (``states.Transition``), and the worker's only runs it
  holds (``claimed_by``) at the attempt it knows;
- a claim takes due queued runs in claim order (priority, then due time, then
  id), never a run another worker holds, and what it admits of them under
  limits and budgets is admitted in that order; with a worker's floors
  (``storage.floors``) a run queued behind a floor after the worker's claims
  passed it may be taken later, but within the floors' rescan interval;
- within a claim's transaction, limits and budgets see every claim committed
  before them, so they hold across any number of workers and hosts;
- "now" for a claim is the transaction's time: the runs it starts carry it as
  ``started_at``, and rate-limit admissions are stamped with it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, Protocol

from django.db.models import QuerySet

from django_strait.models import JobRun, Workflow, WorkflowRun
from django_strait.rules.resilience import budgets, limits
from django_strait.rules.resilience.health import Health, Sample
from django_strait.rules.resilience.policy import Change, Circuit, Result
from django_strait.storage.floors import ClaimFloors
from django_strait.storage.values import (
    Advanced,
    Claimed,
    Envelope,
    HistoryDay,
    Hold,
    RecordBatch,
    Recorded,
    Rescue,
    Rescued,
    StaleRuns,
    Waiting,
)
from django_strait.storage.webhooks import Due, Settled


class DatabaseVerbs(Protocol):
    """The database a backend serves, what it can do, and its transactions."""

    alias: str
    #: Whether workers can LISTEN for new runs on this database (else they poll).
    can_listen: bool
    #: Whether deep list pages skip ids in the primary key's index first.
    pages_by_primary_key: bool
    #: Whether the database keeps row estimates (``table_estimate``) worth showing.
    row_estimates: bool
    #: Whether the runs table gathers dead rows that the vacuum duty removes (``vacuum_runs``).
    keeps_dead_rows: bool

    def atomic(self) -> AbstractContextManager[Any]:
        """A transaction (a savepoint inside one) on this database."""

    def claim_transaction(self) -> AbstractContextManager[Any]:
        """The transaction that a claim, its gate and its start share."""

    def keep_plans(self, now: float) -> None:
        """Let this thread's connection prepare the worker's hot statements, if this database
        prepares any (called by a worker's claim and record threads before each call;
        ``now`` is ``time.monotonic()``)."""


class RunVerbs(Protocol):
    """The worker's runs, and external workers' (OJS, docs/ojs.md)."""

    def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str],
        limit: int,
        now: dt.datetime,
        floors: ClaimFloors | None = None,
        start: bool = False,
        exclude: Sequence[str] = (),
    ) -> list[Claimed]:
        """Move up to ``limit`` due queued runs to dequeued for ``worker_id``, in claim order.

        ``floors`` (the worker's) let a backend start its index scans where its last
        claims left off, and learn from this one; a backend may ignore them.
        ``start``: a backend may begin the runs' attempts in the claim itself (runs
        come back ``begun``: executing in the database); one that cannot ignores it.
        ``exclude``: queues not to claim from (the paused ones, ``storage.queues``), given
        only with no ``queues``.
        """

    # External workers' runs (OJS, docs/ojs.md).
    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        """Move up to ``limit`` due runs of external-worker jobs to dequeued, queue by queue."""

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        """Set the deadlines (the reaper's) of executing external runs ``worker_id`` holds.

        Return the runs that moved: a run another worker holds now keeps its deadline.
        """

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        """Move claimed runs to executing, spending an attempt; return those that moved.

        Runs the claim began (``begun``) are only counted: no statement.
        """

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        """Put claimed runs back to queued until their ``available_at``, spending no attempt.

        ``begun``: the claim began their attempts; they get them back.
        """

    def hold_began(self, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
        """Return when each run's current hold period for ``reason`` began.

        ``attempts``: run id -> the attempts the run had when claimed. A run whose
        latest period is not for ``reason``, or follows another attempt, is left out.
        """

    def waiting(self, *, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
        """Group the queued runs of ``queues`` that a claim at ``now`` cannot take, by why."""

    def unclaim(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Put claimed-but-unstarted runs back to queued; return how many."""

    def heartbeat(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Mark the runs this worker holds as alive; return how many."""

    def record(self, batch: RecordBatch) -> Recorded:
        """Move each run as its record says, append its attempt, apply every record part.

        A run the record cannot move is ``lost``, or ``already`` when this worker's
        attempt row for that record is there (an earlier try's COMMIT landed). Each
        record ends the attempt of ``batch.worker_of(record)``: its own ``worker`` (an
        OJS server's acks of several workers), else the batch's.
        """

    # The worker's process runs (docs/process-execution.md).
    def let_go(self, worker_id: str, run_ids: Sequence[int]) -> list[int]:
        """Return the runs among ``run_ids`` not executing under this worker, or asked to cancel."""


class ProtectionVerbs(Protocol):
    """Protection steps: limits and budgets inside a claim, circuits and endpoint health."""

    def enforce_limits(
        self, pending: Sequence[limits.Pending], *, now: dt.datetime
    ) -> list[limits.Held]:
        """Return the claimed runs that their jobs' concurrency and rate limits hold back."""

    def reserve_budgets(
        self, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        """Reserve each run's cost from its project's day, in claim order."""

    def settle_budgets(self, spends: list[budgets.Spend]) -> None:
        """Turn reservations into what attempts cost, outside a record (the reaper's way)."""

    def crossed_soft_limits(
        self, spends: list[budgets.Spend], *, now: dt.datetime
    ) -> list[budgets.LedgerDay]:
        """Return the days whose spending crossed their soft limit, marked so only once."""

    def release_budget_waiting(self, project_id: int, *, now: dt.datetime) -> int:
        """Make the runs waiting for a project's budget due now."""

    # Budgets over several databases (storage.orm.reservations): the first three are
    # asked of the control database's backend, ``source`` naming the runs' alias.
    def reserve_budgets_for(
        self, source: str, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        """Reserve for ``source``'s claimed runs (their attempts named) in claim order, in a
        transaction of its own, noting each reservation; one left by a claim of the same
        attempt that rolled back is given back first."""

    def settle_budgets_for(self, source: str, spends: Sequence[budgets.Spend]) -> int:
        """Close ``source``'s reservations named by ``spends`` (run, attempt): release what
        each reserved, spend its cost; one closed already changes nothing. How many closed."""

    def stale_reservations(
        self, source: str, *, before: dt.datetime, limit: int
    ) -> list[budgets.Reservation]:
        """Return ``source``'s reservations made before ``before``, oldest first."""

    def mark_reserved(self, reserved: Mapping[int, Decimal]) -> None:
        """Note on claimed runs (in the claim's transaction) what was reserved for them."""

    def reservation_fates(self, attempts: Sequence[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """Return what became of each (run, attempt) (``budgets.Fate``), leaving out runs a
        claim in progress holds."""

    def load_active_circuits(self) -> dict[str, Circuit]:
        """Return the circuits that are not closed, or have failures counted."""

    def win_circuit_probe(
        self, url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
    ) -> bool:
        """Take the single half-open probe of ``url``; True if this call won it."""

    def apply_circuit_results(
        self, results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int
    ) -> tuple[list[Circuit], list[Change]]:
        """Fold each endpoint's results into its circuit; return the circuits and the changes."""

    def reset_circuits(self, url: str | None, *, now: dt.datetime) -> tuple[int, list[Change]]:
        """Close one circuit, or all; return how many changed, and how."""

    def load_unwell_endpoints(self) -> dict[str, Health]:
        """Return the endpoints that are degraded or unhealthy."""

    def win_health_probe(self, url: str, *, now: dt.datetime, cooldown: dt.timedelta) -> bool:
        """Take the one probe of an unhealthy endpoint this cooldown; True if this call won it."""


class WorkflowVerbs(Protocol):
    """Workflows (docs/workflows.md). Each applies what ``dag`` decided, in one transaction
    with the webhook deliveries it owes, and returns what changed: no signal is sent here
    (``transitions.workflows.announce`` sends them)."""

    def begin_workflow_run(
        self, workflow: Workflow, payload: Any, key: str | None, *, now: dt.datetime
    ) -> tuple[WorkflowRun, Advanced]:
        """Insert a run of ``workflow`` with its step runs, its root steps started; atomically.

        Raises ``IntegrityError`` when ``key`` is already used for this workflow.
        """

    def advance_workflows(self, run_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Move on the workflow runs of the steps whose runs are ``run_ids`` (runs that moved
        outside a record: people's transitions, the reaper's); call in the moves' transaction."""

    def settle_workflow_runs(self, wr_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Settle whole workflow runs anew, every step read (after a redefinition)."""

    def cancel_workflow_run(self, wr_id: int, *, now: dt.datetime) -> tuple[Advanced, list[int]]:
        """Cancel a running or failed workflow run and its waiting steps; return the change
        and its steps' live runs (the caller cancels those through the cancel transition)."""

    def fail_stalled_workflow_runs(self, *, now: dt.datetime, stale_after: float) -> Advanced:
        """Fail the running workflow runs in which steps wait, none is started, and nothing
        progressed for ``stale_after`` seconds."""


class OutboxVerbs(Protocol):
    """The webhook outbox (docs/webhooks.md): deliveries are written with the transitions
    that owe them; these claim, hold, settle and redeliver them."""

    def claim_deliveries(self, *, limit: int, now: dt.datetime, lease: dt.timedelta) -> list[Due]:
        """Lease up to ``limit`` due deliveries for ``lease``, oldest due first, skipping rows
        held elsewhere; a row that cannot be read comes back with its ``row_error``."""

    def settle_deliveries(self, settled: Sequence[Settled]) -> None:
        """Write what became of claimed deliveries; only those still pending move."""

    def hold_deliveries(self, pks: Sequence[int], *, until: dt.datetime) -> None:
        """Put claimed deliveries back until ``until``, spending no attempt (an open circuit)."""

    def redeliver(self, pks: Sequence[int], *, now: dt.datetime) -> int:
        """Make deliveries due now with a fresh attempt budget, whatever their status."""

    def fold_health(self, samples: Sequence[Sample]) -> None:
        """Fold answers sampled outside a record (webhook deliveries) into endpoint health."""

    def forget_health(self, urls: Sequence[str]) -> int:
        """Forget the health scores of ``urls``; return how many were forgotten."""


class DecidedVerbs(Protocol):
    """Decided transitions (docs/architecture.md, "Where the decision lives"): each verb
    applies a change already decided above storage, and writes only its own columns.

    People's: each raises ``InvalidTransition`` when the run's status forbids the move,
    ``JobRun.DoesNotExist`` when there is no such run.
    """

    def replay(self, run_id: int, *, by: str, now: dt.datetime, payload: Any = ...) -> JobRun:
        """Queue a replayable run again (REPLAY): due now, its attempt budget reset, ``by``
        and ``now`` noted; ``payload`` (when given) replaces its payload. Return it fresh."""

    def replay_many(self, run_ids: Sequence[int], *, by: str, now: dt.datetime) -> int:
        """Replay the replayable runs among ``run_ids``; return how many moved."""

    def cancel(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Cancel a run (CANCEL): finished now, no worker or deadline left. Return it fresh."""

    def drop(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Discard a run no worker holds (DROP): finished now. Return it fresh."""

    def request_cancel(self, run_id: int, *, now: dt.datetime) -> bool:
        """Flag an executing run to be canceled when its attempt returns."""

    # The reaper's: it finds stale runs, decides (``decisions.after_lost``), then applies.
    def stale_runs(
        self, now: dt.datetime, *, stale_after: float, waiting_stale_after: float, limit: int
    ) -> StaleRuns:
        """Return up to ``limit`` stale runs, locked for the caller's transaction (skipping
        those another reaper holds), and those whose rows cannot be read."""

    def rescue(
        self,
        rescues: Sequence[Rescue],
        *,
        unreadable: Mapping[int, str],
        now: dt.datetime,
        stale_after: float,
        isolate: bool = False,
    ) -> list[Rescued]:
        """Apply each decided rescue: RESCUE to system_failed with a ``worker.lost`` attempt,
        then its ``then`` (or CANCEL alone); a run that moved meanwhile is left alone.
        Dead-letter each ``unreadable`` run (``run.invalid``, saying what). ``isolate``:
        each run in a savepoint, one that raises dead-lettered (``reaper.rescue_failed``)."""

    # External workers' (OJS, docs/ojs.md).
    def set_external_ids(self, ids: Mapping[int, uuid.UUID]) -> list[int]:
        """Give each run without an OJS id the one in ``ids``; return the runs that took it."""

    def set_external_retry_delay(self, run_id: int, delay_ms: int) -> bool:
        """Note in a run's OJS envelope the delay its nack's retry was given."""

    def set_external_progress(
        self, run_id: int, worker: str, attempt: int, progress: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Keep ``progress`` in the OJS envelope of the attempt ``worker`` holds (``attempt``,
        the run's own count), its number never lowered within the attempt; return what is
        kept, or None when the worker does not hold that attempt (nothing changes)."""

    def set_external_envelopes(self, envelopes: Sequence[Envelope]) -> None:
        """Give runs just inserted by a batch enqueue their OJS id, envelope and (when one is
        named) due time; call in the insert's transaction."""


class InsertVerbs(Protocol):
    """Making runs."""

    def insert_one(self, run: JobRun) -> JobRun:
        """Insert a run, or return the run that holds its idempotency key."""

    def insert_by_name(self, name: str, payload: Any, text: str, **fields: Any) -> JobRun | None:
        """Insert a run reading its job's defaults in the statement; None: not done here."""

    def insert_many(
        self,
        template: JobRun,
        payloads: Sequence[Any],
        texts: Sequence[str],
        keys: Sequence[str] | None,
        batch_size: int,
    ) -> tuple[list[JobRun], set[int]]:
        """Insert one run like ``template`` per payload; with keys, also which this call made.

        Return the runs made (with keys: those this call inserted, each with its key, or
        none, and ``trigger_many`` reads them) and, with keys, their ids."""


class DutyVerbs(Protocol):
    """The duties' steps and the views' estimates; history by days where the database
    keeps it so (the pruner's)."""

    def lead(self, duty: str) -> AbstractContextManager[bool]:
        """Open a transaction and say whether this caller leads ``duty`` in it."""

    def table_estimate(self, model: type) -> int | None:
        """The table's row count as the planner knows it (None: count it)."""

    def query_estimate(self, rows: QuerySet) -> int | None:
        """The row count the planner expects of ``rows`` (None: count it)."""

    def dead_run_rows(self) -> int | None:
        """The runs table's dead rows as the database counts them (None: it needs no vacuum)."""

    def vacuum_runs(self) -> None:
        """Vacuum and analyze the runs table, outside any transaction."""

    def prepare_history(self, now: dt.datetime) -> list[str]:
        """Make the days of history ahead of ``now`` and finish days a round left half
        dropped; return what it made or finished (nothing where history has no days)."""

    def history_days(self, before: dt.datetime, counted: bool = False) -> list[HistoryDay]:
        """The days of history that ended by ``before``, oldest first ([]: no days here);
        with ``counted``, each with its runs counted (a scan of the day)."""

    def detach_history_day(self, day: HistoryDay) -> bool:
        """Take ``day`` out of history (short; under a leader's lead): False if its lock
        stayed busy. ``finish_history_day`` then drops it."""

    def finish_history_day(self, day: HistoryDay) -> int:
        """Drop a detached ``day``; return how many runs went (those still owing a webhook
        are kept back, outside their day)."""

    def prune_runs(self, rows: QuerySet) -> int:
        """Delete the finished runs ``rows`` selects (the pruner's decision: past retention,
        owing no webhook), their attempts and holds with them; return how many runs went."""


class Storage(
    DatabaseVerbs,
    RunVerbs,
    ProtectionVerbs,
    WorkflowVerbs,
    OutboxVerbs,
    DecidedVerbs,
    InsertVerbs,
    DutyVerbs,
    Protocol,
):
    """Where runs live, and every way they move: every concern's verbs, in one contract.

    A backend implements them all (``storage.protocol_gaps`` lists what one lacks);
    the concerns are split only so that each can be read, and documented, alone.
    """
