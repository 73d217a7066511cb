"""The PostgreSQL backend's duties' steps: leadership, estimates, vacuum, history by days.

Leadership is a transaction-scoped advisory lock; history by days is ``history``'s
detach-then-drop on a partitioned runs table (``layout``); vacuum takes only the
leaves of the runs table that gathered dead rows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import zlib
from collections.abc import Iterator

from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet

from django_strait.models import JobRun
from django_strait.storage.postgres import history, layout, queries
from django_strait.storage.postgres.statements import Statements
from django_strait.storage.values import HistoryDay

#: Namespace for our advisory lock keys (the first argument of the two-int form).
LOCK_NAMESPACE = 0x5374  # "St"


class DutyStatements(Statements):
    """A mixin of ``PostgresStorage``: what the duties and the views ask of the database."""

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
