"""Budgets over several databases: reservations noted on the control database, closed once.

The control database's verbs (``reserve_budgets_for``, ``settle_budgets_for``,
``stale_reservations``) take the runs' alias as a name: here one database plays
both parts, with "jobs9" as the runs' alias. The runs' verbs (``mark_reserved``,
``reservation_fates``) read and write this database's runs.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from django_strait.models import BudgetLedger, BudgetReservation, JobRun, Project
from django_strait.rules.resilience import budgets
from tests.integration.factories import make_job, make_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]

SOURCE = "jobs9"


def project(budget: str = "10") -> Project:
    return Project.objects.create(name="p", daily_budget=Decimal(budget))


def day_of(p: Project) -> tuple[Decimal, Decimal]:
    row = BudgetLedger.objects.get(project=p, day=budgets.today())
    return row.reserved, row.spent


def pending(p: Project, *runs: tuple[int, str, int]) -> list[budgets.Pending]:
    return [budgets.Pending(rid, p.pk, Decimal(cost), attempt) for rid, cost, attempt in runs]


def test_reserve_for__admits_in_claim_order_and_notes_each_reservation(storage):
    p = project("5")
    now = timezone.now()

    out = storage.reserve_budgets_for(
        SOURCE, pending(p, (7, "2", 1), (8, "2", 3), (9, "2", 1)), now=now
    )

    assert out.reserved == {7: Decimal(2), 8: Decimal(2)}
    assert [h.run_id for h in out.held] == [9]
    assert day_of(p) == (Decimal(4), Decimal(0))
    rows = BudgetReservation.objects.order_by("run_id")
    assert [(r.database, r.run_id, r.attempt, r.amount, r.day) for r in rows] == [
        (SOURCE, 7, 1, Decimal(2), budgets.today(now)),
        (SOURCE, 8, 3, Decimal(2), budgets.today(now)),
    ]


def test_reserve_for__a_claim_again_of_the_same_attempt_gives_the_earlier_one_back(storage):
    p = project("5")
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 1)), now=timezone.now())

    # Its claim rolled back; the run is claimed again at the same attempt.
    out = storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 1)), now=timezone.now())

    assert out.reserved == {7: Decimal(3)}  # it fits: the earlier 3 was given back first
    assert day_of(p) == (Decimal(3), Decimal(0))
    assert BudgetReservation.objects.count() == 1


def test_reserve_for__other_databases_and_attempts_are_not_given_back(storage):
    p = project("10")
    storage.reserve_budgets_for("jobs8", pending(p, (7, "3", 1)), now=timezone.now())
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 1)), now=timezone.now())
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 2)), now=timezone.now())

    assert day_of(p) == (Decimal(9), Decimal(0))
    assert BudgetReservation.objects.count() == 3


def test_settle_for__closes_each_reservation_exactly_once(storage):
    p = project("10")
    now = timezone.now()
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 1), (8, "2", 1)), now=now)
    spend = budgets.Spend(7, p.pk, now, Decimal(3), Decimal("1.5"), 1)

    first = storage.settle_budgets_for(SOURCE, [spend])
    again = storage.settle_budgets_for(SOURCE, [spend])
    other = storage.settle_budgets_for(
        "jobs8", [budgets.Spend(8, p.pk, now, Decimal(2), Decimal(2), 1)]
    )
    wrong_attempt = storage.settle_budgets_for(
        SOURCE, [budgets.Spend(8, p.pk, now, Decimal(2), Decimal(2), 2)]
    )

    assert (first, again, other, wrong_attempt) == (1, 0, 0, 0)
    assert day_of(p) == (Decimal(2), Decimal("1.5"))  # run 8's 2 still reserved
    assert list(BudgetReservation.objects.values_list("run_id", flat=True)) == [8]
    assert storage.settle_budgets_for(SOURCE, []) == 0


def test_settle_for__settles_on_the_day_it_was_reserved(storage):
    p = project("10")
    yesterday = timezone.now() - dt.timedelta(days=1)
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "3", 1)), now=yesterday)

    storage.settle_budgets_for(SOURCE, [budgets.Spend(7, p.pk, timezone.now(), Decimal(3),
                                                      Decimal(1), 1)])  # fmt: skip

    row = BudgetLedger.objects.get(project=p, day=budgets.today(yesterday))
    assert (row.reserved, row.spent) == (Decimal(0), Decimal(1))


def test_stale_reservations__the_source_s_made_before_the_time_oldest_first(storage):
    p = project("10")
    now = timezone.now()
    storage.reserve_budgets_for(SOURCE, pending(p, (8, "1", 1)), now=now - dt.timedelta(minutes=9))
    storage.reserve_budgets_for(SOURCE, pending(p, (7, "1", 2)), now=now - dt.timedelta(minutes=5))
    storage.reserve_budgets_for("jobs8", pending(p, (6, "1", 1)), now=now - dt.timedelta(minutes=9))
    storage.reserve_budgets_for(SOURCE, pending(p, (5, "1", 1)), now=now)

    found = storage.stale_reservations(SOURCE, before=now - dt.timedelta(minutes=1), limit=10)
    first = storage.stale_reservations(SOURCE, before=now - dt.timedelta(minutes=1), limit=1)

    assert [(r.run_id, r.attempt, r.project_id, r.amount) for r in found] == [
        (8, 1, p.pk, Decimal(1)),
        (7, 2, p.pk, Decimal(1)),
    ]
    assert [r.run_id for r in first] == [8]


def test_mark_reserved__notes_the_amount_on_the_runs(storage):
    job = make_job()
    a, b, c = (make_run(job) for _ in range(3))

    storage.mark_reserved({a.pk: Decimal("0.5"), b.pk: Decimal(2)})
    storage.mark_reserved({})

    got = dict(JobRun.objects.values_list("id", "reserved_cost"))
    assert got == {a.pk: Decimal("0.5"), b.pk: Decimal(2), c.pk: None}


def test_reservation_fates__running_made_or_never(storage):
    job = make_job()
    running = make_run(job, status="executing", attempts=2)  # attempt 2 in flight
    done = make_run(job, status="completed", attempts=1)  # attempt 1 recorded
    queued = make_run(job)  # its claim of attempt 1 rolled back
    gone = queued.pk + 1000

    fates = storage.reservation_fates(
        [(running.pk, 2), (running.pk, 1), (done.pk, 1), (queued.pk, 1), (gone, 1)]
    )

    assert fates == {
        (running.pk, 2): budgets.Fate.RUNNING,
        (running.pk, 1): budgets.Fate.MADE,
        (done.pk, 1): budgets.Fate.MADE,
        (queued.pk, 1): budgets.Fate.NEVER,
        (gone, 1): budgets.Fate.MADE,
    }
    assert storage.reservation_fates([]) == {}
