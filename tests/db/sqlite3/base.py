"""Django's SQLite backend, with the test suite's flush (tests/db/__init__.py) and no fsync.

Each test process has an SQLite file of its own, which worker processes a test
starts open too. ``PRAGMA synchronous = OFF`` hands every commit to the operating
system without waiting for the disk (several fsyncs a commit otherwise): a
process that dies, even by ``kill -9``, loses nothing it committed; only a crash of
the machine could, and the file is thrown away after the run anyway. Locking, and
so what one connection sees of another's work, is unchanged.
"""

from __future__ import annotations

from django.db.backends.sqlite3 import base, operations

from tests.db import flushed


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not reset_sequences:
            tables = flushed(tables)
        return super().sql_flush(
            style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        connection.execute("PRAGMA synchronous = OFF")
        return connection
