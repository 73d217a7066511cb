"""Budgets: reservations at claim, settlement at record, never over-committed (docs/resilience.md)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from django_strait import signals, trigger_many
from django_strait.models import BudgetLedger, Job, JobRun, Project, RunAttempt, RunHold
from django_strait.rules.resilience.budgets import next_day_starts, today
from django_strait.worker.engine import Worker, WorkerConfig
from tests.conftest import Reply, spawn_workers, stop_workers

pytestmark = pytest.mark.django_db(transaction=True)


def project(budget: str, **fields) -> Project:
    return Project.objects.create(name="acme", daily_budget=Decimal(budget), **fields)


def paid_job(server, proj: Project, cost: str = "1", **fields) -> Job:
    fields.setdefault("max_attempts", 1)
    return Job.objects.create(
        name="paid",
        endpoint_url=server.url("/paid"),
        project=proj,
        estimated_cost=Decimal(cost),
        **fields,
    )


def ledger() -> BudgetLedger:
    return BudgetLedger.objects.get(day=today())


def claim_once(worker_id: str = "w1", limit: int = 50) -> list[int]:
    worker = Worker(WorkerConfig(worker_id=worker_id))
    return [run.id for run in worker.claimer.claim_and_start(limit)]


def statuses() -> Counter:
    return Counter(JobRun.objects.values_list("status", flat=True))


# -- validation ---------------------------------------------------------------------------


def test_job_clean__project_without_estimated_cost_names_the_field():
    proj = project("10")
    job = Job(name="paid", handler="tests.testapp.jobs.noop", project=proj)

    with pytest.raises(ValidationError) as info:
        job.full_clean()

    assert info.value.message_dict["estimated_cost"] == [
        "Required when the job has a project (a cost >= 0)."
    ]


def test_project_clean__negative_budget_and_ratio_over_one_are_refused():
    proj = Project(name="acme", daily_budget=Decimal("-1"), soft_limit_ratio=1.5)

    with pytest.raises(ValidationError) as info:
        proj.full_clean()

    assert set(info.value.message_dict) == {"daily_budget", "soft_limit_ratio"}


# -- reserving at claim ---------------------------------------------------------------------


def test_reserve__claim_starts_what_fits_and_holds_the_rest_until_tomorrow(http_server):
    paid_job(http_server, project("3"))
    trigger_many("paid", [{"i": i} for i in range(5)])

    started = claim_once()

    assert len(started) == 3
    assert (ledger().reserved, ledger().spent) == (Decimal(3), Decimal(0))
    assert set(JobRun.objects.filter(pk__in=started).values_list("reserved_cost", flat=True)) == {
        Decimal(1)
    }
    held = list(JobRun.objects.filter(status="queued"))
    assert len(held) == 2
    for run in held:
        assert (run.attempt, run.error_type) == (0, "budget.exhausted")
        assert run.available_at == next_day_starts(today())
        assert "project acme's daily budget of 3 is committed" in run.last_error
        assert "this run needs 1" in run.last_error
        assert not RunAttempt.objects.filter(run=run).exists()
        [period] = RunHold.objects.filter(run=run)
        assert period.reason == "budget.exhausted"


def test_reserve__jobs_without_a_project_are_not_touched(http_server):
    paid_job(http_server, project("0"))
    Job.objects.create(name="free", endpoint_url=http_server.url("/free"))
    trigger_many("free", [{"i": i} for i in range(3)])
    trigger_many("paid", [{"i": 0}])

    started = claim_once()

    assert len(started) == 3  # the paid run waits; the free ones start
    assert JobRun.objects.get(job__name="paid").error_type == "budget.exhausted"


# -- settling at record -------------------------------------------------------------------------


def test_settle__strait_cost_header_becomes_the_spend_and_the_rest_is_released(burst, http_server):
    http_server.routes["/paid"] = lambda r: Reply(200, b"{}", {"Strait-Cost": "0.25"})
    paid_job(http_server, project("10"), cost="1")
    runs = trigger_many("paid", [{"i": i} for i in range(4)])

    burst()

    assert statuses() == {"completed": 4}
    assert (ledger().reserved, ledger().spent) == (Decimal(0), Decimal("1.00"))
    for run in JobRun.objects.filter(pk__in=[r.pk for r in runs]):
        assert (run.reserved_cost, run.actual_cost) == (None, Decimal("0.25"))


def test_settle__without_the_header_the_estimate_is_spent(burst, http_server):
    paid_job(http_server, project("10"), cost="1.5")
    trigger_many("paid", [{"i": 0}, {"i": 1}])

    burst()

    assert (ledger().reserved, ledger().spent) == (Decimal(0), Decimal("3.0"))


def test_settle__unreadable_header_uses_the_estimate_and_says_so(burst, http_server):
    http_server.routes["/paid"] = lambda r: Reply(200, b"{}", {"Strait-Cost": "lots"})
    paid_job(http_server, project("10"), cost="2")
    [run] = trigger_many("paid", [{}])

    burst()

    run.refresh_from_db()
    assert (run.status, run.actual_cost) == ("completed", Decimal(2))
    assert "ignored Strait-Cost: 'lots'" in run.last_error


def test_settle__failed_calls_spend_too_each_attempt_reserving_again(burst, http_server):
    http_server.routes["/paid"] = lambda r: Reply(500, b"no", {"Strait-Cost": "0.5"})
    paid_job(http_server, project("10"), cost="1", max_attempts=2, retry_initial_delay_secs=0)
    [run] = trigger_many("paid", [{}])

    burst()
    JobRun.objects.filter(status="queued").update(available_at=run.created_at)
    burst()

    run.refresh_from_db()
    assert (run.status, run.attempt, run.actual_cost) == ("dead_letter", 2, Decimal("1.0"))
    assert (ledger().reserved, ledger().spent) == (Decimal(0), Decimal("1.0"))


# -- the soft limit and a raised budget ---------------------------------------------------------


def test_soft_limit__signal_and_warning_once_a_day(burst, http_server, listen, caplog):
    sent = listen(signals.budget_soft_limit)
    proj = project("10", soft_limit_ratio=0.8)
    paid_job(http_server, proj, cost="1")
    trigger_many("paid", [{"i": i} for i in range(7)])
    burst()
    assert sent.calls == []  # 7 of 10: under 80 %

    with caplog.at_level(logging.WARNING, logger="django_strait.rules.resilience.budgets"):
        trigger_many("paid", [{"i": i} for i in range(3)])
        burst()

    [call] = sent.calls
    assert (call["sender"], call["project"], call["day"]) == (Project, proj, today())
    assert call["daily_budget"] == Decimal(10)
    assert ledger().soft_warning_sent_at is not None
    assert "project acme has committed" in caplog.text
    assert statuses() == {"completed": 10}


def test_raised_budget__waiting_runs_go_at_once(burst, http_server):
    proj = project("2")
    paid_job(http_server, proj)
    trigger_many("paid", [{"i": i} for i in range(5)])
    burst()
    assert statuses() == {"completed": 2, "queued": 3}

    proj.daily_budget = Decimal(5)
    proj.save()
    burst()

    assert statuses() == {"completed": 5}
    assert ledger().spent == Decimal(5)


# -- four workers racing for one budget (PostgreSQL) ----------------------------------------------


BUDGETED, RUNS = 40, 100


@pytest.mark.postgres
@pytest.mark.slow
def test_budget__four_workers_racing__exactly_the_budget_dispatches(http_server, worker_env):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serializes the workers' claims, so they cannot race")
    paid_job(http_server, project(str(BUDGETED)), cost="1")
    runs = trigger_many("paid", [{"i": i} for i in range(RUNS)])
    # Small batches: many claim transactions race for the ledger row.
    workers = spawn_workers(worker_env, "--concurrency", "10", "--batch-size", "2")
    try:
        deadline = time.monotonic() + 60
        waiting = JobRun.objects.filter(status="queued", error_type="budget.exhausted")
        expected = {"completed": BUDGETED, "queued": RUNS - BUDGETED}
        while time.monotonic() < deadline:
            if statuses() == expected and waiting.count() == RUNS - BUDGETED:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # anything that would over-commit would show now
    finally:
        outputs = stop_workers(workers)
    assert statuses() == expected, outputs
    assert sum(http_server.run_ids().values()) == BUDGETED
    assert set(http_server.run_ids().values()) == {1}
    assert (ledger().spent, ledger().reserved) == (Decimal(BUDGETED), Decimal(0))
    assert {r.pk for r in runs} >= set(http_server.run_ids())


@pytest.mark.django_db(transaction=True, databases=["default", "jobs2"])
def test_soft_limit__crossed_on_the_control_database_is_sent_though_the_claim_rolls_back(
    two_aliases, http_server, listen
):
    # A run on "jobs2" reserves on the control database ("default") in a transaction
    # of its own, which marks the day warned. If the claim then rolls back, the mark
    # stays: the warning must have gone out with it, or it never would.
    from django.db import transaction

    from tests.integration.factories import make_job

    sent = listen(signals.budget_soft_limit)
    proj = project("10", soft_limit_ratio=0.5)
    job = make_job("paid-far", queue="two", using="jobs2", endpoint_url=http_server.url("/paid"))
    Job.objects.using("jobs2").filter(pk=job.pk).update(
        project_id=proj.pk, estimated_cost=Decimal("6"), max_attempts=1
    )
    trigger_many("paid-far", [{"i": 0}])

    class RolledBack(Exception):
        pass

    worker = Worker(WorkerConfig(worker_id="w-far", using="jobs2"))
    with pytest.raises(RolledBack), transaction.atomic(using="jobs2"):
        assert len(worker.claimer.claim_and_start(10)) == 1
        raise RolledBack

    assert JobRun.objects.using("jobs2").get().status == "queued"
    assert BudgetLedger.objects.using("default").get(day=today()).soft_warning_sent_at
    [call] = sent.calls
    assert (call["project"], call["day"]) == (proj, today())
