"""Plain-function handlers on worker threads, outcomes handed back in batches.

``loop.run_in_executor`` costs a concurrent future, an asyncio future chained to
it and one loop wake-up per call: for short handlers that overhead is most of
the loop thread's time. Here threads take runs from a queue, call the handler in
place, and append outcomes to a list that the loop collects with one wake-up for
however many finished meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from django_strait.dispatch.python import RunContext, call_sync
from django_strait.rules.outcome import failure

logger = logging.getLogger(__name__)

#: (the caller's token, what call_sync returned)
Done = tuple[Any, Any]


class SyncRunner:
    """Up to ``threads`` threads calling plain-function handlers."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[Done]], None],
        *,
        threads: int,
        max_result_bytes: int,
    ) -> None:
        self._loop = loop
        self._deliver = deliver
        self._max_threads = threads
        self._max_result_bytes = max_result_bytes
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._done: list[Done] = []
        self._scheduled = False
        self._threads: list[threading.Thread] = []
        self._idle = 0

    def submit(
        self, token: Any, func: Callable[..., Any], payload: Any, context: RunContext
    ) -> None:
        """Queue one call; ``deliver`` later receives ``(token, outcome)``."""
        with self._lock:
            spawn = self._idle == 0 and len(self._threads) < self._max_threads
            if not spawn:
                self._idle -= 1
        if spawn:
            self._spawn()
        self._work.put((token, func, payload, context))

    def close(self) -> None:
        """Ask every thread to exit once the queue is empty (does not wait)."""
        for _ in self._threads:
            self._work.put(None)

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._serve, name=f"strait-run-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            token, func, payload, context = item
            try:
                result = call_sync(func, payload, context, max_result_bytes=self._max_result_bytes)
            except BaseException as exc:  # call_sync contains handlers; this is a bug net
                logger.exception("handler thread failed on run %s", context.run_id)
                result = failure("worker.internal", f"{type(exc).__name__}: {exc}")
            with self._lock:
                self._idle += 1
                self._done.append((token, result))
                wake = not self._scheduled
                self._scheduled = True
            if wake:
                try:
                    self._loop.call_soon_threadsafe(self._flush)
                except RuntimeError:  # the loop closed: shutdown gave up on this run
                    logger.warning("run %s finished after the worker stopped", context.run_id)

    def _flush(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._scheduled = False
        self._deliver(done)
