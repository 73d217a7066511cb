"""The reaper against the real database: stale runs are rescued once, fresh ones left alone."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.test import override_settings

from django_strait.duties.leader import lead
from django_strait.duties.reaper import Reaper
from django_strait.models import JobRun, RunAttempt, WorkerProcess
from django_strait.rules.retry import PolicyError
from django_strait.transitions import rescue_stale
from tests.conftest import unreadable_json
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

STALE = 60.0
WAITING_STALE = 3600.0
NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def reaper(**options) -> Reaper:
    options = {"stale_after": STALE, "waiting_stale_after": WAITING_STALE, "interval": 5, **options}
    return Reaper(**options)


def retrying_job(**fields):
    """A job whose first retry waits exactly 2 s (no jitter), with 3 attempts unless told."""
    fields = {"retry_initial_delay_secs": 2, "retry_jitter": 0, "max_attempts": 3, **fields}
    return make_job(**fields)


def silent_run(status: str, silent_for: float, *, job=None, **fields) -> JobRun:
    """A run in ``status`` whose last heartbeat was ``silent_for`` seconds before NOW."""
    run = make_run(job or retrying_job(), status=status, **fields)
    beat = NOW - dt.timedelta(seconds=silent_for)
    JobRun.objects.filter(pk=run.pk).update(
        heartbeat_at=beat, started_at=beat - dt.timedelta(seconds=1), claimed_by="w-lost"
    )
    run.refresh_from_db()
    return run


def fresh(run: JobRun) -> JobRun:
    run.refresh_from_db()
    return run


# -- executing runs --------------------------------------------------------------


def test_rescue__stale_executing_run_is_queued_again_with_a_lost_attempt_on_record():
    run = silent_run("executing", STALE + 30)

    result = reaper().run_once(NOW)

    run = fresh(run)
    assert result.led
    assert result.counts["rescued"] == 1 and result.counts["retried"] == 1
    assert (run.status, run.attempt, run.claimed_by, run.heartbeat_at) == ("queued", 1, "", None)
    assert run.available_at == NOW + dt.timedelta(seconds=2)
    assert run.error_type == "worker.lost"
    (attempt,) = RunAttempt.objects.filter(run=run)
    assert (attempt.number, attempt.outcome, attempt.error_type, attempt.worker) == (
        1,
        "system_failed",
        "worker.lost",
        "w-lost",
    )
    assert "worker w-lost lost" in attempt.error and "90s" in attempt.error
    # Known to have run from its start to its last heartbeat, a second later.
    assert (attempt.finished_at, attempt.duration_ms) == (NOW, 1000)


def test_rescue__lost_attempt_spends_its_budget_reservation():
    from decimal import Decimal

    from django_strait.models import BudgetLedger, Project
    from django_strait.rules.resilience.budgets import today

    project = Project.objects.create(name="acme", daily_budget=Decimal(10))
    run = silent_run("executing", STALE + 30, job=retrying_job(project=project, estimated_cost=2))
    day = today(run.started_at)
    BudgetLedger.objects.create(project=project, day=day, reserved=Decimal(2))
    JobRun.objects.filter(pk=run.pk).update(reserved_cost=Decimal(2))

    reaper().run_once(NOW)

    run = fresh(run)
    assert (run.reserved_cost, run.actual_cost) == (None, Decimal(2))
    ledger = BudgetLedger.objects.get(project=project, day=day)
    assert (ledger.reserved, ledger.spent) == (Decimal(0), Decimal(2))


def test_rescue__second_attempt_keeps_earlier_attempts_and_counts_on():
    run = silent_run("executing", STALE + 1, attempts=2)

    reaper().run_once(NOW)

    run = fresh(run)
    assert (run.status, run.attempt) == ("queued", 2)
    assert list(RunAttempt.objects.filter(run=run).values_list("number", "outcome")) == [
        (1, "failed"),
        (2, "system_failed"),
    ]
    # Retry number 2 of an exponential policy with B = 2 s, c = 2: 4 s.
    assert run.available_at == NOW + dt.timedelta(seconds=4)


def test_rescue__stale_run_on_its_last_attempt_is_dead_lettered():
    run = silent_run("executing", STALE + 1, attempts=3)

    result = reaper().run_once(NOW)

    run = fresh(run)
    assert result.counts == {**result.counts, "rescued": 1, "retried": 0, "dead_lettered": 1}
    assert (run.status, run.attempt, run.finished_at) == ("dead_letter", 3, NOW)
    assert RunAttempt.objects.get(run=run, number=3).outcome == "system_failed"


def test_rescue__last_attempt_with_on_exhaustion_discard_is_discarded():
    run = silent_run(
        "executing", STALE + 1, job=retrying_job(max_attempts=1, on_exhaustion="discard")
    )

    result = reaper().run_once(NOW)

    assert result.counts["discarded"] == 1 and result.counts["dead_lettered"] == 0
    assert fresh(run).status == "discarded"


def test_rescue__run_override_of_max_attempts_is_honoured():
    run = silent_run("executing", STALE + 1, job=retrying_job(max_attempts=5), max_attempts=1)

    reaper().run_once(NOW)

    assert fresh(run).status == "dead_letter"


def test_rescue__budget_counts_from_the_last_replay():
    # Three attempts spent before a replay, one since: two of three left.
    run = silent_run("executing", STALE + 1, attempts=4, attempts_before_replay=3)

    reaper().run_once(NOW)

    assert (fresh(run).status, fresh(run).attempt) == ("queued", 4)


def test_rescue__worker_lost_listed_as_non_retryable_dead_letters_at_once():
    run = silent_run("executing", STALE + 1, job=retrying_job(non_retryable_errors=["worker.*"]))

    result = reaper().run_once(NOW)

    assert result.counts["dead_lettered"] == 1
    assert (fresh(run).status, fresh(run).attempt) == ("dead_letter", 1)


def test_rescue__fresh_executing_run_is_untouched():
    run = silent_run("executing", STALE - 1)

    result = reaper().run_once(NOW)

    assert result.led and result.counts["rescued"] == 0
    after = fresh(run)
    assert (after.status, after.claimed_by, after.heartbeat_at) == (
        "executing",
        "w-lost",
        run.heartbeat_at,
    )
    assert not RunAttempt.objects.filter(run=run, outcome="system_failed").exists()


def test_rescue__finished_and_queued_runs_are_never_touched():
    old = NOW - dt.timedelta(days=1)
    runs = [make_run(retrying_job(), status=s) for s in ("queued", "completed", "dead_letter")]
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(heartbeat_at=old, updated_at=old)

    result = reaper().run_once(NOW)

    assert result.counts["rescued"] == 0
    assert [fresh(r).status for r in runs] == ["queued", "completed", "dead_letter"]


def test_rescue__cancel_requested_while_executing_ends_canceled_with_the_attempt_recorded():
    run = silent_run("executing", STALE + 1, cancel_requested=True)

    result = reaper().run_once(NOW)

    run = fresh(run)
    assert result.counts["canceled"] == 1 and result.counts["retried"] == 0
    assert (run.status, run.finished_at) == ("canceled", NOW)
    assert RunAttempt.objects.get(run=run).outcome == "system_failed"


# -- dequeued runs -----------------------------------------------------------------


def test_rescue__dequeued_run_that_never_started_spends_one_attempt():
    run = silent_run("dequeued", STALE + 1)

    reaper().run_once(NOW)

    run = fresh(run)
    assert (run.status, run.attempt) == ("queued", 1)
    attempt = RunAttempt.objects.get(run=run)
    assert (attempt.number, attempt.outcome, attempt.worker) == (1, "system_failed", "w-lost")
    assert (attempt.started_at, attempt.duration_ms) == (None, 0)


def test_rescue__dequeued_run_without_heartbeat_is_judged_by_its_dequeue_time():
    run = make_run(retrying_job(max_attempts=1), status="dequeued")
    JobRun.objects.filter(pk=run.pk).update(
        heartbeat_at=None, dequeued_at=NOW - dt.timedelta(seconds=STALE + 1)
    )

    result = reaper().run_once(NOW)

    assert result.counts["dead_lettered"] == 1
    assert (fresh(run).status, fresh(run).attempt) == ("dead_letter", 1)


# -- waiting runs ------------------------------------------------------------------


def test_rescue__waiting_run_is_rescued_only_after_the_waiting_threshold():
    quiet = silent_run("waiting", STALE * 10)
    gone = silent_run("waiting", WAITING_STALE + 1)

    result = reaper().run_once(NOW)

    assert result.counts["rescued"] == 1
    assert fresh(quiet).status == "waiting"
    assert (fresh(gone).status, fresh(gone).attempt) == ("queued", 1)
    assert RunAttempt.objects.get(run=gone).outcome == "system_failed"


def test_rescue__waiting_run_without_heartbeat_is_judged_by_its_last_update():
    run = make_run(retrying_job(), status="waiting")
    JobRun.objects.filter(pk=run.pk).update(
        heartbeat_at=None, updated_at=NOW - dt.timedelta(seconds=WAITING_STALE + 1)
    )

    assert reaper().run_once(NOW).counts["rescued"] == 1
    assert fresh(run).status == "queued"


# -- batches -----------------------------------------------------------------------


def test_rescue_stale__works_through_every_batch():
    job = retrying_job()
    runs = [silent_run("executing", STALE + 1, job=job) for _ in range(7)]

    counts = rescue_stale(NOW, stale_after=STALE, waiting_stale_after=WAITING_STALE, batch_size=3)

    assert counts["rescued"] == 7 and counts["retried"] == 7
    assert {fresh(r).status for r in runs} == {"queued"}
    assert RunAttempt.objects.filter(outcome="system_failed").count() == 7


def test_reaper__small_batches_rescue_everything_in_one_round():
    job = retrying_job()
    for _ in range(5):
        silent_run("executing", STALE + 1, job=job)

    assert reaper(batch_size=2).run_once(NOW).counts["rescued"] == 5


def test_reaper__second_round_finds_nothing_left():
    silent_run("executing", STALE + 1)
    reaper().run_once(NOW)

    assert reaper().run_once(NOW).counts["rescued"] == 0
    assert RunAttempt.objects.count() == 1


# -- forgetting workers ----------------------------------------------------------------


def worker_row(worker_id: str, last_seen: dt.datetime) -> WorkerProcess:
    return WorkerProcess.objects.create(
        worker_id=worker_id,
        host="h",
        pid=1,
        concurrency=1,
        started_at=last_seen,
        last_seen_at=last_seen,
    )


def test_reaper__forgets_workers_silent_past_forget_after_only():
    worker_row("gone", NOW - dt.timedelta(seconds=STALE * 10 + 1))
    worker_row("alive", NOW - dt.timedelta(seconds=STALE))

    result = reaper().run_once(NOW)

    assert result.counts["workers_forgotten"] == 1
    assert list(WorkerProcess.objects.values_list("worker_id", flat=True)) == ["alive"]


def test_reaper__keeps_a_silent_row_whose_worker_still_heartbeats_runs():
    worker_row("busy", NOW - dt.timedelta(days=1))
    run = make_run(retrying_job(), status="executing")
    JobRun.objects.filter(pk=run.pk).update(claimed_by="busy", heartbeat_at=NOW)

    result = reaper().run_once(NOW)

    assert result.counts["workers_forgotten"] == 0
    assert WorkerProcess.objects.filter(worker_id="busy").exists()


# -- options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"stale_after": 0}, "Reaper.stale_after"),
        ({"waiting_stale_after": "-1s"}, "Reaper.waiting_stale_after"),
        ({"interval": "soon"}, "Reaper.interval"),
        ({"forget_after": 10}, "Reaper.forget_after"),
        ({"batch_size": 0}, "Reaper.batch_size"),
    ],
)
def test_reaper_options__bad_value_names_the_field(options, field):
    with pytest.raises(PolicyError) as caught:
        reaper(**options)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_reaper_options__durations_accept_text_and_forget_after_defaults_to_ten_stale():
    built = Reaper(stale_after="2m", waiting_stale_after="1h", interval="30s")
    assert (built.stale_after, built.waiting_stale_after, built.interval) == (120, 3600, 30)
    assert built.forget_after == 1200


def test_reaper_from_settings__reads_stale_after_waiting_and_interval():
    strait = {"STALE_AFTER": "2m", "WAITING_STALE_AFTER": "2h", "REAPER_INTERVAL": "10s"}
    with override_settings(STRAIT=strait):
        built = Reaper.from_settings()
    assert (built.name, built.stale_after, built.waiting_stale_after, built.interval) == (
        "reaper",
        120,
        7200,
        10,
    )
    assert built.using == "default"


# -- two reapers (PostgreSQL) ------------------------------------------------------------


def in_threads(count: int, target) -> list:
    """Run ``target()`` in ``count`` threads started together; return their results."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rescue_stale__two_concurrent_reapers_never_rescue_a_run_twice():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: FOR UPDATE SKIP LOCKED between two connections")
    job = retrying_job()
    runs = [silent_run("executing", STALE + 1, job=job) for _ in range(300)]

    results = in_threads(
        2,
        lambda: rescue_stale(
            NOW, stale_after=STALE, waiting_stale_after=WAITING_STALE, batch_size=10
        ),
    )

    assert sum(r["rescued"] for r in results) == 300
    per_run = Counter(RunAttempt.objects.values_list("run_id", flat=True))
    assert per_run == {r.pk: 1 for r in runs}
    assert set(JobRun.objects.values_list("status", "attempt")) == {("queued", 1)}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_reaper__two_concurrent_reapers_rescue_each_run_once():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: advisory locks between two connections")
    job = retrying_job()
    for _ in range(100):
        silent_run("executing", STALE + 1, job=job)

    results = in_threads(2, lambda: reaper(batch_size=5).run_once(NOW))

    assert any(r.led for r in results)
    assert sum(r.counts["rescued"] for r in results) == 100
    assert RunAttempt.objects.count() == 100
    assert set(JobRun.objects.values_list("status", flat=True)) == {"queued"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_reaper__does_nothing_while_another_host_leads():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: the advisory lock of another connection")
    run = silent_run("executing", STALE + 1)
    worker_row("gone", NOW - dt.timedelta(days=1))

    with lead("reaper") as leading:
        assert leading
        (result,) = in_threads(1, lambda: reaper().run_once(NOW))

    assert not result.led
    assert not any(result.counts.values())
    assert fresh(run).status == "executing"
    assert WorkerProcess.objects.filter(worker_id="gone").exists()
    # Once the other host lets go, the next round does the work.
    assert reaper().run_once(NOW).counts["rescued"] == 1


def test_reaper__judges_staleness_by_the_now_it_is_given():
    # A run stale at NOW was fresh two seconds earlier: the clock is an argument.
    run = silent_run("executing", STALE + 1)

    early = reaper().run_once(NOW - dt.timedelta(seconds=2))

    assert early.counts["rescued"] == 0 and fresh(run).status == "executing"


# -- isolation and logging -----------------------------------------------------------


def test_rescue__a_job_row_it_cannot_read_rescues_its_runs_on_the_default_policy(caplog):
    good = silent_run("executing", STALE + 30)
    bad = silent_run("executing", STALE + 30)
    # A job row the reaper cannot read: its run is rescued on the default policy, and the
    # log names the row (docs/security.md).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {JobRun._meta.get_field('job').related_model._meta.db_table} "
            "SET non_retryable_errors = %s WHERE id = %s",
            ["[" + unreadable_json(connection.vendor)[0] + "]", bad.job_id],
        )

    result = reaper().run_once(NOW)

    assert result.counts["rescued"] == 2
    assert (fresh(good).status, fresh(bad).status) == ("queued", "queued")
    assert (
        f"set aside django_strait_job id {bad.job_id}, field non_retryable_errors: cannot be read"
    ) in caplog.text


def test_rescue__logs_each_rescue_only_once_it_is_committed(
    caplog, django_capture_on_commit_callbacks
):
    run = silent_run("executing", STALE + 30)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        rescue_stale(NOW, stale_after=STALE, waiting_stale_after=WAITING_STALE)
    assert f"run {run.pk}: worker w-lost lost" not in caplog.text  # not before the commit

    for callback in callbacks:
        callback()
    assert f"run {run.pk}: worker w-lost lost" in caplog.text


def test_rescue__a_run_it_dead_letters_or_cancels_owes_its_webhook_and_a_retry_none():
    from django_strait.models import WebhookDelivery

    hooked = retrying_job(max_attempts=1, webhook_url="https://hooks.example.com/r")
    dead = silent_run("executing", STALE + 30, job=hooked)
    canceled = silent_run("executing", STALE + 30, job=hooked, cancel_requested=True)
    retried = silent_run(
        "executing", STALE + 30, job=retrying_job(webhook_url="https://hooks.example.com/r")
    )

    reaper().run_once(NOW)

    assert (fresh(dead).status, fresh(canceled).status, fresh(retried).status) == (
        "dead_letter", "canceled", "queued"
    )  # fmt: skip
    owed = dict(WebhookDelivery.objects.values_list("run_id", "event"))
    assert owed == {dead.pk: "run.dead_lettered", canceled.pk: "run.canceled"}
