"""Running django-strait's hand-written PostgreSQL statements."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def server_bound_cursor(connection: Any) -> Iterator[Any]:
    """A psycopg cursor that sends parameters apart from the query.

    Django's cursors splice parameters into the SQL text on the client, which for
    arrays of thousands of values costs more than the statement itself; and a
    statement sent with its parameters apart is prepared by psycopg once it has
    run a few times on the connection (``prepare_threshold``, 5 by default), so
    PostgreSQL stops planning it again on every call. Behind PgBouncer in
    transaction mode before 1.21, set ``"prepare_threshold": None`` in the
    database's ``OPTIONS``.
    """
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


def through_pooler(pg: Any) -> bool:
    """Whether psycopg connection ``pg`` reaches PostgreSQL through a pooler.

    PostgreSQL tells a session its server process id when it starts (psycopg's
    ``info.backend_pid``); a pooler that shares server sessions between clients
    hands each client a key of its own instead. So the process that answers
    ``pg_backend_pid()`` is another than the one the session was told.
    """
    row = pg.execute("SELECT pg_backend_pid()").fetchone()
    return row[0] != pg.info.backend_pid
