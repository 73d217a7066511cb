"""The portable storage backend: the Django ORM, on SQLite or any database Django supports.

Every state change and protection step as guarded ORM updates in short
transactions; rows are locked where the database can lock them. The
PostgreSQL backend is this one with its hot statements replaced
(``storage.postgres``); the conformance suite (tests/conformance) runs both.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from django_strait.models import JobRun
from django_strait.resilience import budgets, limits
from django_strait.resilience.health import Health
from django_strait.resilience.policy import Change, Circuit, Result
from django_strait.states import Transition
from django_strait.storage import circuit_rows, workflows
from django_strait.storage.floors import ClaimFloors
from django_strait.storage.moves import retry_moved
from django_strait.storage.orm import (
    claims,
    enqueue,
    external,
    people,
    processes,
    protection,
    records,
    rescue,
)
from django_strait.storage.parts import FOLLOWING_PARTS, RECORD_PARTS, RecordPart
from django_strait.storage.values import (
    Claimed,
    HistoryDay,
    Hold,
    RecordBatch,
    Recorded,
    Rescued,
    Waiting,
)


class OrmStorage:
    """Django-strait's tables through the ORM, on the database ``alias``."""

    #: Whether workers can LISTEN for new runs here (else they poll).
    can_listen = False

    def __init__(self, alias: str, parts: Sequence[RecordPart] = RECORD_PARTS) -> None:
        self.alias = alias
        self.parts = tuple(parts)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r}>"

    def atomic(self) -> Any:
        """A transaction (or a savepoint inside one) on this database."""
        return transaction.atomic(using=self.alias)

    def claim_transaction(self) -> Any:
        """The transaction a claim, its gate and its start share."""
        return self.atomic()

    def keep_plans(self, now: float) -> None:
        """Nothing: the ORM's statements are not prepared."""

    # -- the worker's runs ------------------------------------------------------------

    def claim(
        self,
        worker_id: str,
        *,
        queues: Sequence[str],
        limit: int,
        now: dt.datetime,
        floors: ClaimFloors | None = None,
        start: bool = False,
    ) -> list[Claimed]:
        """Move up to ``limit`` due queued runs to dequeued, in claim order; call in a transaction.

        ``floors`` are not used: see docs/operations.md, "Vacuum and the claim". Nor is
        ``start``: the ORM's claim takes two statements already, its start a third.
        """
        return claims.claim(self.alias, worker_id, queues, limit, now) if limit > 0 else []

    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        """Move up to ``limit`` due external runs to dequeued, queue by queue; in a transaction."""
        return external.claim(self.alias, worker_id, queues, limit, now) if limit > 0 else []

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        """Set the deadlines of executing external runs ``worker_id`` holds; return those moved."""
        return external.set_deadlines(self.alias, worker_id, deadlines, now) if deadlines else []

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        """Move claimed runs to executing, spending an attempt; return those that moved."""
        if not runs:
            return []
        unbegun = [r.id for r in runs if not r.begun]
        moved = (
            {rid: (attempt, at) for rid, attempt, at in self._start(worker_id, unbegun, now)}
            if unbegun
            else {}
        )
        started = []
        for run in runs:  # in claim order, whatever order the database answered in
            if run.begun:
                run.attempt += 1
                started.append(run)
            elif run.id in moved:
                run.attempt, run.started_at = moved[run.id]
                started.append(run)
        steps = {run.step_run_id: run for run in started if run.step_run_id}
        if steps:  # plain runs: nothing more
            for step_run_id, (step, member, problem) in workflows.members(
                self.alias, list(steps)
            ).items():
                run = steps[step_run_id]
                run.step, run.workflow = step, member
                if problem:  # it fails without running (run.invalid), the others start
                    run.row_error = run.row_error or problem
        return started

    def _start(self, worker_id: str, ids: list[int], now: dt.datetime) -> list[tuple]:
        return claims.start(self.alias, worker_id, ids, now)

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        """Put claimed runs back to queued until their ``available_at``, spending no attempt."""
        if begun:  # this backend's claim never begins an attempt
            raise ValueError("hold(begun=True): runs claimed here are never begun")
        if holds:
            claims.hold(self.alias, worker_id, holds, now)

    def hold_began(self, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
        """When each run's current hold period for ``reason`` began (see ``Storage``)."""
        return claims.hold_began(self.alias, attempts, reason)

    def waiting(self, *, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
        """Group the queued runs of ``queues`` that a claim at ``now`` cannot take, by why."""
        return claims.waiting(self.alias, queues, now)

    def unclaim(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Put claimed-but-unstarted runs back to queued; no attempt is spent."""
        if not run_ids:
            return 0
        return retry_moved(self.alias, lambda: claims.unclaim(self.alias, worker_id, run_ids, now))

    def heartbeat(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        """Mark the runs this worker holds as alive."""
        if not run_ids:
            return 0
        # Beside records moving the same runs to history on a partitioned table.
        return retry_moved(
            self.alias, lambda: claims.heartbeat(self.alias, worker_id, run_ids, now)
        )

    def let_go(self, worker_id: str, run_ids: Sequence[int]) -> list[int]:
        """Return the runs among ``run_ids`` not executing under this worker, or asked to cancel."""
        return processes.let_go(self.alias, worker_id, run_ids) if run_ids else []

    def record(self, batch: RecordBatch) -> Recorded:
        """Move each run as its record says, append its attempt, and apply every part; atomically."""
        if not batch.records:
            return Recorded()
        return records.record(self.alias, batch, (*self.parts, *FOLLOWING_PARTS))

    # -- protection (inside a claim) ----------------------------------------------------

    def enforce_limits(
        self, pending: Sequence[limits.Pending], *, now: dt.datetime
    ) -> list[limits.Held]:
        """Return the claimed runs their jobs' concurrency and rate limits hold back."""
        return protection.enforce_limits(self.alias, pending, now) if pending else []

    def reserve_budgets(
        self, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        """Reserve each run's cost from its project's day, in claim order, ledgers locked."""
        if not pending:
            return budgets.Allocation()
        return protection.reserve_budgets(self.alias, pending, now)

    def settle_budgets(self, spends: list[budgets.Spend]) -> None:
        """Turn reservations into what attempts cost, on ledgers and runs (outside a record)."""
        if spends:
            protection.settle_budgets(self.alias, spends)

    def crossed_soft_limits(
        self, spends: list[budgets.Spend], *, now: dt.datetime
    ) -> list[budgets.LedgerDay]:
        """After a record: the days whose spending crossed their soft limit, marked so once."""
        return protection.crossed_soft_limits(self.alias, spends, now) if spends else []

    def release_budget_waiting(self, project_id: int, *, now: dt.datetime) -> int:
        """Make the runs waiting for a project's budget due now."""
        return protection.release_waiting(self.alias, project_id, now)

    def load_active_circuits(self) -> dict[str, Circuit]:
        """Return the circuits that are open, half-open, or closed with failures counted."""
        return protection.load_active_circuits(self.alias)

    def win_circuit_probe(
        self, url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
    ) -> bool:
        """Take the single half-open probe of ``url``; True if this call won it."""
        return protection.win_circuit_probe(self.alias, url, now, cooldown, lost_before)

    def apply_circuit_results(
        self, results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int
    ) -> tuple[list[Circuit], list[Change]]:
        """Fold each endpoint's results into its circuit; return the circuits and the changes."""
        if not results:
            return [], []
        return circuit_rows.apply_circuit_results(self.alias, results, now, threshold)

    def reset_circuits(self, url: str | None, *, now: dt.datetime) -> tuple[int, list[Change]]:
        """Close one circuit (all of them when ``url`` is None); return how many changed, and how."""
        return protection.reset_circuits(self.alias, url, now)

    def load_unwell_endpoints(self) -> dict[str, Health]:
        """Return the endpoints that are degraded or unhealthy."""
        return protection.load_unwell(self.alias)

    def win_health_probe(self, url: str, *, now: dt.datetime, cooldown: dt.timedelta) -> bool:
        """Take the one probe of an unhealthy endpoint this cooldown; True if this call won it."""
        return protection.win_health_probe(self.alias, url, now, cooldown)

    # -- what people ask for ------------------------------------------------------------

    def apply(self, run_id: int, transition: Transition, **updates: Any) -> JobRun:
        """Move one run through ``transition`` if its status allows; raise InvalidTransition else."""
        return retry_moved(
            self.alias, lambda: people.apply(self.alias, run_id, transition, updates)
        )

    def replay_updates(self, by: str, now: dt.datetime) -> dict[str, Any]:
        """What a replay writes beside the status."""
        return people.replay_updates(by, now)

    def replay_many(self, run_ids: Sequence[int], *, by: str, now: dt.datetime) -> int:
        """Replay the replayable runs among ``run_ids`` in one statement; return how many moved."""
        if not run_ids:
            return 0
        return retry_moved(self.alias, lambda: people.replay_many(self.alias, run_ids, by, now))

    def request_cancel(self, run_id: int, *, now: dt.datetime) -> bool:
        """Flag an executing run to be canceled when its attempt returns."""
        return retry_moved(self.alias, lambda: people.request_cancel(self.alias, run_id, now))

    # -- the reaper ---------------------------------------------------------------------

    def rescue_batch(
        self,
        now: dt.datetime,
        *,
        stale_after: float,
        waiting_stale_after: float,
        limit: int,
        rng: random.Random,
        isolate: bool = False,
    ) -> tuple[int, list[Rescued]]:
        """Rescue up to ``limit`` stale runs in one transaction; return how many were found, and the rescued."""
        return retry_moved(self.alias, lambda: rescue.rescue_batch(
            self.alias, now, stale_after=stale_after, waiting_stale_after=waiting_stale_after,
            limit=limit, rng=rng, isolate=isolate,
        ))  # fmt: skip

    # -- making runs --------------------------------------------------------------------

    def insert_one(self, run: JobRun) -> JobRun:
        """Insert a run (or, for a used idempotency key, return the run that holds it)."""
        return enqueue.insert_one(self.alias, run)

    def insert_by_name(self, name: str, payload: Any, text: str, **fields: Any) -> JobRun | None:
        """Insert a run reading the job's defaults in the statement itself; None: not here."""
        return None

    def insert_many(
        self,
        template: JobRun,
        payloads: Sequence[Any],
        texts: Sequence[str],
        keys: Sequence[str] | None,
        batch_size: int,
    ) -> tuple[list[JobRun], set[int]]:
        """Insert one run like ``template`` per payload; with keys, also which this call made."""
        return enqueue.insert_many(self.alias, template, payloads, keys, batch_size)

    # -- duties and views ---------------------------------------------------------------

    @contextlib.contextmanager
    def lead(self, duty: str) -> Iterator[bool]:
        """Open a transaction and yield whether this caller leads ``duty`` for it.

        Without a shared lock, every caller leads: the duties' guarded updates keep
        a second one harmless (SQLite serializes writers and runs on one host).
        """
        with self.atomic():
            yield True

    def table_estimate(self, model: type) -> int | None:
        """The table's row count as the planner knows it (None: count it)."""
        return None

    def query_estimate(self, rows: QuerySet) -> int | None:
        """The row count the planner expects of ``rows`` (None: count it)."""
        return None

    def dead_run_rows(self) -> int | None:
        """The runs table's dead rows as the database counts them (None: it needs no vacuum)."""
        return None

    def vacuum_runs(self) -> None:
        """Vacuum and analyze the runs table, outside any transaction (here: nothing to do)."""

    def prepare_history(self, now: dt.datetime) -> list[str]:
        """History is one table here: no days to make."""
        return []

    def history_days(self, before: dt.datetime, counted: bool = False) -> list[HistoryDay]:
        """History is one table here: the pruner deletes it row by row."""
        return []

    def detach_history_day(self, day: HistoryDay) -> bool:
        raise NotImplementedError("history has no days on this database")

    def finish_history_day(self, day: HistoryDay) -> int:
        raise NotImplementedError("history has no days on this database")

    #: Whether deep pages are read by skipping ids in the primary key's index first.
    pages_by_primary_key = False
    #: Whether the database keeps row estimates worth showing (else count).
    row_estimates = False
    #: Whether dead row versions gather for the vacuum duty (SQLite changes rows in place).
    keeps_dead_rows = False
