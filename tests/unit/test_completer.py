"""The completer against an in-memory storage: batches, splits, retries; nothing left unrecorded."""

from __future__ import annotations

import asyncio
import logging

from django_strait.storage import RecordBatch, Recorded
from django_strait.worker.completer import Completer, record_batch
from tests.unit.memory import MemoryStorage, record

BAD = "\x00 refused"


def executing(storage: MemoryStorage, *ids: int) -> None:
    storage.add(*ids, status="executing")
    for rid in ids:
        storage.runs[rid].attempt, storage.runs[rid].claimed_by = 1, "w"


def drive(storage: MemoryStorage, records, *, shutdown_timeout: float = 30.0, **options):
    """Add ``records`` at once, run the completer until it has written them; return what it saw."""
    seen: list = []
    naps: list[float] = []

    async def write(chunk):
        return storage.record(RecordBatch("w", chunk))

    async def nap(seconds: float) -> None:
        naps.append(seconds)

    async def main():
        completer = Completer(
            write, on_recorded=lambda chunk, done: seen.append(done),
            shutdown_timeout=shutdown_timeout, sleep=nap, **options,
        )  # fmt: skip
        for rec in records:
            completer.add(rec)
        completer.close()
        await asyncio.wait_for(completer.run(), 5)
        return completer

    completer = asyncio.run(main())
    return seen, naps, completer


def test_completer__writes_what_piled_up_in_one_batch():
    storage = MemoryStorage()
    executing(storage, 1, 2, 3)

    seen, _, completer = drive(storage, [record(1), record(2), record(3)])

    assert storage.writes == [[1, 2, 3]]
    assert seen[0].moved == {1: "completed", 2: "completed", 3: "completed"}
    assert completer.idle


def test_completer__never_writes_more_than_its_batch_at_once():
    storage = MemoryStorage()
    executing(storage, *range(1, 8))

    drive(storage, [record(i) for i in range(1, 8)], max_batch=3)

    assert storage.writes == [[1, 2, 3], [4, 5, 6], [7]]


def test_completer__a_refused_batch_is_split_and_only_the_bad_record_is_changed(caplog):
    storage = MemoryStorage(refused_results={BAD})
    executing(storage, 1, 2, 3)
    records = [record(1), record(2, result=BAD), record(3)]

    with caplog.at_level(logging.ERROR):
        drive(storage, records)

    # The batch, then in halves: 1 alone, then 2 and 3 (refused), 2 refused alone, 2 again
    # as a failed attempt, 3 alone.
    assert storage.writes == [[1], [2], [3]]
    assert storage.runs[2].status == "queued"  # retried later, without the value refused
    assert (2, 1, "failed") in storage.attempts
    assert {storage.runs[i].status for i in (1, 3)} == {"completed"}
    assert "recording them in halves" in caplog.text


def test_completer__a_batch_failing_for_any_reason_is_split_until_the_bad_record_is_alone():
    """Not only DatabaseError: a record part that cannot read a row raises RecursionError."""
    storage = MemoryStorage(unreadable_runs={37})
    executing(storage, *range(1, 101))

    _, naps, _ = drive(storage, [record(i) for i in range(1, 101)])

    assert naps == []  # never retried as a whole, as a lost connection is
    written = [run_id for chunk in storage.writes for run_id in chunk]
    assert sorted(written) == [i for i in range(1, 101) if i != 37]
    assert len(storage.writes) <= 2 * 7  # halves: about two writes per halving, not 100
    assert {storage.runs[i].status for i in written} == {"completed"}
    assert storage.runs[37].status == "executing"  # refused even as a failure: the reaper's


def test_completer__a_record_refused_even_as_a_failure_is_left_to_the_reaper(caplog):
    storage = MemoryStorage(refused_results={BAD, "None"})
    executing(storage, 1)

    with caplog.at_level(logging.CRITICAL):
        drive(storage, [record(1, result=BAD)])

    assert storage.writes == []
    assert storage.runs[1].status == "executing"
    assert "cannot be recorded at all; the reaper will" in caplog.text


def test_completer__a_lost_connection_retries_the_whole_batch_with_backoff():
    storage = MemoryStorage(connection_failures=3)
    executing(storage, 1, 2)

    seen, naps, _ = drive(storage, [record(1), record(2)])

    assert storage.writes == [[1, 2]]  # written whole once the database is back
    assert naps == [0.2, 0.4, 0.8]
    assert seen[0].moved == {1: "completed", 2: "completed"}


def test_completer__a_long_outage_retries_every_second_at_most():
    # A failover: no server takes writes for seconds; the results go in within a
    # second of the new primary's first answer, not after a backoff grown meanwhile.
    storage = MemoryStorage(connection_failures=8)
    executing(storage, 1)

    _, naps, _ = drive(storage, [record(1)])

    assert naps == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert storage.runs[1].status == "completed"


def test_completer__closing_gives_up_after_the_shutdown_timeout(caplog):
    storage = MemoryStorage(connection_failures=10**6)
    executing(storage, 1)

    with caplog.at_level(logging.CRITICAL):
        _, naps, _ = drive(storage, [record(1)], shutdown_timeout=2.0)

    assert storage.writes == [] and storage.runs[1].status == "executing"
    assert sum(naps) <= 2.0 * 2
    assert "giving up on recording runs [1]; the reaper will" in caplog.text


def test_completer__a_run_no_longer_held_is_reported_lost_not_written():
    storage = MemoryStorage()
    executing(storage, 1)
    storage.runs[1].claimed_by = "another"

    seen, _, _ = drive(storage, [record(1)])

    assert seen[0].lost == [1] and storage.attempts == []


def test_say_unmoved__names_lost_runs_and_already_recorded_ones_apart(caplog):
    from django_strait.worker.recorder import say_unmoved

    with caplog.at_level(logging.INFO, logger="django_strait.worker.recorder"):
        say_unmoved(Recorded(lost=[3], already=[4, 5]))

    lines = {r.levelname: r.getMessage() for r in caplog.records}
    assert lines["WARNING"].startswith("results of runs [3] not recorded: no longer executing")
    assert lines["INFO"].startswith("results of runs [4, 5] already recorded")


def test_completer__counts_records_unrecorded_until_their_write_returns():
    """What the producer holds claims back by (engine._occupied): records waiting and
    those in the write under way, none once written."""
    storage = MemoryStorage()
    executing(storage, 1, 2, 3)
    seen_in_write: list[int] = []

    async def main():
        release = asyncio.Event()

        async def write(chunk):
            seen_in_write.append(completer.unrecorded)
            await release.wait()
            return storage.record(RecordBatch("w", chunk))

        completer = Completer(write, on_recorded=lambda chunk, done: None, max_batch=2)
        for rid in (1, 2, 3):
            completer.add(record(rid))
        waiting = completer.unrecorded
        task = asyncio.create_task(completer.run())
        await asyncio.sleep(0.01)
        during = completer.unrecorded
        completer.close()
        release.set()
        await asyncio.wait_for(task, 5)
        return waiting, during, completer.unrecorded

    assert asyncio.run(main()) == (3, 3, 0)
    assert seen_in_write == [3, 1]
    assert storage.writes == [[1, 2], [3]]


def test_record_batch__is_the_concurrency_up_to_the_statements_limit():
    # A kill -9 runs again what executes and the batch being written: both bounded.
    assert [record_batch(c) for c in (1, 10, 500, 2000)] == [1, 10, 500, 500]
