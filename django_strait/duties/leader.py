"""Leadership for one round of a duty: decided by the storage backend, inside the database.

On PostgreSQL, ``pg_try_advisory_xact_lock`` held until the transaction ends: no
session state between transactions (PgBouncer's transaction mode), and a worker
that dies mid-round releases it with its connection. On SQLite every caller
leads: it serializes writers and runs on one host, and the duties' guarded
updates keep a second one harmless.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django_strait.storage import backend


@contextmanager
def lead(duty: str, *, using: str | None = None) -> Iterator[bool]:
    """Open a transaction and yield whether this caller leads ``duty`` for it."""
    with backend(using).lead(duty) as leading:
        yield leading
