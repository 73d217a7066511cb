"""Guards: a transition moves only runs its table allows; the worker's steps only runs it holds."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt
from django_strait.states import InvalidTransition, RunStatus, Transition
from django_strait.storage import Hold, Record, RecordBatch
from tests.conformance.conftest import claim, rescue, start
from tests.integration.factories import make_job, make_run

# Committed, as a worker's claims are: PostgreSQL's claim asks now(), the transaction's time.
pytestmark = pytest.mark.django_db(transaction=True)


def ended(
    run_id: int, worker: str, attempt: int = 1, transition=Transition.COMPLETE
) -> RecordBatch:
    now = timezone.now()
    job_id = JobRun.objects.values_list("job_id", flat=True).get(pk=run_id)
    rec = Record(run_id, attempt, transition, now, now, 3, "succeeded", result=1, job_id=job_id)
    return RecordBatch(worker, [rec])


def status(run) -> str:
    return JobRun.objects.values_list("status", flat=True).get(pk=run.pk)


#: Each transition a person asks for, and the storage verb that applies it.
VERBS = {
    Transition.REPLAY: lambda storage, run_id, now: storage.replay(run_id, by="t", now=now),
    Transition.DROP: lambda storage, run_id, now: storage.drop(run_id, now=now),
    Transition.CANCEL: lambda storage, run_id, now: storage.cancel(run_id, now=now),
}


@pytest.mark.parametrize(("transition", "allowed"), [(t, sorted(t.sources)) for t in VERBS])
def test_verbs__move_only_from_the_statuses_the_table_allows(storage, transition, allowed):
    verb = VERBS[transition]
    for current in RunStatus:
        run = make_run(status=current)
        if current in transition.sources:
            assert verb(storage, run.pk, timezone.now()).status == transition.target
        else:
            with pytest.raises(InvalidTransition) as caught:
                verb(storage, run.pk, timezone.now())
            assert caught.value.status == current
            assert f"allowed from: {', '.join(allowed)}" in str(caught.value)
            assert status(run) == current


@pytest.mark.parametrize("transition", list(VERBS))
def test_verbs__a_run_that_does_not_exist_is_said_so(storage, transition):
    with pytest.raises(JobRun.DoesNotExist):
        VERBS[transition](storage, 10**9, timezone.now())


def test_start__leaves_out_a_run_canceled_since_its_claim(storage):
    job = make_job()
    kept, canceled = make_run(job), make_run(job)
    claimed = claim(storage)
    storage.cancel(canceled.pk, now=timezone.now())

    started = storage.start("w1", claimed, now=timezone.now())

    assert [r.id for r in started] == [kept.pk]
    assert status(canceled) == "canceled"


def test_start__leaves_out_runs_another_worker_holds(storage):
    make_run()
    claimed = claim(storage, "w1")

    assert storage.start("w2", claimed, now=timezone.now()) == []


@pytest.mark.parametrize(
    ("worker", "attempt", "why"),
    [("w2", 1, "another worker"), ("w1", 2, "a stale attempt number")],
)
def test_record__moves_only_runs_held_by_this_worker_at_that_attempt(storage, worker, attempt, why):
    run = make_run()
    start(storage, "w1")

    done = storage.record(ended(run.pk, worker, attempt))

    assert (done.moved, done.lost) == ({}, [run.pk]), why
    assert status(run) == "executing"
    assert not RunAttempt.objects.filter(run=run).exists()


def test_record__a_run_not_executing_is_lost(storage):
    run = make_run(status="queued")

    done = storage.record(ended(run.pk, "w1"))

    assert done.lost == [run.pk] and status(run) == "queued"


def test_record__a_run_whose_cancel_was_asked_ends_canceled_with_its_attempt(storage):
    run = make_run()
    start(storage, "w1")
    assert storage.request_cancel(run.pk, now=timezone.now())

    done = storage.record(ended(run.pk, "w1"))

    assert done.moved == {run.pk: "canceled"}
    assert RunAttempt.objects.get(run=run).outcome == "succeeded"


def test_request_cancel__flags_only_executing_runs(storage):
    queued = make_run()
    assert not storage.request_cancel(queued.pk, now=timezone.now())
    assert not JobRun.objects.get(pk=queued.pk).cancel_requested


def test_hold__moves_only_dequeued_runs_of_this_worker(storage):
    job = make_job()
    mine, executing = make_run(job), make_run(job, status="executing")
    claim(storage, "w1")
    later = timezone.now()
    holds = [Hold(r.pk, later, "test.held", "held") for r in (mine, executing)]

    storage.hold("w2", holds[:1], now=later)  # another worker's hold moves nothing
    assert status(mine) == "dequeued"
    storage.hold("w1", holds, now=later)

    assert (status(mine), status(executing)) == ("queued", "executing")
    held = JobRun.objects.get(pk=mine.pk)
    assert (held.error_type, held.attempt, held.claimed_by) == ("test.held", 0, "")


def test_unclaim__puts_back_only_unstarted_runs_of_this_worker_without_an_attempt(storage):
    runs = [make_run() for _ in range(3)]
    claimed = claim(storage, "w1", 3)

    assert storage.unclaim("w2", [r.id for r in claimed], now=timezone.now()) == 0
    assert storage.unclaim("w1", [r.id for r in claimed], now=timezone.now()) == 3
    assert {(status(r), JobRun.objects.get(pk=r.pk).attempt) for r in runs} == {("queued", 0)}


def test_heartbeat__touches_only_runs_this_worker_holds(storage):
    run = make_run()
    start(storage, "w1")
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=None)

    assert storage.heartbeat("w2", [run.pk], now=timezone.now()) == 0
    assert storage.heartbeat("w1", [run.pk], now=timezone.now()) == 1
    assert JobRun.objects.get(pk=run.pk).heartbeat_at is not None


def test_replay_many__moves_only_replayable_runs(storage):
    replayable = [
        make_run(status=s) for s in ("dead_letter", "failed", "discarded", "system_failed")
    ]
    others = [make_run(status=s) for s in ("queued", "executing", "completed", "canceled")]

    moved = storage.replay_many([r.pk for r in replayable + others], by="ops", now=timezone.now())

    assert moved == 4
    assert {status(r) for r in replayable} == {"queued"}
    assert [status(r) for r in others] == ["queued", "executing", "completed", "canceled"]


def test_record__tried_again_after_its_commit_landed_finds_the_run_already_recorded(storage):
    # The completer writes a batch again when its connection dropped; the first
    # COMMIT may have landed before the drop.
    run = make_run()
    start(storage, "w1")
    batch = ended(run.pk, "w1")
    first = storage.record(batch)

    again = storage.record(batch)

    assert first.moved == {run.pk: "completed"}
    assert (again.moved, again.lost, again.already) == ({}, [], [run.pk])
    assert RunAttempt.objects.filter(run=run).count() == 1


def test_record__of_a_run_the_reaper_took_is_lost_not_already_recorded(storage):
    run = make_run(make_job(max_attempts=3))
    start(storage, "w1")
    silent = timezone.now() - dt.timedelta(hours=1)
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=silent, dequeued_at=silent)
    rescue(
        storage
    )  # its worker.lost attempt has this run, number and worker, not this record's end

    done = storage.record(ended(run.pk, "w1"))

    assert (done.moved, done.lost, done.already) == ({}, [run.pk], [])
