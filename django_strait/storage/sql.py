"""Running django-strait's hand-written PostgreSQL statements."""

from __future__ import annotations

import contextlib
import datetime as dt
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

#: The prepare threshold given to a connection whose statements we prepare: high enough
#: that psycopg prepares only what is asked for (``prepare=True``), never Django's queries.
EXPLICIT_ONLY = 2**31 - 1

#: Per psycopg connection: whether it reaches PostgreSQL directly (asked once per session).
_direct: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

#: The psycopg connections of a worker's claim and record threads that reach PostgreSQL
#: directly, and when their prepared plans were last dropped (``time.monotonic()``).
_worker_plans: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def text_array(values: Iterable[Any]) -> str:
    """``values`` as one PostgreSQL array literal, for a parameter cast to an array type
    (``%s::text[]``, ``::jsonb[]``, ``::bigint[]``, ``::timestamptz[]``): each element
    quoted and escaped (a datetime as ISO 8601, anything else as ``str()``), None as NULL.

    psycopg adapts a list element by element in Python: a thousand JSON texts took it
    ~10 ms, a thousand ids ~2 ms, and each array a few microseconds however short; as
    one literal, ~0.5 ms and ~0.4 ms.
    """
    return "{" + ",".join(map(_element, values)) + "}"


def _element(value: Any) -> str:
    if value is None:
        return "NULL"
    text = value if isinstance(value, str) else _text(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text(value: Any) -> str:
    if isinstance(value, dt.date):  # a naive datetime in the session's zone, as psycopg's
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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


def keep_plans(connection: Any, now: float, lifetime: float) -> None:
    """Let a worker's database thread prepare its hot statements on ``connection`` (Django's).

    Called by the worker before each of its claim and record calls. Only a direct
    connection (:func:`may_prepare`) is let, and every ``lifetime`` seconds
    (``STRAIT["PLAN_LIFETIME"]``) its prepared statements are dropped
    (:func:`drop_plans`), so that their plans follow the runs table as it grows and
    shrinks: a generic plan made while the table was nearly empty (a sequential scan)
    is otherwise kept until something invalidates it, however many runs come.
    """
    if not may_prepare(connection):
        return
    pg = connection.connection
    since = _worker_plans.get(pg)
    if since is not None and now - since >= lifetime:
        with connection.wrap_database_errors:
            drop_plans(pg)
        since = None
    if since is None:
        _worker_plans[pg] = now


def drop_plans(pg: Any) -> None:
    """Deallocate every statement psycopg prepared on psycopg connection ``pg``, through psycopg.

    The statements are psycopg's: it names them (``_pg3_N``) and executes them by
    name for as long as it believes them prepared. So they must be dropped by
    psycopg, never behind its back. A ``DEALLOCATE ALL`` of ours was missed: psycopg
    3.3.9 looks at the command only of a query new to its statement counts, so once
    one drop had found nothing prepared (an idle record thread's heartbeat, the
    process watch), that text stayed counted and the next drop went unseen; releases
    up to 3.3.4 never look for it. psycopg then executed a ``_pg3_N`` the server no
    longer had ("prepared statement ... does not exist"), and a record was refused.
    psycopg forgets and deallocates everything it prepared whenever a transaction of
    its own rolls back (what the transaction changed might invalidate them), so an
    empty one is rolled back: two commands, and ``DEALLOCATE ALL`` when anything was
    prepared, once per lifetime. (Should a psycopg stop doing so, plans would only live
    longer; tests/integration/test_prepared_statements.py would say so.)
    """
    with pg.transaction(force_rollback=True):
        pass


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
