"""Where runs are stored and moved: one backend per database, behind one interface.

``backend()`` returns the backend of ``STRAIT["DATABASE"]``, chosen here and only
here by the database's vendor: :class:`~django_strait.storage.postgres.PostgresStorage`
on PostgreSQL, :class:`~django_strait.storage.orm.OrmStorage` (the portable ORM) on
every other. Both implement :class:`~django_strait.storage.base.Storage`; no other
module asks which database it is on. tests/conformance runs one suite on both.
"""

from __future__ import annotations

import functools

from django.db import connections

from django_strait.database import alias as strait_alias
from django_strait.storage.base import Storage
from django_strait.storage.orm import OrmStorage
from django_strait.storage.postgres import PostgresStorage
from django_strait.storage.values import (
    Claimed,
    Hold,
    Record,
    RecordBatch,
    Recorded,
    Rescued,
    Stale,
    Waiting,
)

__all__ = [
    "Claimed",
    "Hold",
    "OrmStorage",
    "PostgresStorage",
    "Record",
    "RecordBatch",
    "Recorded",
    "Rescued",
    "Stale",
    "Storage",
    "Waiting",
    "backend",
]

#: The backend for each database vendor; any other vendor gets the portable ORM's.
BACKENDS: dict[str, type[OrmStorage]] = {"postgresql": PostgresStorage}


def backend(alias: str | None = None) -> Storage:
    """Return the storage backend of ``alias`` (default: ``STRAIT["DATABASE"]``)."""
    return _backend(strait_alias(alias))


@functools.cache
def _backend(alias: str) -> Storage:
    return BACKENDS.get(connections[alias].vendor, OrmStorage)(alias)
