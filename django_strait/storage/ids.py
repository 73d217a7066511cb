"""Each alias's ids in a range of their own, so that an id says where its row lives.

``database.id_range`` gives the alias at index k of ``STRAIT["DATABASES"]`` the
ids above k * 2**48; :func:`number_ids` moves the id sequences of its
django-strait tables there (``migrate --database ALIAS`` calls it, through
``post_migrate``), and on PostgreSQL bounds them, so that an alias that runs out
fails its inserts rather than take another alias's ids. A table that already
holds rows outside the range is left as it is, and said: its ids cannot move.
"""

from __future__ import annotations

import logging

from django.db import connections, transaction

from django_strait.database import aliases, id_range, placed

logger = logging.getLogger(__name__)

#: The id sequences of django-strait's tables (a partitioned table's is its parent's).
_PG_SEQUENCES = """
SELECT c.relname, s.seqrelid::regclass::text, s.seqmin, s.seqmax
FROM pg_class c
JOIN pg_depend d ON d.refobjid = c.oid AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
JOIN pg_sequence s ON s.seqrelid = d.objid
WHERE c.relname LIKE 'django\\_strait\\_%%' AND c.relkind IN ('r', 'p')
  AND c.relnamespace = ANY (current_schemas(false)::regnamespace[])
ORDER BY c.relname
"""
_SQLITE_TABLES = """
SELECT name FROM sqlite_master
WHERE type = 'table' AND name LIKE 'django\\_strait\\_%' ESCAPE '\\' AND sql LIKE '%AUTOINCREMENT%'
ORDER BY name
"""


def number_ids(using: str) -> list[str]:
    """Move ``using``'s id sequences into its range; return the tables that could not move.

    Idempotent. Nothing to do on one database, or for an alias django-strait
    does not list.
    """
    if not placed() or using not in aliases():
        return []
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            stuck = _number_postgres(cursor, *id_range(using))
        elif connection.vendor == "sqlite":
            stuck = _number_sqlite(cursor, *id_range(using))
        else:
            stuck = []
    for table in stuck:
        logger.warning(
            "%s on database %r holds ids outside the alias's range %s: its ids were not "
            "moved (add an alias to STRAIT['DATABASES'] before it holds rows)",
            table, using, id_range(using),
        )  # fmt: skip
    return stuck


def after_migrate(using: str, **kwargs: object) -> None:
    """``post_migrate``'s receiver: ``migrate --database ALIAS`` numbers that alias's ids."""
    number_ids(using)


def outside_range(using: str) -> list[str]:
    """The tables on ``using`` whose next id is not in the alias's range (for the check)."""
    if not placed() or using not in aliases():
        return []
    low, high = id_range(using)
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_PG_SEQUENCES)
            return [t for t, _seq, lo, hi in cursor.fetchall() if (lo, hi) != (low + 1, high - 1)]
        if connection.vendor == "sqlite":
            return [t for t, seq in _sqlite_sequences(cursor) if not low <= seq < high]
    return []


def _has_rows_outside(cursor, table: str, low: int, high: int) -> bool:
    quoted = cursor.db.ops.quote_name(table)
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {quoted} WHERE id <= %s OR id >= %s)", [low, high]
    )
    return bool(cursor.fetchone()[0])


def _number_postgres(cursor, low: int, high: int) -> list[str]:
    cursor.execute(_PG_SEQUENCES)
    stuck = []
    for table, sequence, seqmin, seqmax in cursor.fetchall():
        if _has_rows_outside(cursor, table, low, high):
            stuck.append(table)
            continue
        if (seqmin, seqmax) == (low + 1, high - 1):
            continue
        cursor.execute(f"SELECT last_value, is_called FROM {sequence}")
        last, called = cursor.fetchone()
        at = last + 1 if called and low < last < high - 1 else low + 1
        cursor.execute(
            f"ALTER SEQUENCE {sequence} MINVALUE {low + 1} MAXVALUE {high - 1} START WITH {low + 1} RESTART WITH {at}"
        )
    return stuck


def _sqlite_sequences(cursor) -> list[tuple[str, int]]:
    cursor.execute(_SQLITE_TABLES)
    tables = [name for (name,) in cursor.fetchall()]
    cursor.execute("SELECT name, seq FROM sqlite_sequence")
    seqs = dict(cursor.fetchall())
    return [(table, int(seqs.get(table) or 0)) for table in tables]


def _number_sqlite(cursor, low: int, high: int) -> list[str]:
    stuck = []
    for table, seq in _sqlite_sequences(cursor):
        if _has_rows_outside(cursor, table, low, high):
            stuck.append(table)
            continue
        if low <= seq < high:
            continue
        # SQLite gives AUTOINCREMENT tables max(seq, the largest id) + 1.
        cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [table])
        cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, low])
    return stuck
