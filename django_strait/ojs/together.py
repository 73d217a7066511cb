"""Requests of many workers answered by one statement: the fast door's group commit.

Eight workers that each ack one job pay, one at a time, eight record statements, eight
commits and eight waits for the per-minute rollup row's lock. Here the acks that
arrive while a record is under way wait for it to end, then go together in the next
one: one statement, one commit (as the native worker's completer records its
attempts). No request waits for a timer: a lone ack is recorded at once, as before.
Fetches of one queue are claimed together the same way.

:class:`Together` is the mechanism, with no thread of its own: the first caller leads
(runs the batch in its own thread, on its own database connection), the callers
that came meanwhile wait; when its batch ends, the leader answers each caller of it
and hands the next batch, everything that has come since, to the first of those
waiting, who leads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Most requests answered by one batch (each ack a row of the record statement).
MOST = 64


class _Waiting(Generic[T]):
    __slots__ = ("item", "woken", "answer", "failure", "lead")

    def __init__(self, item: T) -> None:
        self.item = item
        #: Held until the caller is answered or handed a batch: a bare lock, one
        #: futex each way (an Event is a Condition, a lock and a list of waiters).
        self.woken = threading.Lock()
        self.woken.acquire()
        self.answer: Any = None
        self.failure: BaseException | None = None
        #: The batch this caller is to lead, when it is handed one.
        self.lead: list[_Waiting[T]] | None = None


class Together(Generic[T, R]):
    """Calls from many threads answered in batches by ``run``, one batch at a time.

    ``run`` takes the items of a batch and returns one answer per item, in their order:
    a value, or the exception that caller is to raise. If ``run`` itself raises, every
    caller of the batch raises that.
    """

    def __init__(
        self, run: Callable[[Sequence[T]], Sequence[R | BaseException]], *, most: int = MOST
    ) -> None:
        self._run = run
        self._most = most
        self._lock = threading.Lock()
        self._queue: list[_Waiting[T]] = []
        self._busy = False

    def __call__(self, item: T) -> R:
        me = _Waiting(item)
        with self._lock:
            if self._busy:
                self._queue.append(me)
                batch = None
            else:
                self._busy = True
                batch = [me]
        if batch is None:
            me.woken.acquire()
            batch = me.lead
        if batch is not None:
            self._serve(batch)
        if me.failure is not None:
            raise me.failure
        return me.answer  # type: ignore[no-any-return]

    def _serve(self, batch: list[_Waiting[T]]) -> None:
        try:
            answers: Sequence[Any] = self._run([w.item for w in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"{len(answers)} answers to a batch of {len(batch)}")
        except BaseException as exc:  # each caller raises it; none is left waiting
            answers = [exc] * len(batch)
        # The next batch first, so that its statement is on its way while these answer.
        with self._lock:
            following = self._queue[: self._most]
            del self._queue[: self._most]
            if not following:
                self._busy = False
        if following:
            following[0].lead = following
            following[0].woken.release()
        for waiting, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                waiting.failure = answer
            else:
                waiting.answer = answer
            if waiting.lead is None:  # a leader woke already, and answers itself
                waiting.woken.release()
