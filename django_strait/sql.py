"""Running django-strait's hand-written PostgreSQL statements."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

#: The prepare threshold given to a connection whose statements we prepare: high enough
#: that psycopg prepares only what is asked for (``prepare=True``), never Django's queries.
EXPLICIT_ONLY = 2**31 - 1

#: Per psycopg connection: whether it reaches PostgreSQL directly (asked once per session).
_direct: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def server_bound_cursor(connection: Any) -> Iterator[Any]:
    """A psycopg cursor that sends parameters apart from the query.

    Django's cursors splice parameters into the SQL text on the client, which for
    arrays of thousands of values costs more than the statement itself. Nothing
    is prepared unless asked: Django turns psycopg's ``prepare_threshold`` off,
    so a statement is prepared only when executed with ``prepare=True`` on a
    connection that :func:`may_prepare` allowed.
    """
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


def may_prepare(connection: Any) -> bool:
    """Let ``connection`` (Django's) prepare statements asked for; False behind a pooler.

    A connection that goes through a pooler may run each transaction on another
    server session, where a statement prepared on the first does not exist (PgBouncer
    in transaction mode before 1.21). Asked once per session (:func:`through_pooler`).
    """
    connection.ensure_connection()
    pg = connection.connection
    direct = _direct.get(pg)
    if direct is None:
        with connection.wrap_database_errors:
            direct = _direct[pg] = not through_pooler(pg)
        if direct and pg.prepare_threshold is None:
            pg.prepare_threshold = EXPLICIT_ONLY
    return direct


def through_pooler(pg: Any) -> bool:
    """Whether psycopg connection ``pg`` reaches PostgreSQL through a pooler.

    PostgreSQL tells a session its server process id when it starts (psycopg's
    ``info.backend_pid``); a pooler that shares server sessions between clients
    hands each client a key of its own instead. So the process that answers
    ``pg_backend_pid()`` is another than the one the session was told.
    """
    row = pg.execute("SELECT pg_backend_pid()").fetchone()
    return row[0] != pg.info.backend_pid
