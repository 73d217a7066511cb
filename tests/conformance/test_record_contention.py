"""Records of several workers at once lock the rows they share in one order: no deadlock.

Workers' records share the per-minute rollup rows of the jobs they ran, the health
rows of their endpoints and the budget ledger rows of their projects. A chaos run
saw two workers deadlock in the record statement on rollup rows (each deadlock
costs ``deadlock_timeout``, 1 s by default, before PostgreSQL breaks it).

A record takes its rows within a few milliseconds, so two records seldom overlap
by chance. Here a trigger makes each write of a shared row wait 2 ms first (as a
slow disk or a busy server would), so that the records of four workers overlap row
by row: any two that take rows in different orders then wait for each other.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from django_strait.models import BudgetLedger, EndpointHealth, Job, JobRun, Project, RunRollup
from django_strait.rules.resilience.budgets import today
from django_strait.rules.resilience.health import Sample
from django_strait.rules.states import Transition
from django_strait.storage import Record, RecordBatch, Storage, sql
from tests.conformance.conftest import in_threads, needs_postgres
from tests.integration.factories import make_job

# Tables read and written through the models: a backend that keeps runs elsewhere skips them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_database]

WORKERS = 4
BATCHES = 4
#: Runs per batch, at most: sizes vary, and with them the planner's choices.
BATCH = 80
#: The shared rows: jobs x minutes x end statuses of the rollup, endpoints, projects x days.
JOBS = 6
MINUTES = 4
ENDPOINTS = 6
PROJECTS = 3
DAYS = 3
ENDS = [(Transition.COMPLETE, "succeeded"), (Transition.DEAD_LETTER, "failed"),
        (Transition.DISCARD, "failed")]  # fmt: skip
COST = Decimal("0.01")
NOON = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)
SHARED_TABLES = ("django_strait_runrollup", "django_strait_endpointhealth",
                 "django_strait_budgetledger")  # fmt: skip


@pytest.fixture
def slow_shared_rows() -> Iterator[None]:
    """Each write of a rollup, health or ledger row waits 2 ms first (dropped at the end)."""
    needs_postgres("SQLite lets one writer at a time in: no two records ever hold rows at once")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION strait_test_slow_write() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$"
        )
        for table in SHARED_TABLES:
            cursor.execute(
                f"CREATE TRIGGER strait_test_slow BEFORE INSERT OR UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION strait_test_slow_write()"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for table in SHARED_TABLES:
                cursor.execute(f"DROP TRIGGER strait_test_slow ON {table}")
            cursor.execute("DROP FUNCTION strait_test_slow_write()")


class Shared:
    """The rows the workers' records share."""

    def __init__(self) -> None:
        self.jobs = [make_job(f"shared-{n}") for n in range(JOBS)]
        self.projects = [Project.objects.create(name=f"p{n}", daily_budget=10**6)
                         for n in range(PROJECTS)]  # fmt: skip
        self.urls = [f"http://127.0.0.1:9/{n}" for n in range(ENDPOINTS)]
        self.days = [NOON - dt.timedelta(days=d) for d in range(DAYS)]
        BudgetLedger.objects.bulk_create(
            [BudgetLedger(project=p, day=today(day), reserved=10**6)
             for p in self.projects for day in self.days]
        )  # fmt: skip

    def batch(self, worker: str, runs: list[JobRun], rng: random.Random) -> RecordBatch:
        """Records of ``runs`` on a random part of the shared rows, endpoints in random order."""
        urls = rng.sample(self.urls, k=ENDPOINTS // 2)
        samples = [Sample(url, 1, 0.9, 1.0, 0.0, 5.0, 1e3) for url in urls]
        return RecordBatch(worker, [self._record(run, rng) for run in runs], samples)

    def _record(self, run: JobRun, rng: random.Random) -> Record:
        transition, outcome = rng.choice(ENDS)
        ended = NOON - dt.timedelta(minutes=rng.randrange(MINUTES), seconds=rng.randrange(60))
        return Record(run.id, 1, transition, rng.choice(self.days), ended, 5, outcome,
                      job_id=rng.choice(self.jobs).pk, project_id=rng.choice(self.projects).pk,
                      reserved_cost=COST, cost=COST)  # fmt: skip


def executing(jobs: list[Job], worker: str, count: int) -> list[JobRun]:
    now = timezone.now()
    return JobRun.objects.bulk_create(
        [JobRun(job=jobs[i % len(jobs)], status="executing", attempt=1, claimed_by=worker,
                available_at=now, started_at=now, reserved_cost=COST) for i in range(count)]
    )  # fmt: skip


def test_records__of_several_workers_at_once_never_deadlock(storage: Storage, slow_shared_rows):
    shared = Shared()
    runs = {w: executing(shared.jobs, f"w{w}", BATCHES * BATCH) for w in range(WORKERS)}

    def worker(w: int) -> tuple[int, int]:
        """One worker's record thread (its statements prepared): (records written, deadlocks)."""
        rng, left = random.Random(w), runs[w]
        written = deadlocks = 0
        for _ in range(BATCHES):
            size = rng.randint(BATCH // 4, BATCH)
            batch, left = shared.batch(f"w{w}", left[:size], rng), left[size:]
            sql.keep_plans(connection, time.monotonic(), 3600.0)
            try:
                storage.record(batch)
                written += len(batch.records)
            except OperationalError as exc:
                if "deadlock" not in str(exc):
                    raise
                deadlocks += 1
        return written, deadlocks

    results = in_threads(WORKERS, worker)

    assert [deadlocks for _, deadlocks in results] == [0] * WORKERS
    written = sum(n for n, _ in results)
    assert sum(RunRollup.objects.values_list("count", flat=True)) == written
    assert sum(BudgetLedger.objects.values_list("spent", flat=True)) == written * COST
    assert sum(EndpointHealth.objects.values_list("samples", flat=True)) == (
        WORKERS * BATCHES * (ENDPOINTS // 2)
    )
