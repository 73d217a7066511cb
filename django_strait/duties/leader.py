"""Leadership for one round of a duty, decided inside PostgreSQL.

``pg_try_advisory_xact_lock`` is held until the transaction ends: it needs no
session state between transactions, so it works behind PgBouncer in transaction
mode (DESIGN §6), and a worker that dies mid-round releases it with its
connection. SQLite serializes writers and runs on one host: every caller leads,
and the duties' guarded updates keep a second one harmless.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections, transaction

from django_strait.database import alias

#: Namespace for our advisory lock keys (first argument of the two-int form).
LOCK_NAMESPACE = 0x5374  # "St"


def lock_key(duty: str) -> int:
    """A stable 32-bit key for ``duty`` (the same on every host and Python version)."""
    return zlib.crc32(duty.encode()) - 2**31


@contextmanager
def lead(duty: str, *, using: str | None = None) -> Iterator[bool]:
    """Open a transaction and yield whether this caller leads ``duty`` for it."""
    with transaction.atomic(using=alias(using)):
        connection = connections[alias(using)]
        if connection.vendor != "postgresql":
            yield True
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_NAMESPACE, lock_key(duty)]
            )
            yield bool(cursor.fetchone()[0])
