"""The completer: ended attempts written in batches, retried and split when a write fails.

River's ``JobCompleter``: executors hand over records as attempts end; the
completer writes whatever has piled up in one record (at most
:data:`RECORD_BATCH_MAX`), so the database sees one statement per batch, not
per run. Nothing a live worker holds is left unrecorded:

- a write that fails for any reason but a lost connection (a value the
  database refuses, a row a record part cannot read: ``DataError``,
  ``RecursionError``, ``OverflowError``...) is split in halves, and the halves
  again, until the bad record is alone; that one is written again as a failed
  attempt that retries (``worker.record_failed``) without the value that was
  refused; if even that is refused, the run is left to the reaper, and the log
  says so. The good records of the batch are written on the way;
- a write that fails for want of a connection is retried as a whole with a
  capped backoff, until the database is back (or, when the worker is closing,
  until the shutdown timeout has passed).

A worker's record batch is at most its concurrency (:func:`record_batch`), and
the producer counts ended attempts waiting beyond one batch as taken slots: a
worker killed at any moment leaves at most its concurrency and one record batch of
runs unrecorded (docs/worker.md, "Nothing is lost").

It knows nothing of the database: ``write`` (given by the worker) does the
writing on a database thread, so the completer is tested against a fake.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from django.db import InterfaceError, OperationalError
from django.utils import timezone

from django_strait.rules.states import Transition
from django_strait.storage.values import Record, Recorded
from django_strait.transitions.decisions import trim

logger = logging.getLogger(__name__)

#: Most records written in one statement.
RECORD_BATCH_MAX = 500
#: How long a run whose result was refused waits before it is tried again.
RECORD_FAILED_RETRY = dt.timedelta(seconds=60)
#: The error type of an attempt whose result the database refused.
RECORD_FAILED_ERROR = "worker.record_failed"
#: The longest wait between two tries of a write that lost its connection: no longer
#: than a failed claim waits (the poll interval's default), so that results wait at
#: most a second past the database's return. Through a failover the backoff had grown
#: to 5 s while no server took writes, and held every result back that long after
#: the promotion, past the first claims on the new primary (docs/operations.md,
#: "Failover").
MAX_BACKOFF = 1.0

Write = Callable[[list[Record]], Awaitable[Recorded]]


def record_batch(concurrency: int) -> int:
    """The most records a worker of ``concurrency`` writes in one statement.

    No more than it runs at once: the runs of the batch being written, with those
    executing, are what a kill -9 runs again, so the batch bounds what a crash costs.
    """
    return max(1, min(RECORD_BATCH_MAX, concurrency))


class Completer:
    """Batches ended attempts and writes them, one batch at a time."""

    def __init__(
        self,
        write: Write,
        *,
        on_recorded: Callable[[list[Record], Recorded], None],
        wake: Callable[[], None] = lambda: None,
        shutdown_timeout: float = 30.0,
        max_batch: int = RECORD_BATCH_MAX,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._write = write
        self._on_recorded = on_recorded
        self._wake = wake
        self._shutdown_timeout = shutdown_timeout
        self._max_batch = max_batch
        self._sleep = sleep
        self._pending: list[Record] = []
        self._arrived = asyncio.Event()
        #: The sizes of the next writes, while a failed batch is split (empty: full batches).
        self._sizes: list[int] = []
        #: Records taken for the write under way (0: none under way).
        self._in_write = 0
        self._closing = False

    def add(self, record: Record) -> None:
        """Queue one ended attempt for the next write."""
        self._pending.append(record)
        self._arrived.set()

    @property
    def idle(self) -> bool:
        """Nothing waits to be written and nothing is being written."""
        return not self._pending and not self._in_write

    @property
    def max_batch(self) -> int:
        """The most records written in one statement."""
        return self._max_batch

    @property
    def unrecorded(self) -> int:
        """Ended attempts not written yet: waiting, and in the write under way."""
        return len(self._pending) + self._in_write

    def close(self) -> None:
        """Write what is left, then let ``run`` return."""
        self._closing = True
        self._arrived.set()

    async def run(self) -> None:
        """Write batches as records arrive, until closed and drained."""
        failures = 0
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            chunk = self._take()
            self._in_write = len(chunk)
            try:
                done = await self._write(chunk)
                failures = 0
                self._on_recorded(chunk, done)
            except Exception as exc:
                failures += 1
                if not await self._after_error(chunk, exc, failures):
                    return
            finally:
                self._in_write = 0
                self._wake()

    def _take(self) -> list[Record]:
        size = self._sizes.pop(0) if self._sizes else self._max_batch
        chunk = self._pending[:size]
        del self._pending[: len(chunk)]
        return chunk

    async def _after_error(self, chunk: list[Record], exc: Exception, failures: int) -> bool:
        """Put ``chunk`` back in a form that can be written; False to give up (closing)."""
        refused = not is_connection_error(exc)
        if refused and len(chunk) > 1:
            # One bad record spoils the statement: find it by halves, writing the good ones.
            logger.exception("recording %s results failed; recording them in halves", len(chunk))
            self._pending[:0] = chunk
            half = len(chunk) // 2
            self._sizes[:0] = [half, len(chunk) - half]
        elif refused and chunk[0].error_type != RECORD_FAILED_ERROR:
            logger.exception(
                "recording run %s failed; recording it as a failed attempt", chunk[0].run_id
            )
            self._pending[:0] = [as_record_failure(chunk[0], exc)]
            self._sizes[:0] = [1]
        elif refused:
            logger.critical("run %s cannot be recorded at all; the reaper will", chunk[0].run_id)
        else:
            return await self._retry_later(chunk, failures)
        return True

    async def _retry_later(self, chunk: list[Record], failures: int) -> bool:
        delay = min(0.1 * 2**failures, MAX_BACKOFF)
        logger.exception("recording %s results failed; retrying in %.1fs", len(chunk), delay)
        self._pending[:0] = chunk
        if self._closing and failures * delay > self._shutdown_timeout:
            logger.critical(
                "giving up on recording runs %s; the reaper will", [r.run_id for r in chunk]
            )
            return False
        await self._sleep(delay)
        return True


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection was lost (try again), not that a value was refused."""
    return isinstance(exc, InterfaceError | OperationalError)


def as_record_failure(rec: Record, exc: Exception) -> Record:
    """A record the database refused, turned into a failed attempt that retries."""
    return replace(
        rec,
        transition=Transition.RETRY,
        available_at=timezone.now() + RECORD_FAILED_RETRY,
        result=None,
        outcome="failed",
        error_type=RECORD_FAILED_ERROR,
        error=trim(f"the database refused this attempt's result: {type(exc).__name__}: {exc}"),
        response_excerpt="",
    )
