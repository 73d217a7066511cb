"""How the PostgreSQL backend sends its statements: server-bound, prepared where it pays.

A mixin of ``PostgresStorage`` and of its concerns' statements (``protection``,
``duties``): each sends ``queries.sql``'s statements through ``_execute``.
"""

from __future__ import annotations

from typing import Any

from django.db import connections

from django_strait.conf import strait_settings
from django_strait.storage.postgres.layout import runs_partitioned
from django_strait.storage.sql import keep_plans, prepares, server_bound_cursor


class Statements:
    """One statement at a time on the database ``alias``, prepared where the setting says."""

    alias: str

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
            # Rows if it has columns (``cursor.description`` would build one object a column).
            result = cursor.pgresult
            return cursor.fetchall() if result is not None and result.nfields else []

    def _partitioned(self) -> bool:
        """Whether this database's runs table is partitioned by status class (``layout``)."""
        return runs_partitioned(self.alias)
