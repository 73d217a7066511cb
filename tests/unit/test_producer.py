"""The producer against an in-memory storage: how much it claims, when it waits, when it stops."""

from __future__ import annotations

import asyncio
import logging

from django_strait.worker.producer import Producer
from tests.unit.memory import NOW, MemoryStorage


class Harness:
    """A producer over a MemoryStorage; spawned runs end when the test says."""

    def __init__(self, storage: MemoryStorage, *, fail: int = 0, **options) -> None:
        self.storage = storage
        self.calls: list[tuple[int, bool]] = []
        self.in_flight: list[int] = []
        self.fail = fail  # claims that raise first
        options = {"concurrency": 10, "batch_size": 4, "poll_interval": 0.01, **options}
        self.producer = Producer(
            self.claim, self.spawn, in_flight=lambda: len(self.in_flight),
            drained=lambda: not self.in_flight, **options,
        )  # fmt: skip

    async def claim(self, limit: int, isolate: bool):
        self.calls.append((limit, isolate))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("claim failed")
        claimed = self.storage.claim("w", queues=(), limit=limit, now=NOW)
        return self.storage.start("w", claimed, now=NOW)

    def spawn(self, run) -> None:
        self.in_flight.append(run.id)

    def finish_all(self) -> None:
        self.in_flight.clear()
        self.producer.wake.set()


def run_for(harness: Harness, seconds: float) -> None:
    async def main():
        task = asyncio.create_task(harness.producer.run())
        await asyncio.sleep(seconds)
        harness.producer.stop()
        await asyncio.wait_for(task, 1)

    asyncio.run(main())


def test_producer__claims_a_batch_at_a_time_up_to_its_free_slots():
    storage = MemoryStorage()
    storage.add(*range(1, 13))
    harness = Harness(storage, concurrency=10, batch_size=4)

    run_for(harness, 0.05)

    assert harness.in_flight == list(range(1, 11))  # two batches of 4, then the 2 free slots
    assert [limit for limit, _ in harness.calls[:3]] == [4, 4, 2]
    assert harness.producer.claimed == 10


def test_producer__waits_while_fewer_than_half_its_slots_are_free():
    storage = MemoryStorage()
    storage.add(*range(1, 30))
    harness = Harness(storage, concurrency=10, batch_size=10)

    run_for(harness, 0.05)

    # One claim filled every slot; with none free it waits for a run to end.
    assert harness.calls == [(10, False)]


def test_producer__burst_returns_once_nothing_is_due_or_in_flight():
    storage = MemoryStorage()
    storage.add(1, 2, 3)
    harness = Harness(storage, burst=True)

    async def main():
        task = asyncio.create_task(harness.producer.run())
        await asyncio.sleep(0.02)
        assert not task.done()  # three runs still in flight
        harness.finish_all()
        await asyncio.wait_for(task, 1)

    asyncio.run(main())
    assert [c for c in harness.calls] == [(4, False), (4, False)]


def test_producer__burst_claims_again_when_a_result_lands_during_an_empty_claim():
    # A workflow step's record queues its child while the claim is awaited: the claim
    # saw nothing, the record woke the producer; a burst worker must look once more.
    storage = MemoryStorage()
    harness = Harness(storage, burst=True)
    claim = harness.claim

    async def claim_while_a_record_lands(limit: int, isolate: bool):
        runs = await claim(limit, isolate)
        if len(harness.calls) == 1:
            storage.add(7)  # committed after this claim's snapshot
            harness.producer.wake.set()
        return runs

    harness.producer._claim = claim_while_a_record_lands

    async def main():
        task = asyncio.create_task(harness.producer.run())
        await asyncio.sleep(0.02)
        assert harness.in_flight == [7]
        harness.finish_all()
        await asyncio.wait_for(task, 1)

    asyncio.run(main())


def test_producer__a_failed_claim_is_tried_again_at_once_job_by_job(caplog):
    storage = MemoryStorage()
    storage.add(1, 2)
    harness = Harness(storage, fail=1)

    with caplog.at_level(logging.ERROR):
        run_for(harness, 0.05)

    assert harness.calls[:2] == [(4, False), (4, True)]  # then job by job, at once
    assert harness.in_flight == [1, 2]
    assert harness.calls[2][1] is False  # back to whole batches after a good claim
    assert "claiming again job by job" in caplog.text


def test_producer__a_claim_that_fails_job_by_job_too_waits_a_poll_interval(caplog):
    storage = MemoryStorage()
    harness = Harness(storage, fail=10**6, poll_interval=0.02)

    with caplog.at_level(logging.ERROR):
        run_for(harness, 0.1)

    # Whole, then job by job at once, then job by job every poll interval: not a busy loop.
    assert harness.calls[:2] == [(4, False), (4, True)]
    assert 2 < len(harness.calls) <= 8
    assert "claim failed; retrying in 0.02s" in caplog.text


def test_producer__stop_makes_it_return_without_claiming_again():
    harness = Harness(MemoryStorage())

    async def main():
        task = asyncio.create_task(harness.producer.run())
        await asyncio.sleep(0.02)
        calls = len(harness.calls)
        harness.producer.stop()
        await asyncio.wait_for(task, 1)
        return calls

    calls = asyncio.run(main())
    assert len(harness.calls) == calls


def test_producer__burst_naps_while_leftover_says_holds_clear_then_claims_them():
    # Runs held by a limit: nothing is due now, but they will be; the burst waits.
    storage = MemoryStorage()
    naps: list[float | None] = [0.01, 0.01]

    async def leftover():
        if len(naps) == 1:
            storage.add(5)  # the limit let it go
        return naps.pop(0) if naps else None

    harness = Harness(storage, burst=True, leftover=leftover)

    async def main():
        task = asyncio.create_task(harness.producer.run())
        await asyncio.sleep(0.05)
        assert harness.in_flight == [5]
        harness.finish_all()
        await asyncio.wait_for(task, 1)

    asyncio.run(main())
    assert naps == []
