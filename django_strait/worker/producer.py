"""The producer: the claim loop that keeps the worker's slots full.

River's producer: it claims a batch when at least half the slots are free (so
claims stay large enough to share their fixed cost), hands each run to the
executors, and sleeps when nothing is due, until a run ends, a NOTIFY says runs
were queued, or the poll interval passes. A failed claim is tried again at
once, job by job (one bad job's runs are then held alone); a claim that fails
job by job too waits a poll interval. With ``burst`` it returns once nothing is
due, nothing is in flight, and ``leftover`` says what still waits will not clear
soon (runs held by a concurrency or rate limit do: it naps and claims again).

It knows nothing of the database: ``claim`` (given by the worker) claims on a
database thread, so the producer is tested against a fake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from django_strait.storage.values import Claimed

logger = logging.getLogger(__name__)

#: ``claim(limit, isolate)``: the runs claimed and started (raise if the claim failed).
Claim = Callable[[int, bool], Awaitable[list[Claimed]]]
#: ``leftover()``: seconds to nap before claiming again, or None when a burst is done.
Leftover = Callable[[], Awaitable[float | None]]


async def _nothing_left() -> float | None:
    return None


class Producer:
    """Claims runs while there is room, and hands them on."""

    def __init__(
        self,
        claim: Claim,
        spawn: Callable[[Claimed], None],
        *,
        in_flight: Callable[[], int],
        drained: Callable[[], bool],
        concurrency: int,
        batch_size: int,
        burst: bool = False,
        poll_interval: float = 1.0,
        leftover: Leftover = _nothing_left,
    ) -> None:
        self._claim = claim
        self._spawn = spawn
        self._in_flight = in_flight
        self._drained = drained
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.burst = burst
        self.poll_interval = poll_interval
        self._leftover = leftover
        #: A slot freed or a result was recorded.
        self.wake = asyncio.Event()
        #: New runs may be due: a NOTIFY arrived (or the worker is stopping).
        self.work = asyncio.Event()
        self.stopping = False
        self.claimed = 0
        #: The last claim failed: claim the next one job by job.
        self._isolate = False

    def stop(self) -> None:
        """Claim nothing more; ``run`` returns at its next turn."""
        self.stopping = True
        self.wake.set()
        self.work.set()

    async def run(self) -> None:
        """Claim and hand on runs until stopped (or, with ``burst``, until drained)."""
        low_water = max(1, min(self.batch_size, self.concurrency) // 2)
        while not self.stopping:
            # Clear before looking, never inside the wait: a run ending, a result
            # recorded or a NOTIFY while the claim below is awaited must still wake
            # the wait (lost, a --burst worker would wait forever).
            self.wake.clear()
            self.work.clear()
            free = self.concurrency - self._in_flight()
            if free < low_water and self._in_flight():
                await _wait(self.wake, None)
                continue
            want = min(free, self.batch_size)
            runs = await self._claim_once(want)
            if runs is None:
                continue
            for run in runs:
                self._spawn(run)
            if len(runs) < want and await self._idle(bool(runs)):
                return

    async def _claim_once(self, want: int) -> list[Claimed] | None:
        """Claim; on failure, None after arranging the next try (at once job by job, else later)."""
        isolate = self._isolate
        try:
            runs = await self._claim(want, isolate)
        except Exception:
            if isolate:
                logger.exception("claim failed; retrying in %ss", self.poll_interval)
                await _wait(self.work, self.poll_interval)
            else:
                # Perhaps one job's row or runs: claim again at once, job by job.
                logger.exception("claim failed; claiming again job by job")
            self._isolate = True
            return None
        self._isolate = False
        self.claimed += len(runs)
        return runs

    async def _idle(self, claimed_some: bool) -> bool:
        """Wait for something to do; True when a burst worker has drained everything."""
        if not self.burst:
            # Runs ending do not wake this wait: the queue was just found empty, and
            # claiming again for every ended run would only cost empty claims.
            await _wait(self.work, self.poll_interval)
            return False
        # A result recorded while the claim above was awaited may have queued runs
        # that claim could not see (a workflow's next steps): claim again first.
        if not claimed_some and self._drained() and not self.wake.is_set():
            nap = await self._leftover()
            if nap is None:
                return True
            await _wait(self.wake, nap)  # held by limits: they clear as runs end, windows pass
            return False
        await _wait(self.wake, None)  # until something in flight ends
        return False


async def _wait(event: asyncio.Event, timeout: float | None) -> None:
    """Wait for ``event`` (set since the caller last cleared it), at most ``timeout``.

    Under ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11 ``wait_for``
    wraps the wait in a task of its own, and a NOTIFY that sets ``event`` then
    reaches the claim loop a few loop turns later (docs/benchmarks.md, "The peer
    harness's milliseconds").
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
