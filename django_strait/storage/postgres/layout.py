"""The runs table partitioned by status class on PostgreSQL (issue 19, first part).

``partition_runs`` turns ``django_strait_jobrun`` into a table ``LIST``
partitioned by status into three leaves:

- ``_live``: queued, dequeued, executing, waiting, system_failed. The claim,
  the reaper, limits and budgets read only this leaf (their statements name a
  live status, so PostgreSQL prunes the others away), and it stays small: the
  leader's vacuum of it is cheap whatever the history.
- ``_kept``: dead letters and failed runs, which no retention prunes.
- ``_history``: completed, canceled and discarded runs, what retention prunes.

A run that changes class moves to the other leaf (PostgreSQL runs such an
``UPDATE`` as a delete and an insert). A statement that waited for that run's
lock then fails with a serialization error instead of reading its new version:
``storage.moves`` runs it again.

What the layout gives up, and how the code keeps it: a unique index of a
partitioned table must contain the partition key, so the primary key and the
unique indexes (``id``, ``ojs_id``, a job's idempotency key) are per leaf; ids
stay unique through their one sequence, and the enqueue looks across the leaves
before it inserts a key or an OJS id (``storage.postgres.enqueue``). Foreign
keys cannot point at a partitioned table without a unique ``id`` in it, so the
four that point at runs are dropped; Django's ``on_delete`` runs in Python
either way, and the pruner deletes attempts with their runs.

Migration 0020 partitions a new or small install (below ``IN_ONE_GO`` runs) in
its transaction; a larger one stays plain, and ``manage.py strait_partition``
moves it without a long lock (``storage.postgres.move``). ``STRAIT["PARTITION_RUNS"]
= False`` keeps the plain table. The code runs on both layouts.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_strait.rules.states import LIVE
from django_strait.rules.states import RunStatus as S
from django_strait.storage.sql import listed
from django_strait.storage.values import utc_day

RUNS = "django_strait_jobrun"
#: Runs below which migration 0020 partitions the table in its own transaction (seconds
#: under lock); from here on, it leaves the table plain for ``strait_partition``.
IN_ONE_GO = 100_000
ATTEMPTS = "django_strait_runattempt"
#: The index of active runs by job (models.JobRun), on the live leaf only once partitioned.
ACTIVE_INDEX = "strait_run_active"
#: The history leaf: itself partitioned, by day of finished_at.
HISTORY = f"{RUNS}_history"

#: The leaves and the statuses each holds (every status in exactly one).
LEAVES: dict[str, tuple[str, ...]] = {
    "live": LIVE,
    "kept": (S.DEAD_LETTER, S.FAILED),
    "history": (S.COMPLETED, S.CANCELED, S.DISCARDED),
}


def is_partitioned(cursor: Any, table: str = RUNS) -> bool:
    """Whether ``table`` is a partitioned table here."""
    cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s::regclass", [table])
    row = cursor.fetchone()
    return bool(row and row[0])


#: Whether each database's runs table is partitioned, by alias and database name, and
#: when this process read it.
_KNOWN: dict[tuple[str, str], tuple[bool, float]] = {}
#: Seconds a process keeps a plain answer before it reads it again: ``strait_partition``
#: moves a running install to the partitioned layout (never back), and its workers take
#: the partitioned statements up within this long, without a restart.
RECHECK_PLAIN = 60.0


def runs_partitioned(alias: str) -> bool:
    """Whether the runs table of ``alias`` is partitioned: read once per process, and a
    plain answer again every ``RECHECK_PLAIN`` seconds (a catalog lookup).

    Asked by the worker's statements that find runs by id (``queries.by_id``). A table
    partitioned after this process read it plain gets the plain statements, which
    are correct on both layouts, until it reads it again.
    """
    connection = connections[alias]
    key = (alias, str(connection.settings_dict["NAME"]))
    known = _KNOWN.get(key)
    if known is None or (not known[0] and time.monotonic() - known[1] >= RECHECK_PLAIN):
        with connection.cursor() as cursor:
            known = _KNOWN[key] = (is_partitioned(cursor), time.monotonic())
    return known[0]


def partition_if_small(cursor: Any) -> bool:
    """Partition the runs table in one go if it holds fewer than ``IN_ONE_GO`` runs (or is
    partitioned already); False if it is left plain for ``strait_partition``."""
    if is_partitioned(cursor):
        return True
    cursor.execute(f"SELECT count(*) FROM (SELECT FROM {RUNS} LIMIT %s) AS r", [IN_ONE_GO])
    (runs,) = cursor.fetchone()
    if runs >= IN_ONE_GO:
        return False
    partition_runs(cursor)
    return True


def partition_runs(cursor: Any, today: dt.date | None = None) -> None:
    """Rebuild the runs and attempts tables partitioned, rows, indexes and triggers included.

    Runs in the caller's transaction and copies every row under its lock: meant
    for an empty or small table (a new install, the test database; migration 0020
    calls it below ``IN_ONE_GO`` runs). History and attempts get their day ranges
    from yesterday to ``RANGES_AHEAD`` days after ``today`` (UTC), and one for every
    day a finished run or attempt has, before the rows go in: pruning drops them whole.
    """
    if is_partitioned(cursor):
        return
    for table in (RUNS, ATTEMPTS):
        drop_foreign_keys_into(cursor, table)
    runs, attempts = shape_of(cursor, RUNS), shape_of(cursor, ATTEMPTS)
    for table in (RUNS, ATTEMPTS):
        cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_plain")
    build(cursor, f"{RUNS}_plain", f"{ATTEMPTS}_plain", today)
    for table in (RUNS, ATTEMPTS):
        cursor.execute(f"INSERT INTO {table} SELECT * FROM {table}_plain")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
        )
        cursor.execute(f"DROP TABLE {table}_plain")
    # Indexes once the rows are in (and the old table's, of the same names, gone).
    index(cursor, runs, attempts)
    for trigger in runs.triggers + attempts.triggers:
        cursor.execute(trigger)


@dataclass(frozen=True)
class Shape:
    """What a plain runs or attempts table has that its partitioned one must have too:
    its indexes but the primary key (name, definition) and its triggers' definitions."""

    indexes: list[tuple[str, str]]
    triggers: list[str]


def shape_of(cursor: Any, table: str) -> Shape:
    """The indexes and triggers of ``table`` (in the current schema). The indexes'
    definitions name the table without its schema, so that they make the same index
    on the table of that name wherever the search path finds it (``storage.postgres.move``
    builds in a schema of its own)."""
    cursor.execute("SELECT current_schema()")
    (schema,) = cursor.fetchone()
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = %s AND indexname NOT LIKE '%%_pkey'",
        [table],
    )
    indexes = [(name, sql.replace(f" ON {schema}.", " ON ", 1)) for name, sql in cursor.fetchall()]
    cursor.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass "
        "AND NOT tgisinternal",
        [table],
    )
    return Shape(indexes, [row[0] for row in cursor.fetchall()])


def build(cursor: Any, runs_like: str, attempts_like: str, today: dt.date | None = None) -> None:
    """Make the partitioned runs and attempts tables, empty, with their leaves, day ranges
    and primary keys, where the search path puts new tables; their columns are those of
    the plain tables ``runs_like`` and ``attempts_like``. Days: yesterday to
    ``RANGES_AHEAD`` days after ``today`` (UTC), and every day those tables finished
    runs or attempts on."""
    _like(cursor, RUNS, runs_like, "LIST (status)")
    for leaf, statuses in LEAVES.items():
        values = listed(statuses)
        if leaf == "history":
            cursor.execute(
                f"CREATE TABLE {HISTORY} PARTITION OF {RUNS} FOR VALUES IN ({values}) "
                "PARTITION BY RANGE (finished_at)"
            )
        else:
            cursor.execute(
                f"CREATE TABLE {RUNS}_{leaf} PARTITION OF {RUNS} (PRIMARY KEY (id)) "
                f"FOR VALUES IN ({values})"
            )
    cursor.execute(
        f"CREATE TABLE {HISTORY}_default PARTITION OF {HISTORY} (PRIMARY KEY (id)) DEFAULT"
    )
    _like(cursor, ATTEMPTS, attempts_like, "RANGE (finished_at)")
    cursor.execute(
        f"CREATE TABLE {ATTEMPTS}_default PARTITION OF {ATTEMPTS} (PRIMARY KEY (id)) DEFAULT"
    )
    days = set(days_around(today or dt.datetime.now(dt.UTC).date()))
    make_ranges(cursor, sorted(days | finished_days(cursor, runs_like, attempts_like)))


def index(cursor: Any, runs: Shape, attempts: Shape) -> None:
    """Make the indexes of the plain tables (their ``Shape``) on the partitioned ones."""
    _index_runs(cursor, runs.indexes)
    for name, definition in attempts.indexes:
        if definition.startswith("CREATE UNIQUE INDEX"):
            for leaf in _leaves(cursor, ATTEMPTS):
                _unique_on(cursor, definition, name, ATTEMPTS, leaf)
        else:
            cursor.execute(definition)


def _leaves(cursor: Any, table: str) -> list[str]:
    cursor.execute(
        "SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) WHERE isleaf",
        [table],
    )
    return [row[0].rpartition(".")[2] for row in cursor.fetchall()]


def drop_foreign_keys_into(cursor: Any, table: str) -> None:
    """Drop every foreign key constraint that points at ``table``."""
    cursor.execute(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
        "WHERE confrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    for referring, name in cursor.fetchall():
        cursor.execute(f'ALTER TABLE {referring} DROP CONSTRAINT "{name}"')


def _like(cursor: Any, table: str, like: str, by: str) -> None:
    cursor.execute(
        f"CREATE TABLE {table} (LIKE {like} INCLUDING DEFAULTS INCLUDING IDENTITY "
        f"INCLUDING CONSTRAINTS) PARTITION BY {by}"
    )


def _index_runs(cursor: Any, indexes: list[tuple[str, str]]) -> None:
    """The runs table's indexes on the partitioned table, where each belongs.

    Unique indexes are per leaf (the enqueue looks across leaves: module docstring).
    An index that leads with the status (the partition key) is made on kept and
    history only: on the live leaf it would offer the planner a path by status
    past the primary key for start, hold and record, which name the live statuses
    to open that leaf alone, and that path walks every dead entry (docs/operations.md).
    The live leaf gets it without the queued runs, for the reaper's in-flight runs.
    So does the index of active runs by job (``strait_run_active``), on the live leaf
    only (no other leaf holds an active run): with the queued runs in it, it is one
    more path to the queued runs for the claim, through the dead entry of every run
    claimed since the last vacuum that could remove them (docs/operations.md). Cron's
    "still active?" and the concurrency counts read in-flight runs through it, and
    queued ones in the small live leaf.
    """
    in_flight = listed(s for s in LEAVES["live"] if s != S.QUEUED)
    for name, definition in indexes:
        if name == ACTIVE_INDEX:
            columns = definition.split(" USING ", 1)[1].split(" WHERE ", 1)[0]
            cursor.execute(
                f"CREATE INDEX {name}_live ON {RUNS}_live USING {columns} "
                f"WHERE status IN ({in_flight})"
            )
        elif definition.startswith("CREATE UNIQUE INDEX"):
            for leaf in _leaves(cursor, RUNS):
                _unique_on(cursor, definition, name, RUNS, leaf)
        elif " (status" in definition and " WHERE " not in definition:
            _, columns = definition.split(" USING ", 1)
            for leaf in ("kept", "history"):
                cursor.execute(f"CREATE INDEX {name}_{leaf} ON {RUNS}_{leaf} USING {columns}")
            cursor.execute(
                f"CREATE INDEX {name}_live ON {RUNS}_live USING {columns} "
                f"WHERE status IN ({in_flight})"
            )
        else:
            cursor.execute(definition)


def _unique_on(cursor: Any, definition: str, name: str, table: str, leaf: str) -> None:
    """Make the unique index ``name`` of ``table`` (its ``definition``) on ``leaf`` only,
    named for it: ``<name>_live``, ``<name>_p20261125``."""
    _, on = definition.split(" ON ", 1)
    on = on.replace(f"{table} ", f"{leaf} ", 1)
    cursor.execute(f"CREATE UNIQUE INDEX {name}_{_suffix(leaf)} ON {on}")


def _suffix(leaf: str) -> str:
    """``live`` of ``django_strait_jobrun_live``, ``p20261125`` of a day range."""
    for table in (RUNS, ATTEMPTS):
        if leaf.startswith(f"{table}_"):
            return leaf[len(table) + 1 :]
    raise ValueError(f"{leaf}: not a leaf of {RUNS} or {ATTEMPTS}")


# -- History and attempts in day ranges ------------------------------------------------

#: Days of ranges made ahead of today (UTC): the leader makes them each pruning round,
#: so a leader down for this long still finds its days ready; past that, finished runs
#: and attempts land in the default partitions, and the next round moves them out.
RANGES_AHEAD = 7
#: How long DDL on a range waits for a lock before giving up until the next round:
#: records that move runs into history queue behind it meanwhile.
DDL_LOCK_TIMEOUT = "500ms"


def day_table(table: str, day: dt.date) -> str:
    """The name of ``table``'s (runs or attempts) partition for ``day``: ``<table>_p20261125``."""
    return f"{table}_p{day:%Y%m%d}"


def days_around(today: dt.date) -> list[dt.date]:
    """Yesterday, today and ``RANGES_AHEAD`` days after."""
    return [today + dt.timedelta(days=n) for n in range(-1, RANGES_AHEAD + 1)]


def finished_days(cursor: Any, runs: str, attempts: str) -> set[dt.date]:
    """The UTC days on which the history runs of ``runs`` and the attempts of
    ``attempts`` (tables of either layout) finished."""
    history = listed(LEAVES["history"])
    cursor.execute(
        f"SELECT (finished_at AT TIME ZONE 'UTC')::date FROM {runs} "
        f"WHERE status IN ({history}) AND finished_at IS NOT NULL "
        f"UNION SELECT (finished_at AT TIME ZONE 'UTC')::date FROM {attempts} "
        "WHERE finished_at IS NOT NULL"
    )
    return {row[0] for row in cursor.fetchall()}


def make_ranges(cursor: Any, days: list[dt.date]) -> list[str]:
    """Make the day ranges of history and attempts that ``days`` lack; return their names.

    A day whose rows already sit in the default partition (the leader was down past
    the days made ahead) gets them moved into its new range, in this transaction.
    """
    made = []
    # Attempts first: the order a record takes their locks (history.detach_day).
    for table, parent in ((ATTEMPTS, ATTEMPTS), (RUNS, HISTORY)):
        have = set(ranges_of(cursor, parent))
        for day in days:
            if day in have:
                continue
            made.append(_make_range(cursor, parent, day_table(table, day), day))
    return made


def ranges_of(cursor: Any, parent: str) -> dict[dt.date, str]:
    """The day ranges attached to ``parent`` (history or attempts), by day."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass",
        [parent],
    )
    found = {}
    for (name,) in cursor.fetchall():
        day = day_of(name)
        if day is not None:
            found[day] = name
    return dict(sorted(found.items()))


def day_of(name: str) -> dt.date | None:
    """The day of a day partition's name (``day_table``'s inverse); None for another table."""
    stem, _, tail = name.rpartition("_p")
    if stem not in (RUNS, ATTEMPTS) or len(tail) != 8 or not tail.isdigit():
        return None
    return dt.datetime.strptime(tail, "%Y%m%d").date()


def _make_range(cursor: Any, parent: str, name: str, day: dt.date) -> str:
    default = f"{parent}_default"
    start, end = utc_day(day)
    bounds = f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    cursor.execute(
        f"SELECT EXISTS (SELECT FROM {default} WHERE finished_at >= %s AND finished_at < %s)",
        [start, end],
    )
    (stranded,) = cursor.fetchone()
    if not stranded:
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {parent} (PRIMARY KEY (id)) {bounds}")
    else:
        # Made apart, filled from the default partition, then attached.
        cursor.execute(
            f"CREATE TABLE {name} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS, "
            "PRIMARY KEY (id))"
        )
        cursor.execute(
            f"WITH moved AS (DELETE FROM {default} WHERE finished_at >= %s AND finished_at < %s "
            f"RETURNING *) INSERT INTO {name} SELECT * FROM moved",
            [start, end],
        )
        cursor.execute(f"ALTER TABLE {parent} ATTACH PARTITION {name} {bounds}")
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = %s AND indexdef LIKE 'CREATE UNIQUE INDEX%%' "
        "AND indexname NOT LIKE '%%_pkey'",
        [default],
    )
    for index, definition in cursor.fetchall():
        base = index.removesuffix(f"_{_suffix(default)}")
        _unique_on(cursor, definition, base, default, name)
    return name
