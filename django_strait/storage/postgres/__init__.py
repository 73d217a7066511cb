"""The PostgreSQL storage backend: the portable one, with its hot steps in one round trip each.

Claim, start, hold, record, limits and budgets are single statements from
``queries.sql`` (``FOR UPDATE SKIP LOCKED`` for the claim, which starts its runs
too; data-modifying CTEs for the hold and the record), sent through server-bound
cursors. On a worker's connections that reach PostgreSQL directly, the statements
named in ``STRAIT["PREPARE_STATEMENTS"]`` (all three by default) are prepared, their
plans dropped every ``STRAIT["PLAN_LIFETIME"]`` (docs/settings.md, "Prepared statements").
The verbs it does no better than the portable ORM are the ORM's statements,
called by name through ``storage.common``: this class is the ORM backend's
sibling, not its subclass, and lists every verb it has.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet

from django_strait import bounds
from django_strait.conf import strait_settings
from django_strait.models import BudgetLedger, JobRun, Project, Workflow, WorkflowRun
from django_strait.resilience import budgets, limits
from django_strait.resilience.health import Health, Sample, concurrency_share
from django_strait.resilience.policy import Change, Circuit, Result
from django_strait.rows import check_finite, explain
from django_strait.sql import keep_plans, prepares, server_bound_cursor
from django_strait.storage import common, webhooks
from django_strait.storage import workflows as workflow_moves
from django_strait.storage.floors import BOTTOM, ClaimFloors, Segment
from django_strait.storage.moves import is_moved_row, retry_moved
from django_strait.storage.orm.claims import claimed
from django_strait.storage.orm.records import recorded
from django_strait.storage.parts import RECORD_PARTS, RecordPart, following_parts, note
from django_strait.storage.postgres import enqueue, history, layout, queries, workflows
from django_strait.storage.postgres.layout import runs_partitioned
from django_strait.storage.values import (
    Advanced,
    Claimed,
    HistoryDay,
    Hold,
    RecordBatch,
    Recorded,
    Rescue,
    Rescued,
    StaleRuns,
    Waiting,
)


def _moved(rows: list[tuple], parts: Sequence[RecordPart], results: list[object]) -> dict[int, Any]:
    """The runs a record statement moved (id -> status); the rows its parts returned (no
    run id: record.<part>.returned) are read by their parts into ``results``."""
    if all(row[0] is not None for row in rows):
        return dict(rows)  # the hot path: no part returned rows
    returned = [row[1] for row in rows if row[0] is None]
    for part in parts:
        read_rows = getattr(part, "returned", None)
        if read_rows is not None:
            results.append(read_rows(returned))
    return {row[0]: row[1] for row in rows if row[0] is not None}


#: The claim without floors: every priority, from the front of the index.
_WHOLE_INDEX = Segment(*bounds.PRIORITY, *BOTTOM)

#: Namespace for our advisory lock keys (the first argument of the two-int form).
LOCK_NAMESPACE = 0x5374  # "St"


class PostgresStorage:
    """Django-strait's tables on PostgreSQL, the hot steps in hand-written SQL."""

    can_listen = True
    #: Its workflow statements' id lists are arrays (``storage.postgres.workflows``).
    workflow_statements = workflows.STATEMENTS
    following = following_parts(workflows.STATEMENTS)
    pages_by_primary_key = True
    row_estimates = True
    keeps_dead_rows = True

    def __init__(self, alias: str, parts: Sequence[RecordPart] = RECORD_PARTS) -> None:
        self.alias = alias
        self.parts = tuple(parts)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r}>"

    def atomic(self) -> Any:
        """A transaction (or a savepoint inside one) on this database."""
        return common.atomic(self.alias)

    def claim_transaction(self) -> Any:
        """The transaction a claim, its gate and its start share."""
        return self.atomic()

    def keep_plans(self, now: float) -> None:
        """Let this connection prepare the statements ``PREPARE_STATEMENTS`` names, their
        plans dropped every ``PLAN_LIFETIME`` seconds (``sql.keep_plans``)."""
        if strait_settings.PREPARE_STATEMENTS:
            keep_plans(connections[self.alias], now, strait_settings.PLAN_LIFETIME)

    def _execute(self, sql: str, params: dict[str, Any], *, name: str = "") -> list[tuple]:
        """Run one statement; prepared once per connection where ``name`` is one of
        ``PREPARE_STATEMENTS`` and the connection is a worker's that reaches PostgreSQL
        directly (``sql.keep_plans``)."""
        connection = connections[self.alias]
        prepare = name in strait_settings.PREPARE_STATEMENTS and prepares(connection)
        with server_bound_cursor(connection) as cursor:
            # None, not False: psycopg's own prepare_threshold, if a project set one, still applies.
            cursor.execute(sql, params, prepare=prepare or None)
            return cursor.fetchall() if cursor.description else []

    def _partitioned(self) -> bool:
        """Whether this database's runs table is partitioned by status class (``layout``)."""
        return runs_partitioned(self.alias)

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
        """One statement (queries.sql, "claim"); with ``start``, the runs come back begun.

        Its transaction commits without waiting for its WAL flush (the statement says
        so): a claim lost in a server crash only means the runs are queued again,
        which a crash implies anyway; results are still recorded durably. That saves
        a disk flush per batch, most of a batch's claim time on a plain disk.
        """
        if limit <= 0:
            return []
        params: dict[str, Any] = {"limit": limit, "worker": worker_id, "begin": start}
        if not queues:
            variant = "any"
        elif len(queues) == 1:
            variant, params["queue"] = "one", queues[0]
        else:
            variant, params["queues"] = "many", list(queues)
        segments = floors.segments(time.monotonic()) if floors else [_WHOLE_INDEX]
        params.update(
            low=[s.low for s in segments],
            high=[s.high for s in segments],
            after_at=[s.after_at for s in segments],
            after_id=[s.after_id for s in segments],
        )
        rows = self._execute(queries.claim(variant, self._partitioned()), params, name="claim")
        if floors:
            floors.learn([(row[-2], (row[-1], row[0])) for row in rows], limit, now)
        runs = [claimed(*row[:-3]) for row in rows]
        if start:
            for run, row in zip(runs, rows, strict=True):
                run.begun, run.started_at = True, row[-3]
        return runs

    def claim_external(
        self, worker_id: str, *, queues: Sequence[str], limit: int, now: dt.datetime
    ) -> list[Claimed]:
        # The same commit as the worker's claim (asynchronous unless the server has
        # synchronous standbys), set apart: the ORM's statements.
        with connections[self.alias].cursor() as cursor:
            cursor.execute(
                "SELECT set_config('synchronous_commit', CASE WHEN current_setting("
                "'synchronous_standby_names') <> '' THEN current_setting('synchronous_commit')"
                " ELSE 'off' END, true)"
            )
        return common.claim_external(self.alias, worker_id, queues, limit, now)

    def set_deadlines(
        self, worker_id: str, deadlines: Mapping[int, dt.datetime], *, now: dt.datetime
    ) -> list[int]:
        return common.set_deadlines(self.alias, worker_id, deadlines, now)

    def start(self, worker_id: str, runs: Sequence[Claimed], *, now: dt.datetime) -> list[Claimed]:
        """One statement (queries.sql, "start") for the runs the claim did not begin."""
        return common.start(self._workflow_db(), runs, lambda ids: self._start(worker_id, ids))

    def _start(self, worker_id: str, ids: list[int]) -> list[tuple]:
        return self._execute(
            queries.by_id("start", self._partitioned()),
            {"ids": ids, "worker": worker_id},
            name="start",
        )

    def hold(
        self, worker_id: str, holds: Sequence[Hold], *, now: dt.datetime, begun: bool = False
    ) -> None:
        if not holds:
            return
        self._execute(
            queries.by_id("hold", self._partitioned()),
            {
                "expected": "executing" if begun else "dequeued",
                "ids": [h.run_id for h in holds],
                "available_at": [h.available_at for h in holds],
                "error_type": [h.error_type for h in holds],
                "error": [h.error for h in holds],
                "endpoint": [h.endpoint for h in holds],
                "worker": worker_id,
            },
        )

    def hold_began(self, attempts: Mapping[int, int], reason: str) -> dict[int, dt.datetime]:
        return common.hold_began(self.alias, attempts, reason)

    def waiting(self, *, queues: Sequence[str], now: dt.datetime) -> list[Waiting]:
        return common.waiting(self.alias, queues, now)

    def unclaim(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        return common.unclaim(self.alias, worker_id, run_ids, now)

    def heartbeat(self, worker_id: str, run_ids: Sequence[int], *, now: dt.datetime) -> int:
        return common.heartbeat(self.alias, worker_id, run_ids, now)

    def let_go(self, worker_id: str, run_ids: Sequence[int]) -> list[int]:
        return common.let_go(self.alias, worker_id, run_ids)

    def record(self, batch: RecordBatch) -> Recorded:
        if not batch.records:
            return Recorded()
        params = _record_columns(batch)
        # A part with nothing to write is left out: planning the statement is much of
        # its time, for a batch of one run more than half (docs/benchmarks.md).
        parts = [part for part in self.parts if part.wanted(batch)]
        for part in parts:
            params.update(part.params(batch))
        sql = queries.record(tuple(part.name for part in parts), self._partitioned())
        following = [part for part in self.following if part.wanted(batch)]
        results: list[object] = []
        if not following:
            try:
                rows = self._execute(sql, params, name="record")  # the hot path
            except OperationalError as exc:
                if not is_moved_row(exc):
                    raise
                # A run of the batch was canceled or rescued meanwhile, and moved.
                rows = retry_moved(self.alias, lambda: self._execute(sql, params))
            moved = _moved(rows, parts, results)
        else:

            def record_and_follow() -> dict[int, Any]:
                results.clear()  # a retried try: only the last try's results count
                moved = _moved(self._execute(sql, params, name="record"), parts, results)
                results.extend(part.apply(batch, moved, self.alias) for part in following)
                return moved

            moved = retry_moved(self.alias, record_and_follow)
        done = recorded(self.alias, batch, moved)
        for result in results:
            note(done, result)
        return done

    def enforce_limits(
        self, pending: Sequence[limits.Pending], *, now: dt.datetime
    ) -> list[limits.Held]:
        if not pending:
            return []
        by_job: dict[int, list[int]] = {}
        scores: dict[int, float | None] = {}
        for run in pending:
            by_job.setdefault(run.job_id, []).append(run.run_id)
            scores[run.job_id] = run.health_score
        jobs = sorted(by_job)
        rows = self._execute(
            queries.get("limits"),
            {
                "job_id": jobs,
                "n": [len(by_job[j]) for j in jobs],
                "share": [concurrency_share(scores[j]) for j in jobs],
                "kept": limits.RATE_LOG_KEPT,
            },
        )
        decisions = [limits.Decision(*row, health_score=scores[row[0]]) for row in rows]
        return limits.holds(decisions, by_job, now)

    def reserve_budgets(
        self, pending: Sequence[budgets.Pending], *, now: dt.datetime
    ) -> budgets.Allocation:
        if not pending:
            return budgets.Allocation()
        projects = sorted({p.project_id for p in pending})
        day = budgets.today(now)
        try:
            rows = self._execute(queries.get("budget.lock"), {"day": day, "projects": projects})
        except Exception as exc:  # a ledger day that cannot be read: say which (its runs wait)
            ledgers = BudgetLedger.objects.using(self.alias)
            explain(ledgers.filter(project_id__in=projects, day=day).select_related("project"), exc)
            raise
        ledgers = {row[1]: _ledger_day(row) for row in rows}
        out = budgets.allocate(pending, ledgers, now=now)
        if out.added:
            warned = {ledger.project_id for ledger in out.crossed}
            pids = sorted(out.added)
            self._execute(
                queries.by_id("budget.reserve", self._partitioned()),
                {
                    "ledger": [ledgers[p].id for p in pids],
                    "amount": [out.added[p] for p in pids],
                    "warn": [p in warned for p in pids],
                    "runs": list(out.reserved),
                    "cost": list(out.reserved.values()),
                },
            )
        return out

    def settle_budgets(self, spends: list[budgets.Spend]) -> None:
        common.settle_budgets(self.alias, spends)

    def crossed_soft_limits(
        self, spends: list[budgets.Spend], *, now: dt.datetime
    ) -> list[budgets.LedgerDay]:
        return common.crossed_soft_limits(self.alias, spends, now)

    def release_budget_waiting(self, project_id: int, *, now: dt.datetime) -> int:
        return common.release_budget_waiting(self.alias, project_id, now)

    def load_active_circuits(self) -> dict[str, Circuit]:
        return common.load_active_circuits(self.alias)

    def win_circuit_probe(
        self, url: str, *, now: dt.datetime, cooldown: dt.timedelta, lost_before: dt.datetime
    ) -> bool:
        return common.win_circuit_probe(self.alias, url, now, cooldown, lost_before)

    def apply_circuit_results(
        self, results: Mapping[str, Sequence[Result]], *, now: dt.datetime, threshold: int
    ) -> tuple[list[Circuit], list[Change]]:
        return common.apply_circuit_results(self.alias, results, now, threshold)

    def reset_circuits(self, url: str | None, *, now: dt.datetime) -> tuple[int, list[Change]]:
        return common.reset_circuits(self.alias, url, now)

    def load_unwell_endpoints(self) -> dict[str, Health]:
        return common.load_unwell_endpoints(self.alias)

    def win_health_probe(self, url: str, *, now: dt.datetime, cooldown: dt.timedelta) -> bool:
        return common.win_health_probe(self.alias, url, now, cooldown)

    # -- what people ask for: the ORM's statements ------------------------------------

    # -- workflows (docs/workflows.md): each applies what ``dag`` decided ---------------

    def _workflow_db(self) -> workflow_moves.Db:
        return workflow_moves.Db(self.alias, self.workflow_statements)

    def begin_workflow_run(
        self, workflow: Workflow, payload: Any, key: str | None, *, now: dt.datetime
    ) -> tuple[WorkflowRun, Advanced]:
        """Insert a run of ``workflow`` with its step runs, its root steps started; atomically."""
        return common.begin_workflow_run(self._workflow_db(), workflow, payload, key, now)

    def advance_workflows(self, run_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Move on the workflow runs of the steps whose runs are ``run_ids``."""
        return common.advance_workflows(self._workflow_db(), run_ids, now)

    def settle_workflow_runs(self, wr_ids: Sequence[int], *, now: dt.datetime) -> Advanced:
        """Settle whole workflow runs anew, every step read (after a redefinition)."""
        return common.settle_workflow_runs(self._workflow_db(), wr_ids, now)

    def cancel_workflow_run(self, wr_id: int, *, now: dt.datetime) -> tuple[Advanced, list[int]]:
        """Cancel a moving workflow run and its waiting steps; return the change and its live runs."""
        return common.cancel_workflow_run(self._workflow_db(), wr_id, now)

    def fail_stalled_workflow_runs(self, *, now: dt.datetime, stale_after: float) -> Advanced:
        """Fail the running workflow runs in which nothing progressed for ``stale_after`` s."""
        return common.fail_stalled_workflow_runs(self._workflow_db(), now, stale_after)

    # -- the webhook outbox (docs/webhooks.md) -----------------------------------------

    def claim_deliveries(
        self, *, limit: int, now: dt.datetime, lease: dt.timedelta
    ) -> list[webhooks.Due]:
        """Lease up to ``limit`` due deliveries, oldest due first; skip rows held elsewhere."""
        return common.claim_deliveries(self.alias, limit, now, lease)

    def settle_deliveries(self, settled: Sequence[webhooks.Settled]) -> None:
        """Write what became of claimed deliveries (only those still pending move)."""
        common.settle_deliveries(self.alias, settled)

    def hold_deliveries(self, pks: Sequence[int], *, until: dt.datetime) -> None:
        """Put claimed deliveries back until ``until``, spending no attempt."""
        common.hold_deliveries(self.alias, pks, until)

    def redeliver(self, pks: Sequence[int], *, now: dt.datetime) -> int:
        """Make deliveries due now with a fresh attempt budget; return how many."""
        return common.redeliver(self.alias, pks, now)

    def fold_health(self, samples: Sequence[Sample]) -> None:
        """Fold answers sampled outside a record (webhook deliveries) into endpoint health."""
        common.fold_health(self.alias, samples)

    def forget_health(self, urls: Sequence[str]) -> int:
        """Forget the health scores of ``urls``; return how many were forgotten."""
        return common.forget_health(self.alias, urls)

    # -- decided transitions: people's, the reaper's, external workers' ---------------

    def replay(self, run_id: int, *, by: str, now: dt.datetime, payload: Any = ...) -> JobRun:
        """Queue a replayable run again, its budget reset; raise InvalidTransition else."""
        return common.replay(self.alias, run_id, by, now, payload)

    def replay_many(self, run_ids: Sequence[int], *, by: str, now: dt.datetime) -> int:
        """Replay the replayable runs among ``run_ids`` in one statement; return how many moved."""
        return common.replay_many(self.alias, run_ids, by, now)

    def cancel(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Cancel a run that may be canceled now; raise InvalidTransition else."""
        return common.cancel(self.alias, run_id, now)

    def drop(self, run_id: int, *, now: dt.datetime) -> JobRun:
        """Discard a run no worker holds; raise InvalidTransition else."""
        return common.drop(self.alias, run_id, now)

    def request_cancel(self, run_id: int, *, now: dt.datetime) -> bool:
        """Flag an executing run to be canceled when its attempt returns."""
        return common.request_cancel(self.alias, run_id, now)

    def stale_runs(
        self, now: dt.datetime, *, stale_after: float, waiting_stale_after: float, limit: int
    ) -> StaleRuns:
        """Find and lock up to ``limit`` stale runs; call in the transaction that rescues them."""
        return common.stale_runs(self.alias, now, stale_after, waiting_stale_after, limit)

    def rescue(
        self,
        rescues: Sequence[Rescue],
        *,
        unreadable: Mapping[int, str],
        now: dt.datetime,
        stale_after: float,
        isolate: bool = False,
    ) -> list[Rescued]:
        """Apply decided rescues and dead-letter unreadable stale runs; return the rescued."""
        return common.rescue_runs(self.alias, rescues, unreadable, now, stale_after, isolate)

    def set_external_ids(self, ids: Mapping[int, uuid.UUID]) -> list[int]:
        """Give runs without an OJS id theirs; return those that took it."""
        return common.set_external_ids(self.alias, ids)

    def set_external_retry_delay(self, run_id: int, delay_ms: int) -> bool:
        """Note the delay of a nacked run's retry in its OJS envelope."""
        return common.set_external_retry_delay(self.alias, run_id, delay_ms)

    def insert_one(self, run: JobRun) -> JobRun:
        return common.insert_one(self.alias, run)

    def insert_by_name(self, name: str, payload: Any, text: str, **fields: Any) -> JobRun | None:
        return enqueue.insert_by_name(self.alias, name, payload, text, **fields)

    def insert_many(
        self,
        template: JobRun,
        payloads: Sequence[Any],
        texts: Sequence[str],
        keys: Sequence[str] | None,
        batch_size: int,
    ) -> tuple[list[JobRun], set[int]]:
        return enqueue.insert_many(self.alias, template, payloads, texts, keys, batch_size)

    @contextlib.contextmanager
    def lead(self, duty: str) -> Iterator[bool]:
        """Open a transaction and yield whether this caller took ``duty``'s advisory lock in it.

        ``pg_try_advisory_xact_lock`` is held until the transaction ends: no session
        state between transactions (PgBouncer's transaction mode), and a worker
        that dies mid-round releases it with its connection.
        """
        with transaction.atomic(using=self.alias):
            params = {"namespace": LOCK_NAMESPACE, "key": lock_key(duty)}
            [(led,)] = self._execute(queries.get("lead"), params)
            yield bool(led)

    def table_estimate(self, model: type) -> int | None:
        # Through Django's cursor: not a hot statement, and the admin's query log shows it.
        connection = connections[self.alias]
        with connection.cursor() as cursor:
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(queries.get("estimate"), {"table": table})
            row = cursor.fetchone()
        # -1: never vacuumed or analyzed, so PostgreSQL does not know yet.
        return int(row[0]) if row and row[0] >= 0 else None

    def dead_run_rows(self) -> int | None:
        return sum(dead for _, dead in self._dead_rows())

    def _dead_rows(self) -> list[tuple[str, int]]:
        """Each leaf of the runs table (the table itself when plain) and its dead rows."""
        with connections[self.alias].cursor() as cursor:
            cursor.execute(queries.get("dead_rows"), {"table": JobRun._meta.db_table})
            return [(leaf, int(dead or 0)) for leaf, dead in cursor.fetchall()]

    def vacuum_runs(self) -> None:
        connection = connections[self.alias]
        if connection.in_atomic_block:
            raise RuntimeError("vacuum_runs: VACUUM cannot run inside a transaction")
        # Partitioned by status class, the live leaf is where runs die (each claim, start
        # and record leaves a version behind) and what the claim reads: only the leaves
        # with dead rows are vacuumed, never a whole history that has none.
        leaves = [leaf for leaf, dead in self._dead_rows() if dead]
        table = ", ".join(leaves) or connection.ops.quote_name(JobRun._meta.db_table)
        with connection.cursor() as cursor:
            # SKIP_LOCKED: a second leader's VACUUM (rounds that overlapped) skips, not waits.
            # No ANALYZE: statistics that see few queued runs turn the claim from its own
            # index (where the floors start it past the dead entries) to the status index,
            # which it then walks dead entries and all (docs/operations.md, "Vacuum and the
            # claim"). VACUUM still keeps the table's row and page counts.
            cursor.execute(f"VACUUM (SKIP_LOCKED) {table}")

    def prepare_history(self, now: dt.datetime) -> list[str]:
        """Finish days a round left detached, then make the days ahead (``layout``)."""
        if not self._partitioned():
            return []
        done = []
        for runs_table, attempts_table in history.leftovers(self.alias):
            history.finish(self.alias, runs_table, attempts_table)
            done.append(runs_table)
        try:
            with transaction.atomic(using=self.alias), connections[self.alias].cursor() as c:
                c.execute(f"SET LOCAL lock_timeout = '{layout.DDL_LOCK_TIMEOUT}'")
                done += layout.make_ranges(c, layout.days_around(now.astimezone(dt.UTC).date()))
        except OperationalError as exc:
            if not history.lock_busy(exc):
                raise
            # Records into history held the lock: the next round makes them (days ahead).
        return done

    def history_days(self, before: dt.datetime, counted: bool = False) -> list[HistoryDay]:
        if not self._partitioned():
            return []
        return history.days_before(self.alias, before, counted)

    def detach_history_day(self, day: HistoryDay) -> bool:
        return history.detach_day(self.alias, day)

    def finish_history_day(self, day: HistoryDay) -> int:
        return history.finish(self.alias, day.runs_table, day.attempts_table)

    def query_estimate(self, rows: QuerySet) -> int | None:
        sql, params = rows.query.sql_with_params()
        with connections[self.alias].cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return int(plan[0]["Plan"]["Plan Rows"])


def lock_key(duty: str) -> int:
    """A stable 32-bit key for ``duty`` (the same on every host and Python version)."""
    return zlib.crc32(duty.encode()) - 2**31


def _ledger_day(row: tuple) -> budgets.LedgerDay:
    lid, pid, day, reserved, spent, warned, name, budget, ratio = row
    check_finite(BudgetLedger._meta.db_table, lid, reserved=reserved, spent=spent)
    check_finite(Project._meta.db_table, pid, daily_budget=budget, soft_limit_ratio=ratio)
    return budgets.LedgerDay(lid, pid, name, budget, ratio, day, reserved, spent, warned)


def _record_columns(batch: RecordBatch) -> dict[str, Any]:
    """The records as one array per column: a constant statement, and fast to adapt."""
    recs = batch.records
    return {
        "id": [r.run_id for r in recs],
        "attempt": [r.attempt for r in recs],
        "status": [r.transition.target for r in recs],
        "available_at": [r.available_at for r in recs],
        "result": [None if r.result is None else json.dumps(r.result) for r in recs],
        "error": [r.error for r in recs],
        "error_type": [r.error_type for r in recs],
        "endpoint": [r.endpoint for r in recs],
        "started_at": [r.started_at for r in recs],
        "finished_at": [r.finished_at for r in recs],
        "duration_ms": [r.duration_ms for r in recs],
        "outcome": [r.outcome for r in recs],
        "status_code": [r.status_code for r in recs],
        "excerpt": [r.response_excerpt for r in recs],
        "job_id": [r.job_id for r in recs],
        "cost": [r.spent for r in recs],
        "worker": batch.worker_id,
    }
