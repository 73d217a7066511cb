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

Not yet exposed to projects (no migration or command calls it): the test suite
runs its conformance and engine tests on this layout, so that the code stays
correct on both before the migration moves installs to it.
"""

from __future__ import annotations

from typing import Any

from django_strait.states import RunStatus as S

RUNS = "django_strait_jobrun"

#: The leaves and the statuses each holds (every status in exactly one).
LEAVES: dict[str, tuple[str, ...]] = {
    "live": (S.QUEUED, S.DEQUEUED, S.EXECUTING, S.WAITING, S.SYSTEM_FAILED),
    "kept": (S.DEAD_LETTER, S.FAILED),
    "history": (S.COMPLETED, S.CANCELED, S.DISCARDED),
}


def is_partitioned(cursor: Any, table: str = RUNS) -> bool:
    """Whether ``table`` is a partitioned table here."""
    cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s::regclass", [table])
    row = cursor.fetchone()
    return bool(row and row[0])


def partition_runs(cursor: Any) -> None:
    """Rebuild the runs table as the three leaves, rows, indexes and triggers included.

    Runs in the caller's transaction and copies every row under its lock: meant
    for an empty or small table (the test database, a new install).
    """
    if is_partitioned(cursor):
        return
    plain = f"{RUNS}_plain"
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = %s",
        [RUNS],
    )
    indexes = cursor.fetchall()
    cursor.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass "
        "AND NOT tgisinternal",
        [RUNS],
    )
    triggers = [row[0] for row in cursor.fetchall()]
    cursor.execute(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
        "WHERE confrelid = %s::regclass AND contype = 'f'",
        [RUNS],
    )
    for table, name in cursor.fetchall():
        cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')

    cursor.execute(f"ALTER TABLE {RUNS} RENAME TO {plain}")
    cursor.execute(
        f"CREATE TABLE {RUNS} (LIKE {plain} INCLUDING DEFAULTS INCLUDING IDENTITY "
        "INCLUDING CONSTRAINTS) PARTITION BY LIST (status)"
    )
    for leaf, statuses in LEAVES.items():
        values = ", ".join(f"'{status}'" for status in statuses)
        cursor.execute(
            f"CREATE TABLE {RUNS}_{leaf} PARTITION OF {RUNS} (PRIMARY KEY (id)) "
            f"FOR VALUES IN ({values})"
        )
    cursor.execute(f"INSERT INTO {RUNS} SELECT * FROM {plain}")
    cursor.execute(
        f"SELECT setval(pg_get_serial_sequence('{RUNS}', 'id'), "
        f"coalesce((SELECT max(id) FROM {RUNS}), 0) + 1, false)"
    )
    cursor.execute(f"DROP TABLE {plain}")

    # Read before the rename, the definitions name the new table already.
    for name, definition in indexes:
        if name.endswith("_pkey"):
            continue
        if definition.startswith("CREATE UNIQUE INDEX"):
            # Unique per leaf; the enqueue looks across leaves (module docstring).
            _, on = definition.split(" ON ", 1)
            for leaf in LEAVES:
                leaf_on = on.replace(f"{RUNS} ", f"{RUNS}_{leaf} ", 1)
                cursor.execute(f"CREATE UNIQUE INDEX {name}_{leaf} ON {leaf_on}")
        else:
            cursor.execute(definition)
    for trigger in triggers:
        cursor.execute(trigger)
