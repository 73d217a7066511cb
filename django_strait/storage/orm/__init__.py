"""The portable storage backend: the Django ORM, on SQLite or any database Django supports.

Every state change and protection step as guarded ORM updates in short
transactions; rows are locked where the database can lock them. The statements
are plain functions in this package's modules; the verbs the PostgreSQL backend
(``storage.postgres``, a sibling, not a subclass) shares with this one are in
``storage.common``. The conformance suite (tests/conformance) runs both.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

from django.db.models import QuerySet

from django_strait.models import JobRun
from django_strait.rules.resilience import budgets, limits
from django_strait.storage import common
from django_strait.storage import workflows as workflow_moves
from django_strait.storage.floors import ClaimFloors
from django_strait.storage.orm import claims, enqueue, protection, records
from django_strait.storage.orm.workflows import STATEMENTS as IN_LISTS
from django_strait.storage.parts import following_parts
from django_strait.storage.shared import (
    Backend,
    SharedDecidedVerbs,
    SharedOutboxVerbs,
    SharedProtectionVerbs,
    SharedRunVerbs,
    SharedWorkflowVerbs,
)
from django_strait.storage.values import (
    Claimed,
    HistoryDay,
    Hold,
    RecordBatch,
    Recorded,
)


class OrmStorage(
    Backend,
    SharedRunVerbs,
    SharedProtectionVerbs,
    SharedWorkflowVerbs,
    SharedOutboxVerbs,
    SharedDecidedVerbs,
):
    """Django-strait's tables through the ORM, on the database ``alias``.

    The verbs it shares with the PostgreSQL backend are its mixins' (``storage.shared``);
    these are its own statements.
    """

    #: Whether workers can LISTEN for new runs here (else they poll).
    can_listen = False
    #: How its workflow statements write id lists (``storage.orm.workflows``).
    workflow_statements: workflow_moves.Statements = IN_LISTS
    #: The record parts that follow the runs' move in its transaction.
    following = following_parts(IN_LISTS)

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
        exclude: Sequence[str] = (),
    ) -> list[Claimed]:
        """Move up to ``limit`` due queued runs to dequeued, in claim order; call in a transaction.

        ``floors`` are not used: see docs/operations.md, "Vacuum and the claim". Nor is
        ``start``: the ORM's claim takes two statements already, its start a third.
        """
        if limit <= 0:
            return []
        return claims.claim(self.alias, worker_id, queues, limit, now, exclude=exclude)

    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        """Move up to ``limit`` due external runs to dequeued, queue by queue; in a transaction."""
        return common.claim_external(self.alias, worker_id, queues, limit, now)

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        """Move claimed runs to executing, spending an attempt; return those that moved."""
        return common.start(
            self._workflow_db(), runs, lambda ids: claims.start(self.alias, worker_id, ids, now)
        )

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        """Put claimed runs back to queued until their ``available_at``, spending no attempt."""
        if begun:  # this backend's claim never begins an attempt
            raise ValueError("hold(begun=True): runs claimed here are never begun")
        if holds:
            claims.hold(self.alias, worker_id, holds, now)

    def record(self, batch: RecordBatch) -> Recorded:
        """Move each run as its record says, append its attempt, and apply every part; atomically."""
        if not batch.records:
            return Recorded()
        return records.record(self.alias, batch, (*self.parts, *self.following))

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

    # -- making runs --------------------------------------------------------------------

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
