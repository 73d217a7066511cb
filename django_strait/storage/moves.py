"""Statements that meet a run moved to another partition meanwhile, and run again.

On PostgreSQL with the runs table partitioned by status class
(``storage.postgres.layout``), a run that changes class moves to another leaf.
A statement that waited for its lock (a heartbeat, a cancel, the record of the
same run) then fails with a serialization error, in READ COMMITTED too, where
on a plain table it would have read the run's new version. Running it again
does just that: the moved run no longer matches, or matches where it is now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, transaction

T = TypeVar("T")

#: SQLSTATE of a serialization failure.
SERIALIZATION_FAILURE = "40001"
#: Tries in all: moves are rare beside any one statement, and each retry sees them committed.
TRIES = 3


def is_moved_row(exc: BaseException) -> bool:
    """Whether ``exc`` is the serialization failure of a row moved to another partition."""
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) == SERIALIZATION_FAILURE and "partition" in str(cause)


def retry_moved(alias: str, step: Callable[[], T]) -> T:
    """Run ``step`` in a transaction (a savepoint inside one); again if it met a moved run."""

    def in_transaction() -> T:
        with transaction.atomic(using=alias):
            return step()

    return rerun_moved(in_transaction)


def rerun_moved(step: Callable[[], T]) -> T:
    """Call ``step`` (which opens its own transaction) again while it meets a moved run."""
    for tried in range(1, TRIES + 1):
        try:
            return step()
        except OperationalError as exc:
            if tried == TRIES or not is_moved_row(exc):
                raise
    raise AssertionError("unreachable")
