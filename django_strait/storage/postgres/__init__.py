"""The PostgreSQL storage backend: the portable one, with its hot steps in one round trip each.

Claim, start, hold, record, limits and budgets are single statements from
``queries.sql`` (``FOR UPDATE SKIP LOCKED`` for the claim, which starts its runs
too; data-modifying CTEs for the hold and the record), sent through server-bound
cursors. On a worker's connections that reach PostgreSQL directly, the statements
named in ``STRAIT["PREPARE_STATEMENTS"]`` (all three by default) are prepared, their
plans dropped every ``STRAIT["PLAN_LIFETIME"]`` (docs/settings.md, "Prepared statements").
Everything else is the ORM's (``OrmStorage``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet

from django_strait import bounds
from django_strait.conf import strait_settings
from django_strait.models import BudgetLedger, JobRun, Project
from django_strait.resilience import budgets, limits
from django_strait.resilience.health import concurrency_share
from django_strait.rows import check_finite, explain
from django_strait.sql import prepares, server_bound_cursor
from django_strait.storage.floors import BOTTOM, ClaimFloors, Segment
from django_strait.storage.moves import is_moved_row, retry_moved
from django_strait.storage.orm import OrmStorage
from django_strait.storage.orm.claims import claimed
from django_strait.storage.orm.records import recorded
from django_strait.storage.parts import FOLLOWING_PARTS
from django_strait.storage.postgres import enqueue, history, layout, queries
from django_strait.storage.postgres.layout import runs_partitioned
from django_strait.storage.values import Claimed, HistoryDay, Hold, RecordBatch, Recorded

#: The claim without floors: every priority, from the front of the index.
_WHOLE_INDEX = Segment(*bounds.PRIORITY, *BOTTOM)

#: Namespace for our advisory lock keys (the first argument of the two-int form).
LOCK_NAMESPACE = 0x5374  # "St"


class PostgresStorage(OrmStorage):
    """Django-strait's tables on PostgreSQL, the hot steps in hand-written SQL."""

    can_listen = True
    pages_by_primary_key = True
    row_estimates = True
    keeps_dead_rows = True

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
        return super().claim_external(worker_id, queues=queues, limit=limit, now=now)

    def _start(self, worker_id: str, ids: list[int], now: dt.datetime) -> list[tuple]:
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
        following = [part for part in FOLLOWING_PARTS if part.wanted(batch)]
        ended = 0
        if not following:
            try:
                moved = dict(self._execute(sql, params, name="record"))  # the hot path
            except OperationalError as exc:
                if not is_moved_row(exc):
                    raise
                # A run of the batch was canceled or rescued meanwhile, and moved.
                moved = dict(retry_moved(self.alias, lambda: self._execute(sql, params)))
        else:

            def record_and_follow() -> dict[int, Any]:
                moved = dict(self._execute(sql, params, name="record"))
                nonlocal ended
                ended = sum(part.apply(batch, moved, self.alias) or 0 for part in following)
                return moved

            moved = retry_moved(self.alias, record_and_follow)
        done = recorded(self.alias, batch, moved)
        done.workflows_ended = ended
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
