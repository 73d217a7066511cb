"""Django's PostgreSQL backend, but the flush after a ``transaction=True`` test deletes.

Django empties every table after such a test with one ``TRUNCATE`` of them all: a
new file for each of the 120-odd relations (the runs and attempts tables'
partitions, their indexes), 2-3 s a test on a loaded CI machine, more than half of a
PostgreSQL pass. The tables hold a test's few rows, so ``DELETE`` empties them in
milliseconds; a ``VACUUM`` of each table that held rows then leaves no dead rows
behind for the next test to find (tests/integration/test_vacuum.py counts them), as
the ``TRUNCATE`` did not. Sequences are left alone, as Django's flush leaves them
without ``reset_sequences``; with it, the ``TRUNCATE`` is kept. The content types and
permissions stay, as on SQLite (tests/db/__init__.py).
"""

from __future__ import annotations

from django.db import transaction
from django.db.backends.postgresql import base, operations

from tests.db import flushed

#: What the list of statements starts with when this backend's flush is asked for.
DELETE_FLUSH = "-- strait tests: flush by DELETE"


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        deletes = (f"DELETE FROM {self.quote_name(table)}" for table in flushed(tables))
        return [DELETE_FLUSH, *deletes]

    def execute_sql_flush(self, sql_list):
        if not sql_list or sql_list[0] != DELETE_FLUSH:
            return super().execute_sql_flush(sql_list)
        emptied = []
        with transaction.atomic(using=self.connection.alias):
            with self.connection.cursor() as cursor:
                # Django's foreign keys are deferrable: checked at the commit, when
                # every table is empty, whatever the order of the deletes.
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                for sql in sql_list[1:]:
                    cursor.execute(sql)
                    if cursor.rowcount:
                        emptied.append(sql.removeprefix("DELETE FROM "))
                # A delete's trigger may write a row into a table already emptied:
                # then every table is truncated, as Django's flush does.
                tables = [sql.removeprefix("DELETE FROM ") for sql in sql_list[1:]]
                any_row = " OR ".join(f"EXISTS (SELECT FROM {table})" for table in tables)
                cursor.execute(f"SELECT {any_row}")
                if cursor.fetchone()[0]:
                    cursor.execute(f"TRUNCATE {', '.join(tables)}")
                    return
                if self.connection.pg_version >= 150000:
                    # The deletes' dead rows reach the statistics at the commit, not up
                    # to a second later, after the VACUUM that clears them.
                    cursor.execute("SELECT pg_stat_force_next_flush()")
        with self.connection.cursor() as cursor:
            for table in emptied:
                cursor.execute(f"VACUUM {table}")


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
