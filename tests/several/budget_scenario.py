"""One project's budget over several databases: one ledger, on the control database.

``python tests/several/budget_scenario.py`` (DJANGO_SETTINGS_MODULE=
tests.several_sqlite_settings or tests.several_settings), run by
tests/e2e/test_control_budgets.py: a project whose daily budget admits
``ADMITS`` runs has a job on "jobs1" (the control database) and one on "jobs2";
burst workers of one database, then of both, drain ``EACH`` + 2 runs of each.
Then a reservation left by a claim that rolled back, and one whose attempt was
made but never settled, are closed by jobs2's reaper. Prints one JSON line.

``budget_scenario.py away PLAIN BUDGETED``, once the test made the control
database go away: a worker of jobs2 alone runs those two runs of jobs2.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from decimal import Decimal

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from django_strait import trigger  # noqa: E402
from django_strait.duties.reaper import Reaper  # noqa: E402
from django_strait.models import (  # noqa: E402
    BudgetLedger,
    BudgetReservation,
    Job,
    JobRun,
    Project,
)
from django_strait.rules.resilience import budgets  # noqa: E402
from django_strait.storage import backend  # noqa: E402

#: Runs the day's budget admits, over both databases together.
ADMITS = 5
#: Runs queued on each database: one budget per database would admit 2 * ADMITS.
EACH = 6
ALIASES = ("jobs1", "jobs2")


def statuses(name: str) -> dict[str, list[str]]:
    return {
        a: sorted(
            f"{status}:{error_type}"
            for status, error_type in JobRun.objects.using(a)
            .filter(job__name__startswith=name)
            .values_list("status", "error_type")
        )
        for a in ALIASES
    }


def ledgers() -> dict[str, list[list[str]]]:
    return {
        a: [
            [str(r.reserved.normalize()), str(r.spent.normalize())]
            for r in BudgetLedger.objects.using(a).all()
        ]
        for a in ALIASES
    }


def work(*databases: str, runs: dict[str, int]) -> None:
    """Queue ``runs`` (alias -> how many) and drain them with a burst worker of ``databases``."""
    for a, count in runs.items():
        for n in range(count):
            trigger(f"spend-{a}", {"n": n})
    call_command(
        "run_strait_worker", burst=True, worker_id="w-" + "-".join(databases),
        databases=list(databases), verbosity=0,
    )  # fmt: skip


def drain() -> dict:
    """Three workers in turn: jobs1's spends 2, jobs2's the 3 left of 5 (not 5 of its
    own), then one serving both starts none of the 4 + 2 more runs queued."""
    project = Project.objects.create(name="shared", daily_budget=Decimal(ADMITS))
    for a, queue in (("jobs1", "default"), ("jobs2", "two")):
        Job.objects.using(a).create(
            name=f"spend-{a}", handler="tests.testapp.jobs.noop", queue=queue,
            project=project, estimated_cost=Decimal(1),
        )  # fmt: skip
    Job.objects.using("jobs2").create(
        name="plain-two", handler="tests.testapp.jobs.noop", queue="two"
    )
    trigger("plain-two", {})
    work("jobs1", runs={"jobs1": 2})
    work("jobs2", runs={"jobs2": EACH})
    work(*ALIASES, runs={"jobs1": EACH - 2, "jobs2": 2})
    return {
        "project_on": {a: Project.objects.using(a).count() for a in ALIASES},
        "routed_projects": list(Project.objects.values_list("name", flat=True)),
        "runs": statuses("spend-"),
        "ledgers": ledgers(),
        "reservations_left": BudgetReservation.objects.using("jobs1").count(),
    }


def reaped() -> dict:
    """Two reservations no record settles, closed by jobs2's reaper on the control database."""
    project = Project.objects.get(name="shared")
    project.daily_budget = Decimal(ADMITS + 10)
    project.save()  # frees the waiting runs of both databases at once
    now = timezone.now()
    freed = {
        a: JobRun.objects.using(a).filter(status="queued", available_at__lte=now).count()
        for a in ALIASES
    }
    runs = JobRun.objects.using("jobs2")
    # As if its claim had rolled back; as if its settlement had been lost.
    never = runs.filter(job__name="spend-jobs2", status="queued").first()
    made = runs.get(job__name="plain-two", status="completed")
    ledger = backend("jobs1")
    ledger.reserve_budgets_for(
        "jobs2",
        [
            budgets.Pending(never.pk, project.pk, Decimal(2), never.attempt + 1),
            budgets.Pending(made.pk, project.pk, Decimal(3), made.attempt),
        ],
        now=now,
    )
    before = ledgers()["jobs1"]
    young = Reaper.from_settings(using="jobs2").run_once(now).counts["reservations_closed"]
    later = now + dt.timedelta(minutes=5)
    closed = Reaper.from_settings(using="jobs2").run_once(later).counts["reservations_closed"]
    return {
        "freed": freed,
        "reserved_before": before,
        "closed_young": young,
        "closed": closed,
        "after": ledgers()["jobs1"],
        "reservations_left": BudgetReservation.objects.using("jobs1").count(),
    }


def deleted() -> dict:
    """A deleted project is cleared from the jobs of every database, not its own only."""
    doomed = Project.objects.create(name="doomed", daily_budget=Decimal(1))
    for a in ALIASES:
        Job.objects.using(a).create(
            name=f"doomed-{a}", handler="tests.testapp.jobs.noop", queue="two" if a == "jobs2"
            else "default", project=doomed, estimated_cost=Decimal(1),
        )  # fmt: skip
    doomed.delete()
    return {
        a: list(Job.objects.using(a).filter(name=f"doomed-{a}").values_list("project", flat=True))
        for a in ALIASES
    }


def queue_for_away() -> dict:
    """Queue a plain run and a budgeted run on jobs2, for the worker of :func:`away`."""
    JobRun.objects.using("jobs2").filter(status="queued").delete()
    return {"plain": trigger("plain-two", {}).pk, "budgeted": trigger("spend-jobs2", {}).pk}


def away(plain: int, budgeted: int) -> dict:
    """The control database away (the test stopped it): a worker of jobs2 alone completes
    the plain run; the budgeted one waits, no attempt spent."""
    call_command(
        "run_strait_worker", burst=True, worker_id="away", databases=["jobs2"], verbosity=0
    )
    runs = JobRun.objects.using("jobs2")
    held = runs.get(pk=budgeted)
    return {
        "plain": runs.get(pk=plain).status,
        "budgeted": [held.status, held.error_type, held.attempt],
    }


def main(argv: list[str]) -> dict:
    if argv[:1] == ["away"]:
        return away(int(argv[1]), int(argv[2]))
    return {
        "drain": drain(),
        "reaped": reaped(),
        "deleted": deleted(),
        "away_runs": queue_for_away(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
