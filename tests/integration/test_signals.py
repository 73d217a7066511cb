"""Run signals against the real database and a real in-process worker."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from django_strait import signals, transitions, trigger, trigger_many
from django_strait.models import JobRun
from django_strait.rules.states import Transition
from django_strait.transitions import sending
from tests.integration.factories import make_run

pytestmark = pytest.mark.django_db(transaction=True)


def make_due(run: JobRun) -> None:
    """Skip a retry's backoff (the test is not about time)."""
    JobRun.objects.filter(pk=run.pk).update(available_at=timezone.now())


# -- the helpers on real rows ------------------------------------------------------------


def test_send_enqueued__waits_for_the_commit_and_sends_nothing_on_rollback(listen):
    got = listen(signals.run_enqueued)
    with transaction.atomic():
        kept = make_run()
        kept.idempotency_hit = False
        sending.send_enqueued(kept.job.name, [kept])
        assert got.calls == []  # not before the commit: a receiver could not see the row
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = make_run(kept.job)
        sending.send_enqueued(kept.job.name, [dropped])
        raise RuntimeError("roll back")

    assert [(c["run_id"], c["job"], c["run"]) for c in got.calls] == [
        (kept.pk, kept.job.name, kept)
    ]


def test_send_enqueued__leaves_out_runs_returned_for_a_reused_idempotency_key(listen):
    got = listen(signals.run_enqueued)
    first = make_run()
    first.idempotency_hit = True

    sending.send_enqueued(first.job.name, [first])

    assert got.calls == []


def test_send_recorded__looks_up_job_names_it_was_not_given(listen):
    from django_strait.storage import Record, Recorded

    got = listen(signals.run_succeeded)
    run = make_run(status="completed")
    now = timezone.now()
    rec = Record(run.pk, 1, Transition.COMPLETE, now, now, 5, "succeeded")

    sending.send_recorded([rec], Recorded(moved={run.pk: "completed"}))

    assert [(c["run_id"], c["job"]) for c in got.calls] == [(run.pk, run.job.name)]


def test_cancel_and_discard__send_their_signals_on_real_rows(listen):
    canceled, discarded = listen(signals.run_canceled), listen(signals.run_discarded)
    queued, dead = make_run(), make_run(status="dead_letter", error_type="http.404")

    transitions.cancel(queued.pk)
    transitions.discard(dead.pk, by="ops")

    assert [(c["run_id"], c["job"], c["status"]) for c in canceled.calls] == [
        (queued.pk, queued.job.name, "canceled")
    ]
    assert [(c["run_id"], c["error_type"]) for c in discarded.calls] == [(dead.pk, "http.404")]


# -- sent by trigger() and the worker ------------------------------------------------------


def test_trigger__sends_run_enqueued_for_each_new_run(listen):
    got = listen(signals.run_enqueued)

    one = trigger("test-noop", {"n": 1})
    many = trigger_many("test-noop", [{"n": 2}, {"n": 3}])

    assert [c["run_id"] for c in got.calls] == [one.pk, *(r.pk for r in many)]
    assert {c["job"] for c in got.calls} == {"test-noop"}
    assert {c["status"] for c in got.calls} == {"queued"}


def test_worker__sends_started_then_succeeded_with_the_attempt_and_its_duration(burst, listen):
    started, succeeded = listen(signals.run_started), listen(signals.run_succeeded)
    run = trigger("test-echo", {"x": 1})

    burst()

    [start] = started.by_run()[run.pk]
    [done] = succeeded.by_run()[run.pk]
    assert (start["job"], start["attempt"], start["status"]) == ("test-echo", 1, "executing")
    assert (done["job"], done["attempt"], done["status"], done["error"]) == (
        "test-echo",
        1,
        "completed",
        "",
    )
    assert isinstance(done["duration_ms"], int) and done["duration_ms"] >= 0
    assert done["sender"] is JobRun


@pytest.mark.parametrize(
    ("action", "signal", "status"),
    [
        ("fail", signals.run_failed_permanently, "failed"),
        ("dead_letter", signals.run_dead_lettered, "dead_letter"),
        ("discard", signals.run_discarded, "discarded"),
    ],
)
def test_worker__a_handler_action_sends_its_signal(burst, listen, action, signal, status):
    got = listen(signal)
    run = trigger("test-actions", {"action": action})

    burst()

    run.refresh_from_db()
    [call] = got.by_run()[run.pk]
    assert (call["status"], call["job"], call["attempt"]) == (status, "test-actions", 1)
    assert call["error_type"] == run.error_type and call["error"] == run.last_error
    assert call["error"]  # the handler's message travels with the signal


def test_worker__a_failing_run_sends_run_failed_then_run_dead_lettered(burst, listen):
    failed, dead = listen(signals.run_failed), listen(signals.run_dead_lettered)
    run = trigger("test-boom", {})  # max_attempts=2

    burst()
    make_due(run)
    burst()

    [retry] = failed.by_run()[run.pk]
    [final] = dead.by_run()[run.pk]
    assert (retry["attempt"], retry["error_type"], retry["status"]) == (
        1,
        "python.ValueError",
        "queued",
    )
    assert retry["available_at"] is not None
    assert (final["attempt"], final["error_type"], final["available_at"]) == (
        2,
        "python.ValueError",
        None,
    )


def test_worker__a_raising_receiver_does_not_stop_the_worker(burst, listen):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    signals.run_succeeded.connect(broken, weak=False)
    signals.run_started.connect(broken, weak=False)
    try:
        after = listen(signals.run_succeeded)
        runs = trigger_many("test-noop", [{}] * 5)
        burst()
    finally:
        signals.run_succeeded.disconnect(broken)
        signals.run_started.disconnect(broken)

    assert set(JobRun.objects.values_list("status", flat=True)) == {"completed"}
    assert sorted(after.by_run()) == sorted(r.pk for r in runs)
