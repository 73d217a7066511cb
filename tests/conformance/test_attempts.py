"""Attempt numbering: start spends one, a hold none, record writes it, replay resets, rescue counts."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_strait.models import JobRun, RunAttempt, RunHold
from django_strait.rules.states import Transition
from django_strait.storage import Hold, Record, RecordBatch
from tests.conformance.conftest import claim, rescue, start
from tests.integration.factories import make_job, make_run

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def fail_and_requeue(storage, run_id: int, attempt: int, worker: str = "w1") -> None:
    now = timezone.now()
    job_id, began = JobRun.objects.values_list("job_id", "started_at").get(pk=run_id)
    # The attempt began when the run says, as the worker's records say (outcomes.to_record).
    rec = Record(run_id, attempt, Transition.RETRY, began or now, now, 2, "failed", available_at=now,
                 error_type="http.503", error="down", job_id=job_id)  # fmt: skip
    assert storage.record(RecordBatch(worker, [rec])).moved == {run_id: "queued"}


def test_start__spends_an_attempt_at_the_claims_time(storage):
    run = make_run()
    now = timezone.now()
    with storage.claim_transaction():
        claimed = storage.claim("w1", queues=(), limit=1, now=now)
        [started] = storage.start("w1", claimed, now=now)

    row = JobRun.objects.get(pk=run.pk)
    assert (started.attempt, row.attempt, row.status) == (1, 1, "executing")
    assert started.started_at == row.started_at


def test_record__appends_the_attempt_of_the_runs_number_and_counts_on(storage):
    run = make_run()
    for attempt in (1, 2, 3):
        start(storage)
        fail_and_requeue(storage, run.pk, attempt)

    numbers = list(RunAttempt.objects.filter(run=run).values_list("number", "outcome"))
    assert numbers == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert JobRun.objects.get(pk=run.pk).attempt == 3


def hold_all(storage, error_type: str, until: dt.datetime | None = None, worker: str = "w1"):
    claimed = claim(storage, worker)
    with storage.claim_transaction():
        holds = [
            Hold(c.id, until or timezone.now(), error_type, f"held: {error_type}") for c in claimed
        ]
        storage.hold(worker, holds, now=timezone.now())
    return claimed


def test_hold__spends_nothing_and_writes_no_attempt_row(storage):
    run = make_run()
    start(storage)
    fail_and_requeue(storage, run.pk, 1)
    for _ in range(2):
        hold_all(storage, "circuit.open")

    rows = list(RunAttempt.objects.filter(run=run).values_list("number", "outcome"))
    assert rows == [(1, "failed")]
    assert JobRun.objects.get(pk=run.pk).attempt == 1


def test_hold__repeated_holds_for_one_reason_are_one_period(storage):
    run = make_run()
    first = timezone.now()
    for _ in range(3):
        hold_all(storage, "circuit.open", until=first)
    until = first + dt.timedelta(seconds=30)
    hold_all(storage, "circuit.open", until=until, worker="w2")

    [period] = RunHold.objects.filter(run=run)
    assert (period.reason, period.after_attempt, period.times) == ("circuit.open", 0, 4)
    assert period.started_at <= period.last_held_at
    assert (period.until, period.worker, period.error) == (until, "w2", "held: circuit.open")
    assert JobRun.objects.get(pk=run.pk).status == "queued"


def test_hold__a_new_reason_or_an_attempt_between_begins_a_new_period(storage):
    run = make_run()
    hold_all(storage, "circuit.open")
    hold_all(storage, "limit.concurrency")
    hold_all(storage, "limit.concurrency")
    start(storage)
    fail_and_requeue(storage, run.pk, 1)
    hold_all(storage, "limit.concurrency")

    periods = list(RunHold.objects.filter(run=run).values_list("reason", "after_attempt", "times"))
    assert periods == [
        ("circuit.open", 0, 1),
        ("limit.concurrency", 0, 2),
        ("limit.concurrency", 1, 1),
    ]


def test_hold__extends_only_the_held_runs_periods(storage):
    held, other = make_run(), make_run()
    hold_all(storage, "budget.exhausted")
    JobRun.objects.filter(pk=other.pk).update(available_at=timezone.now() + dt.timedelta(hours=1))
    hold_all(storage, "budget.exhausted")

    times = dict(RunHold.objects.values_list("run_id", "times"))
    assert times == {held.pk: 2, other.pk: 1}


def test_hold_began__is_when_the_runs_current_period_for_the_reason_began(storage):
    waiting, other_reason, never = make_run(), make_run(), make_run()
    hold_all(storage, "handler.waiting")
    began = RunHold.objects.get(run=waiting).started_at
    hold_all(storage, "handler.waiting")  # the same period, extended
    RunHold.objects.filter(run=never).delete()  # never held
    hold_until_later(storage, other_reason, "limit.concurrency")  # held since for another

    found = storage.hold_began({waiting.pk: 0, other_reason.pk: 0, never.pk: 0}, "handler.waiting")

    assert found == {waiting.pk: began}


def test_hold_began__leaves_out_a_period_before_the_runs_last_attempt(storage):
    run = make_run()
    hold_all(storage, "handler.waiting")
    start(storage)
    fail_and_requeue(storage, run.pk, 1)

    assert storage.hold_began({run.pk: 1}, "handler.waiting") == {}
    assert storage.hold_began({run.pk: 0}, "handler.waiting") != {}


def hold_until_later(storage, run, error_type: str) -> None:
    """Hold only ``run`` (the others pushed past the claim) for ``error_type``."""
    later = timezone.now() + dt.timedelta(hours=1)
    others = JobRun.objects.exclude(pk=run.pk).filter(status="queued")
    kept = dict(others.values_list("pk", "available_at"))
    others.update(available_at=later)
    hold_all(storage, error_type)
    for pk, at in kept.items():
        JobRun.objects.filter(pk=pk).update(available_at=at)


def test_replay__resets_the_attempt_budget_not_the_count(storage):
    run = make_run(status="dead_letter", attempts=3)

    storage.replay(run.pk, by="ops", now=timezone.now())

    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.attempt, row.attempts_before_replay, row.replay_count) == (
        "queued", 3, 3, 1,
    )  # fmt: skip
    [started] = start(storage)
    assert (started.attempt, started.budget_used) == (4, 1)


@pytest.mark.parametrize(("status", "lost"), [("executing", 1), ("dequeued", 1)])
def test_rescue__counts_the_lost_attempt(storage, status, lost):
    job = make_job(max_attempts=3, retry_jitter=0)
    run = make_run(job, status=status)
    silent = timezone.now() - dt.timedelta(hours=1)
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=silent, dequeued_at=silent)

    found, rescued = rescue(storage, limit=10)

    assert (found, [r.transition for r in rescued]) == (1, [Transition.RETRY])
    row = JobRun.objects.get(pk=run.pk)
    assert (row.status, row.attempt, row.error_type) == ("queued", lost, "worker.lost")
    attempt = RunAttempt.objects.get(run=run)
    assert (attempt.number, attempt.outcome) == (lost, "system_failed")


def hold_every_run(claimed, now):
    return [Hold(c.id, now, "test.held", "held by the gate") for c in claimed]


def test_claim_and_start__a_run_the_gate_holds_keeps_its_attempt_and_last_start(storage):
    run, fresh = make_run(), make_run()
    start(storage, limit=1)
    fail_and_requeue(storage, run.pk, 1)
    [last] = RunAttempt.objects.filter(run=run)

    assert start(storage, gate=hold_every_run) == []

    rows = {r.pk: r for r in JobRun.objects.filter(pk__in=[run.pk, fresh.pk])}
    assert (rows[run.pk].status, rows[run.pk].attempt) == ("queued", 1)
    assert rows[run.pk].started_at == last.started_at
    assert (rows[fresh.pk].status, rows[fresh.pk].attempt, rows[fresh.pk].started_at) == (
        "queued", 0, None,
    )  # fmt: skip
    periods = dict(RunHold.objects.values_list("run_id", "after_attempt"))
    assert periods == {run.pk: 1, fresh.pk: 0}


def test_claim_and_start__the_runs_the_gate_lets_through_start_with_one_attempt_each(storage):
    job = make_job()
    held, kept = make_run(job), make_run(job)

    def gate(claimed, now):
        return hold_every_run([c for c in claimed if c.id == held.pk], now)

    [started] = start(storage, gate=gate)

    row = JobRun.objects.get(pk=kept.pk)
    assert (started.id, started.attempt, started.started_at) == (kept.pk, 1, row.started_at)
    assert (row.status, row.attempt) == ("executing", 1)
    assert JobRun.objects.get(pk=held.pk).attempt == 0
