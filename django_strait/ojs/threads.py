"""The fast door's database threads: a call in, its answer back to the event loop.

``loop.run_in_executor`` pays for two futures per call (a ``concurrent.futures``
one with its condition and lock, an asyncio one chained to it, and the callbacks
that copy one's state to the other). Here a call is a tuple on a queue, and its
answer is set on the asyncio future by the event loop itself, woken once
(``call_soon_threadsafe``): the same work, a third of the event loop's share of a
request's hand-over (docs/benchmarks.md, "The OJS fast door").
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

#: What a thread is told when the threads stop.
_STOP = None


class DatabaseThreads:
    """``count`` threads calling what :meth:`call` is given, each with its own connection."""

    def __init__(self, count: int, *, name: str = "strait-ojs") -> None:
        self.count = count
        self.name = name
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` in one of the threads; its answer (or exception) on the future returned."""
        if len(self._threads) < self.count:
            self._start()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._calls.put((loop, future, fn, args))
        return future

    def _start(self) -> None:
        with self._lock:
            while len(self._threads) < self.count:
                thread = threading.Thread(
                    target=self._serve, name=f"{self.name}_{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        while (work := self._calls.get()) is not _STOP:
            loop, future, fn, args = work
            try:
                answer = fn(*args)
            except BaseException as exc:  # the caller's to raise, as run_in_executor does
                _answer(loop, future, None, exc)
            else:
                _answer(loop, future, answer, None)

    def stop(self) -> None:
        """Let every call already given end, then end the threads."""
        with self._lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._calls.put(_STOP)
        for thread in threads:
            thread.join()


def _answer(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    answer: Any,
    failure: BaseException | None,
) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, answer, failure)
    except RuntimeError:  # the loop closed meanwhile: nobody waits for the answer
        pass


def _settle(future: asyncio.Future[Any], answer: Any, failure: BaseException | None) -> None:
    if future.cancelled():
        return
    if failure is not None:
        future.set_exception(failure)
    else:
        future.set_result(answer)
