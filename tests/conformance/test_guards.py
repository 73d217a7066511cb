"""Guards: a transition moves only runs its table allows; the worker's steps only runs it holds.

These tests make and read rows through ``rows`` (tests/conformance/rows.py), so a
backend that keeps runs outside the tables (the in-memory one) runs them too; the
one that needs the reaper's rows is marked ``needs_database``.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import JobRun
from django_strait.rules.states import InvalidTransition, RunStatus, Transition
from django_strait.storage import Hold, Record, RecordBatch
from tests.conformance.conftest import claim, rescue, start

# Committed, as a worker's claims are: PostgreSQL's claim asks now(), the transaction's time.
pytestmark = pytest.mark.django_db(transaction=True)


def ended(rows, run_id: int, worker: str, attempt: int = 1) -> RecordBatch:
    now = timezone.now()
    job_id = rows.value(run_id, "job_id")
    rec = Record(
        run_id, attempt, Transition.COMPLETE, now, now, 3, "succeeded", result=1, job_id=job_id
    )
    return RecordBatch(worker, [rec])


#: Each transition a person asks for, and the storage verb that applies it.
VERBS = {
    Transition.REPLAY: lambda storage, run_id, now: storage.replay(run_id, by="t", now=now),
    Transition.DROP: lambda storage, run_id, now: storage.drop(run_id, now=now),
    Transition.CANCEL: lambda storage, run_id, now: storage.cancel(run_id, now=now),
}


@pytest.mark.parametrize(("transition", "allowed"), [(t, sorted(t.sources)) for t in VERBS])
def test_verbs__move_only_from_the_statuses_the_table_allows(storage, rows, transition, allowed):
    verb = VERBS[transition]
    for current in RunStatus:
        run = rows.run(status=current)
        if current in transition.sources:
            assert verb(storage, run, timezone.now()).status == transition.target
        else:
            with pytest.raises(InvalidTransition) as caught:
                verb(storage, run, timezone.now())
            assert caught.value.status == current
            assert f"allowed from: {', '.join(allowed)}" in str(caught.value)
            assert rows.value(run, "status") == current


@pytest.mark.parametrize("transition", list(VERBS))
def test_verbs__a_run_that_does_not_exist_is_said_so(storage, transition):
    with pytest.raises(JobRun.DoesNotExist):
        VERBS[transition](storage, 10**9, timezone.now())


def test_start__leaves_out_a_run_canceled_since_its_claim(storage, rows):
    job = rows.job()
    kept, canceled = rows.run(job), rows.run(job)
    claimed = claim(storage)
    storage.cancel(canceled, now=timezone.now())

    started = storage.start("w1", claimed, now=timezone.now())

    assert [r.id for r in started] == [kept]
    assert rows.value(canceled, "status") == "canceled"


def test_start__leaves_out_runs_another_worker_holds(storage, rows):
    rows.run()
    claimed = claim(storage, "w1")

    assert storage.start("w2", claimed, now=timezone.now()) == []


@pytest.mark.parametrize(
    ("worker", "attempt", "why"),
    [("w2", 1, "another worker"), ("w1", 2, "a stale attempt number")],
)
def test_record__moves_only_runs_held_by_this_worker_at_that_attempt(
    storage, rows, worker, attempt, why
):
    run = rows.run()
    start(storage, "w1")

    done = storage.record(ended(rows, run, worker, attempt))

    assert (done.moved, done.lost) == ({}, [run]), why
    assert rows.value(run, "status") == "executing"
    assert rows.attempts(run) == []


def test_record__a_run_not_executing_is_lost(storage, rows):
    run = rows.run(status="queued")

    done = storage.record(ended(rows, run, "w1"))

    assert done.lost == [run] and rows.value(run, "status") == "queued"


def test_record__a_run_whose_cancel_was_asked_ends_canceled_with_its_attempt(storage, rows):
    run = rows.run()
    start(storage, "w1")
    assert storage.request_cancel(run, now=timezone.now())

    done = storage.record(ended(rows, run, "w1"))

    assert done.moved == {run: "canceled"}
    assert rows.attempts(run) == ["succeeded"]


def test_request_cancel__flags_only_executing_runs(storage, rows):
    queued = rows.run()
    assert not storage.request_cancel(queued, now=timezone.now())
    assert not rows.value(queued, "cancel_requested")


def test_hold__moves_only_dequeued_runs_of_this_worker(storage, rows):
    job = rows.job()
    mine, executing = rows.run(job), rows.run(job, status="executing")
    claim(storage, "w1")
    later = timezone.now()
    holds = [Hold(r, later, "test.held", "held") for r in (mine, executing)]

    storage.hold("w2", holds[:1], now=later)  # another worker's hold moves nothing
    assert rows.value(mine, "status") == "dequeued"
    storage.hold("w1", holds, now=later)

    assert (rows.value(mine, "status"), rows.value(executing, "status")) == ("queued", "executing")
    held = [rows.value(mine, name) for name in ("error_type", "attempt", "claimed_by")]
    assert held == ["test.held", 0, ""]


def test_unclaim__puts_back_only_unstarted_runs_of_this_worker_without_an_attempt(storage, rows):
    runs = [rows.run() for _ in range(3)]
    claimed = claim(storage, "w1", 3)

    assert storage.unclaim("w2", [r.id for r in claimed], now=timezone.now()) == 0
    assert storage.unclaim("w1", [r.id for r in claimed], now=timezone.now()) == 3
    assert {(rows.value(r, "status"), rows.value(r, "attempt")) for r in runs} == {("queued", 0)}


def test_heartbeat__touches_only_runs_this_worker_holds(storage, rows):
    run = rows.run()
    start(storage, "w1")
    rows.update(run, heartbeat_at=None)

    assert storage.heartbeat("w2", [run], now=timezone.now()) == 0
    assert storage.heartbeat("w1", [run], now=timezone.now()) == 1
    assert rows.value(run, "heartbeat_at") is not None


def test_replay_many__moves_only_replayable_runs(storage, rows):
    replayable = [
        rows.run(status=s) for s in ("dead_letter", "failed", "discarded", "system_failed")
    ]
    others = [rows.run(status=s) for s in ("queued", "executing", "completed", "canceled")]

    moved = storage.replay_many(replayable + others, by="ops", now=timezone.now())

    assert moved == 4
    assert {rows.value(r, "status") for r in replayable} == {"queued"}
    assert [rows.value(r, "status") for r in others] == [
        "queued",
        "executing",
        "completed",
        "canceled",
    ]


def test_record__tried_again_after_its_commit_landed_finds_the_run_already_recorded(storage, rows):
    # The completer writes a batch again when its connection dropped; the first
    # COMMIT may have landed before the drop.
    run = rows.run()
    start(storage, "w1")
    batch = ended(rows, run, "w1")
    first = storage.record(batch)

    again = storage.record(batch)

    assert first.moved == {run: "completed"}
    assert (again.moved, again.lost, again.already) == ({}, [], [run])
    assert rows.attempts(run) == ["succeeded"]


@pytest.mark.needs_database
def test_record__of_a_run_the_reaper_took_is_lost_not_already_recorded(storage, rows):
    run = rows.run(rows.job(max_attempts=3))
    start(storage, "w1")
    silent = timezone.now() - dt.timedelta(hours=1)
    rows.update(run, heartbeat_at=silent, dequeued_at=silent)
    rescue(
        storage
    )  # its worker.lost attempt has this run, number and worker, not this record's end

    done = storage.record(ended(rows, run, "w1"))

    assert (done.moved, done.lost, done.already) == ({}, [run], [])
