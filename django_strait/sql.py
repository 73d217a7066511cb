"""Running django-strait's hand-written PostgreSQL statements."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

#: The prepare threshold given to a connection whose statements we prepare: high enough
#: that psycopg prepares only what is asked for (``prepare=True``), never Django's queries.
EXPLICIT_ONLY = 2**31 - 1

#: Per psycopg connection: whether it reaches PostgreSQL directly (asked once per session).
_direct: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

#: Seconds a worker's connection keeps its prepared statements' plans: then they are
#: dropped and planned anew. A generic plan made while the runs table was nearly empty
#: (a sequential scan) is otherwise kept until something invalidates it, however many
#: runs come; with autovacuum off that can be long.
PLAN_LIFETIME = 10.0

#: The psycopg connections of a worker's claim and record threads that reach PostgreSQL
#: directly, and when their prepared plans were last dropped (``time.monotonic()``).
_worker_plans: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def server_bound_cursor(connection: Any) -> Iterator[Any]:
    """A psycopg cursor that sends parameters apart from the query.

    Django's cursors splice parameters into the SQL text on the client, which for
    arrays of thousands of values costs more than the statement itself. Nothing
    is prepared unless asked: Django turns psycopg's ``prepare_threshold`` off,
    so a statement is prepared only when executed with ``prepare=True`` on a
    connection that :func:`may_prepare` allowed.

    The cursor is kept on ``connection`` (Django's, one per thread) for its next
    call while the same psycopg connection lasts: a new cursor looks up its
    parameters' adapters again, ~20 us of CPU, a twentieth of a one-by-one
    ``trigger()``. A call made while the kept one is in use gets one of its own.
    """
    import psycopg

    connection.ensure_connection()
    pg = connection.connection
    kept = getattr(connection, "_strait_cursor", None)
    connection._strait_cursor = None  # in use: a call inside this one makes its own
    cursor = kept if kept is not None and kept.connection is pg else psycopg.Cursor(pg)
    try:
        with connection.wrap_database_errors:
            yield cursor
    finally:
        if not cursor.closed and not pg.closed:
            connection._strait_cursor = cursor


def keep_plans(connection: Any, now: float) -> None:
    """Let a worker's database thread prepare its hot statements on ``connection`` (Django's).

    Called by the worker before each of its claim and record calls. Only a direct
    connection (:func:`may_prepare`) is let, and every :data:`PLAN_LIFETIME` seconds
    its prepared statements are deallocated (psycopg forgets them too), so that
    their plans follow the runs table as it grows and shrinks.
    """
    if not may_prepare(connection):
        return
    pg = connection.connection
    since = _worker_plans.get(pg)
    if since is not None and now - since >= PLAN_LIFETIME:
        with connection.wrap_database_errors:
            pg.execute("DEALLOCATE ALL")
        since = None
    if since is None:
        _worker_plans[pg] = now


def prepares(connection: Any) -> bool:
    """Whether ``connection`` (Django's) is a worker's, let prepare by :func:`keep_plans`."""
    return connection.connection is not None and connection.connection in _worker_plans


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


def listed(statuses: Iterable[str]) -> str:
    """``statuses`` as the items of an SQL list (``'a', 'b'``): for ``IN (...)`` and
    ``FOR VALUES IN (...)``. Statuses are RunStatus values, never input."""
    return ", ".join(f"'{status}'" for status in statuses)
