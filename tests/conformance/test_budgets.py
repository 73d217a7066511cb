"""Budgets: reservations under contention never commit more than the day's budget; settling."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from django_strait.models import BudgetLedger, JobRun, Project
from django_strait.rules.resilience import budgets
from django_strait.rules.states import Transition
from django_strait.storage import Hold, Record, RecordBatch
from tests.conformance.conftest import in_threads, start
from tests.integration.factories import make_job

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]


def budget_gate(storage, crossed: list | None = None):
    """A gate that reserves each run's cost, as the worker's budget step does."""

    def gate(claimed, now: dt.datetime) -> list[Hold]:
        pending = []
        for run in claimed:
            job = JobRun.objects.select_related("job").get(pk=run.id).job
            pending.append(budgets.Pending(run.id, job.project_id, job.estimated_cost))
        out = storage.reserve_budgets(pending, now=now)
        if crossed is not None:
            crossed.extend(out.crossed)
        for run in claimed:
            run.reserved_cost = out.reserved.get(run.id)
        return [Hold(h.run_id, h.until, budgets.BUDGET_ERROR, h.reason) for h in out.held]

    return gate


def budgeted(budget: str, cost: str, runs: int, ratio: float = 0.8):
    project = Project.objects.create(name="p", daily_budget=Decimal(budget), soft_limit_ratio=ratio)
    job = make_job(project=project, estimated_cost=Decimal(cost))
    JobRun.objects.bulk_create([JobRun(job=job, available_at=timezone.now()) for _ in range(runs)])
    return project, job


def ledger(project) -> BudgetLedger:
    return BudgetLedger.objects.get(project=project, day=budgets.today())


@pytest.mark.slow
def test_reserve__claims_at_once_never_commit_more_than_the_budget(storage):
    project, job = budgeted("10", "1", 40)
    gate = budget_gate(storage)

    started = in_threads(5, lambda i: len(start(storage, f"w{i}", limit=4, gate=gate)))

    assert sum(started) == 10
    day = ledger(project)
    assert (day.reserved, day.spent) == (Decimal(10), Decimal(0))
    # Of the 20 claimed, the 10 that did not fit wait for tomorrow (the rest were never claimed).
    held = JobRun.objects.filter(job=job, status="queued").exclude(error_type="")
    assert held.count() == 10
    assert set(held.values_list("error_type", flat=True)) == {"budget.exhausted"}
    tomorrow = budgets.next_day_starts(budgets.today())
    assert set(held.values_list("available_at", flat=True)) == {tomorrow}


def test_reserve__notes_the_reservation_on_the_run(storage):
    budgeted("10", "0.25", 1)

    [run] = start(storage, gate=budget_gate(storage))

    assert run.reserved_cost == Decimal("0.25")
    assert JobRun.objects.get(pk=run.id).reserved_cost == Decimal("0.25")


def test_reserve__reports_the_soft_limit_once_a_day(storage):
    project, _ = budgeted("10", "3", 4, ratio=0.5)
    crossed: list = []

    start(storage, limit=1, gate=budget_gate(storage, crossed))  # 3 of 10: under half
    assert crossed == []
    start(storage, limit=1, gate=budget_gate(storage, crossed))  # 6 of 10: crosses
    start(storage, limit=1, gate=budget_gate(storage, crossed))  # 9 of 10: told already

    assert [c.project_id for c in crossed] == [project.pk]
    assert ledger(project).soft_warning_sent_at is not None


def test_record__settles_the_cost_on_the_ledger_and_the_run(storage):
    project, job = budgeted("10", "2", 1)
    [run] = start(storage, gate=budget_gate(storage))
    now = timezone.now()
    rec = Record(run.id, 1, Transition.COMPLETE, run.started_at, now, 5, "succeeded",
                 job_id=job.pk, project_id=project.pk, reserved_cost=Decimal(2),
                 cost=Decimal("0.5"))  # fmt: skip

    storage.record(RecordBatch("w1", [rec]))

    day = ledger(project)
    assert (day.reserved, day.spent) == (Decimal(0), Decimal("0.5"))
    row = JobRun.objects.get(pk=run.id)
    assert (row.reserved_cost, row.actual_cost) == (None, Decimal("0.5"))


def test_crossed_soft_limits__a_spend_past_the_reservation_is_reported_once(storage):
    project, job = budgeted("10", "1", 1, ratio=0.5)
    [run] = start(storage, gate=budget_gate(storage))
    spend = budgets.Spend(run.id, project.pk, run.started_at, Decimal(1), Decimal(6))
    storage.settle_budgets([spend])

    first = storage.crossed_soft_limits([spend], now=timezone.now())
    again = storage.crossed_soft_limits([spend], now=timezone.now())

    assert [d.project_id for d in first] == [project.pk] and again == []
