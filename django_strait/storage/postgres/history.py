"""Retention by whole days on a partitioned runs table (issue 19): detach, then drop.

History is kept in day ranges of ``finished_at`` (``layout``), attempts in the
same days. A day whose every run is past its job's retention goes whole:

1. **Detach** its runs and attempts ranges, in one short transaction under
   ``layout.DDL_LOCK_TIMEOUT``: ``ACCESS EXCLUSIVE`` on the history and attempts
   parents (and their default partitions) only, so claims, starts and heartbeats,
   which name live statuses, never wait; records that move runs into history
   wait for those milliseconds. A lock not had in time is tried again, then left
   to the next round. Not ``CONCURRENTLY``: PostgreSQL refuses that beside a
   default partition.
2. **Finish** the detached tables, in a second transaction that holds no lock on
   the runs table: a run that still owes a completion webhook goes back in (to
   the default partition: its day is gone), where the pruner counts it as kept; the rows that
   point at the day's runs go as Django's ``on_delete`` says (holds and delivered
   webhooks deleted, a workflow step's run set to NULL); attempts of runs that
   are not in the day (a run retried across midnight, a dead letter) go back in;
   then both tables are dropped. A worker that dies between the two leaves a
   detached table behind, which the next round finishes first (``leftovers``).

What no day can take whole (runs of a job with a longer retention, the default
partitions, ``--job``) the pruner deletes row by row as before.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from django.db import OperationalError, ProgrammingError, connections, models, transaction

from django_strait.models import JobRun, RunAttempt, WebhookDelivery
from django_strait.models.webhook import UNDELIVERED
from django_strait.storage.postgres.layout import (
    ATTEMPTS,
    DDL_LOCK_TIMEOUT,
    HISTORY,
    LEAVES,
    RUNS,
    day_of,
    day_table,
    ranges_of,
)
from django_strait.storage.sql import listed
from django_strait.storage.values import HistoryDay, utc_day

#: SQLSTATE of lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"
#: SQLSTATE of a table that is not there.
UNDEFINED_TABLE = "42P01"
#: Tries at a day's detach before it waits for the next round.
DETACH_TRIES = 3


def days_before(alias: str, before: dt.datetime, counted: bool = False) -> list[HistoryDay]:
    """The days of history that ended by ``before``, oldest first, with the jobs that
    have runs in them (and, ``counted``, how many runs: a scan of each day)."""
    days = []
    with connections[alias].cursor() as cursor:
        attempts = ranges_of(cursor, ATTEMPTS)
        for day, table in ranges_of(cursor, HISTORY).items():
            if utc_day(day)[1] > before:
                break
            cursor.execute(_JOBS_OF_DAY.format(table=table))
            jobs = frozenset(row[0] for row in cursor.fetchall())
            runs = None
            if counted:
                cursor.execute(f"SELECT count(*) FROM {table}")
                (runs,) = cursor.fetchone()
            days.append(HistoryDay(day, table, attempts.get(day), jobs, runs))
    return days


#: The distinct jobs of a day, one probe of its job index per job (a skip scan): a
#: GROUP BY read the whole day, every round, for every day a longer retention holds.
_JOBS_OF_DAY = """
WITH RECURSIVE j(job_id) AS (
    (SELECT job_id FROM {table} ORDER BY job_id LIMIT 1)
    UNION ALL
    SELECT (SELECT job_id FROM {table} WHERE job_id > j.job_id ORDER BY job_id LIMIT 1)
    FROM j WHERE j.job_id IS NOT NULL
)
SELECT job_id FROM j WHERE job_id IS NOT NULL
"""


def lock_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is a lock not had within ``lock_timeout``."""
    return _sqlstate(exc) == LOCK_NOT_AVAILABLE


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__ or exc, "sqlstate", None)


def detach_day(alias: str, day: HistoryDay) -> bool:
    """Detach ``day``'s runs and attempts; False if their lock stayed busy (next round)."""
    for tried in range(1, DETACH_TRIES + 1):
        try:
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
                if day.attempts_table:
                    # Attempts first, in the order a record locks them (its attempt rows,
                    # then its runs into history): history first, a record that held
                    # attempts and then moved a run waited on it, and it on the record.
                    cursor.execute(f"LOCK TABLE ONLY {ATTEMPTS} IN ACCESS EXCLUSIVE MODE")
                cursor.execute(f"ALTER TABLE {HISTORY} DETACH PARTITION {day.runs_table}")
                if day.attempts_table:
                    cursor.execute(f"ALTER TABLE {ATTEMPTS} DETACH PARTITION {day.attempts_table}")
            return True
        except OperationalError as exc:
            if not lock_busy(exc):
                raise
            if tried < DETACH_TRIES:
                time.sleep(0.1 * tried)
    return False


def finish(alias: str, runs_table: str, attempts_table: str | None) -> int:
    """Drop a detached day, its keepers and other days' attempts put back first; return
    how many runs went."""
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        try:
            # Another leader's round may be finishing it too: the second finds it gone.
            with transaction.atomic(using=alias):
                cursor.execute(f"LOCK TABLE {runs_table} IN ACCESS EXCLUSIVE MODE")
        except ProgrammingError as exc:
            if _sqlstate(exc) != UNDEFINED_TABLE:
                raise
            return 0
        cursor.execute("SET LOCAL work_mem = '64MB'")  # hash joins of a day's ids in memory
        # One core at most (its count would take parallel workers): the queue has the others.
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        _keep_owing(cursor, runs_table)
        for sql in _relations(runs_table):
            cursor.execute(sql)
        if attempts_table:
            cursor.execute(_elsewhere(attempts_table), [utc_day(day_of(runs_table))[0]])
        cursor.execute(
            f"DELETE FROM {ATTEMPTS}_default AS a USING {runs_table} AS r WHERE a.run_id = r.id"
        )
        cursor.execute(f"SELECT count(*) FROM {runs_table}")
        (dropped,) = cursor.fetchone()
        cursor.execute(f"DROP TABLE {runs_table}")
        if attempts_table:
            cursor.execute(f"DROP TABLE {attempts_table}")
    return dropped


def _elsewhere(attempts_table: str) -> str:
    """Put back the detached day's attempts whose runs are still in the runs table.

    Such a run (retried across midnight, a dead letter, one still retrying, one just
    put back as owing a webhook) has an id between the lowest and the highest run id
    of the day's attempts, and it is live or kept, or it finished no earlier than the
    earliest start among those attempts (a run finishes after its attempts start; the
    day's own start if that is earlier): PostgreSQL reads only the live and kept
    leaves and those days, by primary key ranges. Not every attempt of the day
    against every run of it: for 3,000,000 runs that took 1.5 s of a core while the
    queue ran beside it (docs/operations.md).
    """
    ids = f"r.id BETWEEN (SELECT min(run_id) FROM {attempts_table}) " \
          f"AND (SELECT max(run_id) FROM {attempts_table})"  # fmt: skip
    near = listed((*LEAVES["live"], *LEAVES["kept"]))
    history = listed(LEAVES["history"])
    began = f"LEAST((SELECT min(started_at) FROM {attempts_table}), %s)"
    return (
        f"INSERT INTO {ATTEMPTS} SELECT a.* FROM {attempts_table} AS a WHERE a.run_id IN ("
        f"SELECT r.id FROM {RUNS} AS r WHERE r.status IN ({near}) AND {ids} "
        f"UNION ALL SELECT r.id FROM {RUNS} AS r WHERE r.status IN ({history}) AND {ids} "
        f"AND r.finished_at >= {began})"
    )


def _keep_owing(cursor: Any, runs_table: str) -> None:
    """Move the day's runs that still owe a completion webhook back into the runs table."""
    deliveries = WebhookDelivery._meta.db_table
    cursor.execute(
        f"WITH kept AS (DELETE FROM {runs_table} WHERE id IN (SELECT run_id FROM {deliveries} "
        "WHERE status = ANY(%s) AND run_id IS NOT NULL) RETURNING *) "
        f"INSERT INTO {RUNS} SELECT * FROM kept",
        [list(UNDELIVERED)],
    )


def _relations(runs_table: str) -> list[str]:
    """What Django's ``on_delete`` would do to the rows that point at the day's runs."""
    statements = []
    for rel in JobRun._meta.related_objects:
        if rel.related_model is RunAttempt:
            continue  # in the day's own attempts range, or the default one: finish()
        table = rel.related_model._meta.db_table
        column = rel.field.column
        in_day = f"{column} IN (SELECT id FROM {runs_table})"
        if rel.on_delete is models.CASCADE:
            statements.append(f"DELETE FROM {table} WHERE {in_day}")
        elif rel.on_delete is models.SET_NULL:
            statements.append(f"UPDATE {table} SET {column} = NULL WHERE {in_day}")
        elif rel.on_delete is not models.DO_NOTHING:
            raise NotImplementedError(
                f"{rel.related_model.__name__}.{rel.field.name}: on_delete={rel.on_delete.__name__}"
                " is not carried out when a day of history is dropped"
            )
    return statements


def leftovers(alias: str) -> list[tuple[str, str | None]]:
    """Days detached by a round that did not finish them: (runs table, attempts table)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND NOT relispartition "
            "AND relnamespace = current_schema()::regnamespace "
            "AND (relname LIKE %s OR relname LIKE %s)",
            [f"{RUNS}\\_p________", f"{ATTEMPTS}\\_p________"],
        )
        names = {row[0] for row in cursor.fetchall()}
    found = []
    for name in sorted(names):
        day = day_of(name)
        if day is not None and name == day_table(RUNS, day):
            attempts = day_table(ATTEMPTS, day)
            found.append((name, attempts if attempts in names else None))
    return found
