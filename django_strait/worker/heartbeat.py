"""``context.heartbeat()`` for handlers: the run is alive and making progress.

The worker already heartbeats every run it holds, in one statement per interval,
while its event loop turns. A handler that calls ``heartbeat()`` adds this: from
a handler thread the run's ``heartbeat_at`` is written at once (at most once a
second), so a handler that starves the loop still proves itself alive; from a
coroutine (on the loop, where the ORM must not block) the run is marked and
flushed with the next batched heartbeat.

A beat is best effort: when the database is away (a restart, a failover) it is
logged and dropped, never raised into the handler, whose attempt would fail for
it; the worker's own heartbeats go on, and the next beat connects again.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import InterfaceError, OperationalError, connections
from django.utils import timezone

from django_strait.storage import Storage

logger = logging.getLogger(__name__)

#: Least seconds between two direct writes for one run.
MIN_INTERVAL = 1.0


class Heartbeats:
    """Heartbeats asked for by handlers of one worker."""

    def __init__(self, worker_id: str, storage: Storage) -> None:
        self.worker_id = worker_id
        self.storage = storage
        self.marked: set[int] = set()
        self._last: dict[int, float] = {}
        self._loop_thread = threading.get_ident()

    def for_run(self, run_id: int):
        """Return the ``heartbeat()`` callable for one run's context."""
        return lambda: self.beat(run_id)

    def beat(self, run_id: int) -> None:
        """Record that ``run_id`` is alive (thread-safe)."""
        if threading.get_ident() == self._loop_thread:
            self.marked.add(run_id)
            return
        now = time.monotonic()
        if now - self._last.get(run_id, 0.0) < MIN_INTERVAL:
            return
        self._last[run_id] = now
        try:
            self.storage.heartbeat(self.worker_id, [run_id], now=timezone.now())
        except (InterfaceError, OperationalError) as exc:
            logger.warning("heartbeat of run %s not written: %s", run_id, exc)
            connections[self.storage.alias].close_if_unusable_or_obsolete()
        # The handler thread's connection is closed when the handler returns.

    def forget(self, run_id: int) -> None:
        """Drop what is kept for a finished run."""
        self._last.pop(run_id, None)
        self.marked.discard(run_id)
