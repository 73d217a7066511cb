"""What must hold whether or not the runs table is partitioned by status class.

CI runs these, with the conformance suite, once on a plain runs table and once
on one partitioned by ``storage.postgres.layout`` (migration 0020; plain with
``STRAIT_PARTITION_RUNS=false``).
There a run that finishes moves from the live leaf to the history leaf: a key
must still find it, and a statement that waited for it must not fail.
"""

from __future__ import annotations

import datetime as dt
import threading

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from django_strait import trigger, trigger_many
from django_strait.models import JobRun
from django_strait.rules.states import RunStatus
from django_strait.storage import backend
from django_strait.transitions.people import cancel
from tests.conftest import psycopg_connection, wait_for_a_lock_wait
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db

ON_POSTGRES = connection.vendor == "postgresql"
postgres_only = pytest.mark.skipif(not ON_POSTGRES, reason="row locks between connections")


def finish(run: JobRun, status: str = RunStatus.COMPLETED) -> None:
    JobRun.objects.filter(pk=run.pk).update(status=status, finished_at=timezone.now())


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.DEAD_LETTER])
def test_trigger__a_key_whose_run_has_finished_returns_that_run(status):
    first = trigger("test-noop", {"v": 1}, idempotency_key="order-7")
    finish(first, status)

    again = trigger("test-noop", {"v": 2}, idempotency_key="order-7")
    # Options that the one-statement INSERT does not take go the ORM's way.
    once_more = trigger("test-noop", {"v": 3}, idempotency_key="order-7", max_attempts=2)

    assert (again.pk, again.idempotency_hit) == (first.pk, True)
    assert (once_more.pk, once_more.idempotency_hit) == (first.pk, True)
    assert JobRun.objects.filter(idempotency_key="order-7").count() == 1


def test_trigger_many__keys_whose_runs_have_finished_return_those_runs():
    done = trigger("test-noop", {}, idempotency_key="a")
    finish(done)

    runs = trigger_many("test-noop", [{}, {}], idempotency_keys=["a", "b"])

    assert [(r.idempotency_key, r.idempotency_hit) for r in runs] == [("a", True), ("b", False)]
    assert runs[0].pk == done.pk
    assert JobRun.objects.filter(idempotency_key="a").count() == 1


def lock_and_finish(run_id: int) -> psycopg.Connection:
    """Another connection that moves the run to completed and holds it, uncommitted."""
    other = psycopg_connection()
    other.execute(
        f"UPDATE {JobRun._meta.db_table} SET status = 'completed', finished_at = now() "
        "WHERE id = %s",
        [run_id],
    )
    return other


def beside_a_finishing_record(run: JobRun, step) -> object:
    """Run ``step`` while another connection finishes ``run``; commit that once it waits."""
    other = lock_and_finish(run.pk)
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["result"] = step()
        except Exception as exc:  # reported to the test below
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=call)
    try:
        thread.start()
        wait_for_a_lock_wait()  # the step waits for the run's lock
        other.commit()
    finally:
        other.close()
        thread.join(timeout=10)
    assert "error" not in out, out.get("error")
    return out["result"]


def executing_run() -> JobRun:
    run = trigger("test-noop", {})
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.EXECUTING, claimed_by="w1")
    return run


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_heartbeat__beside_a_record_that_finishes_the_run__counts_it_gone():
    run = executing_run()

    beat = beside_a_finishing_record(
        run, lambda: backend().heartbeat("w1", [run.pk], now=timezone.now())
    )

    assert beat == 0
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_cancel__beside_a_record_that_finishes_the_run__finds_it_finished():
    run = executing_run()

    asked = beside_a_finishing_record(
        run, lambda: backend().request_cancel(run.pk, now=timezone.now())
    )

    assert asked is False
    assert JobRun.objects.get(pk=run.pk).cancel_requested is False


@postgres_only
def test_partitioned_layout__runs_live_in_the_leaf_of_their_status_class():
    with connection.cursor() as cursor:
        from django_strait.storage.postgres.layout import is_partitioned

        if not is_partitioned(cursor):
            pytest.skip("the runs table is plain in this run (STRAIT_PARTITION_RUNS=false)")
    job = make_job()
    queued, done, dead = (JobRun.objects.create(job=job) for _ in range(3))
    cancel(done.pk)  # as a person does: finished now
    JobRun.objects.filter(pk=dead.pk).update(status=RunStatus.DEAD_LETTER)

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, tableoid::regclass::text FROM {JobRun._meta.db_table} WHERE job_id = %s",
            [job.pk],
        )
        leaves = dict(cursor.fetchall())
        cursor.execute(
            f"EXPLAIN SELECT id FROM {JobRun._meta.db_table} WHERE status = 'queued' "
            "ORDER BY priority DESC, available_at, id LIMIT 10"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    table = JobRun._meta.db_table
    # History is kept by day of finishing (UTC), the day's range made ahead.
    today = JobRun.objects.get(pk=done.pk).finished_at.astimezone(dt.UTC)
    assert leaves == {queued.pk: f"{table}_live", done.pk: f"{table}_p{today:%Y%m%d}",
                      dead.pk: f"{table}_kept"}  # fmt: skip
    assert f"{table}_live" in plan and "_p20" not in plan and "_kept" not in plan


def partitioned_or_skip() -> None:
    from django_strait.storage.postgres.layout import is_partitioned

    with connection.cursor() as cursor:
        if not is_partitioned(cursor):
            pytest.skip("the runs table is plain in this run (STRAIT_PARTITION_RUNS=false)")


def plan_of(sql: str, params: dict | list) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def claim_params(**more) -> dict:
    from django_strait.rules import bounds
    from django_strait.storage.floors import BOTTOM

    low, high = bounds.PRIORITY
    return {"limit": 10, "worker": "w1", "begin": True, "low": [low], "high": [high],
            "after_at": [BOTTOM[0]], "after_id": [BOTTOM[1]], **more}  # fmt: skip


@postgres_only
def test_partitioned_layout__statements_that_find_runs_by_id_open_the_live_leaf_only():
    """With days of history, a statement that does not name a live status probes the
    primary key of every day's leaf for each run (the drain beside 10M runs of
    history: 5,200 runs/s; naming them: 12,000-13,700)."""
    from django_strait.storage.postgres import queries
    from django_strait.storage.postgres.workflows import STATEMENTS
    from django_strait.storage.workflows import Ids
    from django_strait.storage.workflows.starting import STARTED

    partitioned_or_skip()
    table = JobRun._meta.db_table
    by_id = {"ids": [1, 2], "worker": "w1"}
    # A workflow's started step runs point at their new runs (a 5,000-wide fan-out
    # beside 40 days of history: 0.30 -> 0.17-0.24 s).
    started, params = STATEMENTS.statement(connection, STARTED, ["started", Ids([1, 2])])
    plans = {
        "claim": plan_of(queries.claim("any", True), claim_params()),
        "start": plan_of(queries.by_id("start", True), by_id),
        "budget.reserve": plan_of(
            queries.by_id("budget.reserve", True),
            {"ledger": [1], "amount": [1], "warn": [False], "runs": [1, 2], "cost": [1, 1]},
        ),
        "workflow step runs started": plan_of(started, params),
    }

    for name, plan in plans.items():
        assert f"{table}_live" in plan, name
        assert "_p20" not in plan and "_kept" not in plan and "_default" not in plan, (name, plan)


@postgres_only
def test_migration_0020__partitions_a_small_table_and_leaves_a_large_one_plain(monkeypatch):
    """In the plain pass (STRAIT_PARTITION_RUNS=false), what the migration would do,
    with its threshold at three runs; each attempt rolled back."""
    from django.db import transaction

    from django_strait.storage.postgres import layout

    with connection.cursor() as cursor:
        if layout.is_partitioned(cursor):
            pytest.skip("the runs table is partitioned already in this run")
    monkeypatch.setattr(layout, "IN_ONE_GO", 3)
    job = make_job()
    runs = [JobRun.objects.create(job=job) for _ in range(3)]
    finish(runs[0])

    def try_it() -> tuple[bool, bool, list]:
        with transaction.atomic(), connection.cursor() as cursor:
            # The test's rows' deferred key checks, out of the way of ALTER TABLE.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            done = layout.partition_if_small(cursor)
            partitioned = layout.is_partitioned(cursor)
            kept = sorted(JobRun.objects.values_list("pk", "status"))
            transaction.set_rollback(True)
        return done, partitioned, kept

    large = try_it()
    runs[2].delete()
    small = try_it()

    assert large[:2] == (False, False)
    assert small == (True, True, sorted(JobRun.objects.values_list("pk", "status")))
    assert len(small[2]) == 2


@postgres_only
def test_runs_partitioned__a_process_reads_a_plain_table_again_and_sees_it_partitioned(
    monkeypatch,
):
    """In the plain pass: a worker that read the table plain takes the partitioned
    statements up after ``strait_partition`` without a restart, once its plain answer is
    ``RECHECK_PLAIN`` old; a partitioned answer is kept (nothing moves a table back)."""
    from django.db import transaction

    from django_strait.storage.postgres import layout

    with connection.cursor() as cursor:
        if layout.is_partitioned(cursor):
            pytest.skip("the runs table is partitioned already in this run")
    monkeypatch.setattr(layout, "_KNOWN", {})
    assert layout.runs_partitioned(connection.alias) is False
    seen = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        layout.partition_runs(cursor)  # as strait_partition's switch leaves it
        seen.append(layout.runs_partitioned(connection.alias))  # read a moment ago
        monkeypatch.setattr(layout, "RECHECK_PLAIN", 0.0)
        seen.append(layout.runs_partitioned(connection.alias))
        transaction.set_rollback(True)
    # Plain again, rolled back; the partitioned answer stays, as it would in a worker.
    seen.append(layout.runs_partitioned(connection.alias))

    assert seen == [False, True, True]


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_partitioned_layout__the_claim_looks_its_runs_up_when_vacuum_saw_few_live_runs():
    """A snapshot held, runs claimed and finished (their dead versions stay in the live
    leaf), and the live leaf vacuumed with none queued: its estimate is then about one
    row. Joined to the runs it chose, the claim's UPDATE read the live leaf's whole
    primary key as the outer side of the join (0.5 -> 34 ms a claim at 300 runs/s);
    it must look its runs up by id."""
    from django_strait.storage.postgres import queries

    partitioned_or_skip()
    table = JobRun._meta.db_table
    holder = psycopg_connection()
    try:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM django_strait_job")
        runs = trigger_many("test-noop", [{} for _ in range(3000)])
        JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(
            status=RunStatus.COMPLETED, finished_at=timezone.now()
        )
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM {table}_live")
        trigger_many("test-noop", [{} for _ in range(5)])

        plan = plan_of(queries.claim("any", True), claim_params())
    finally:
        holder.close()

    update = plan.split("Update on", 1)[1].split("CTE limited", 1)[0]
    assert f"{table}_live_pkey" in update and "Index Cond: (id = ANY" in update, plan
    assert "strait_run_active" not in plan, plan
