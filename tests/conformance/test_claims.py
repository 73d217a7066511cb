"""Claims: due runs in claim order, the filters, and never one run to two workers.

The tests that make and read rows through ``rows`` run on any backend, the
in-memory one too; those that touch the tables themselves are ``needs_database``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time

import pytest
from django.db import connection
from django.utils import timezone

from django_strait.models import JobRun
from django_strait.storage import PostgresStorage
from django_strait.storage.floors import ClaimFloors
from tests.conformance.conftest import claim, in_threads, needs_postgres, start
from tests.conftest import psycopg_connection
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db(transaction=True)


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


def test_claim__takes_priority_first_then_due_time_then_id(storage, rows):
    job = rows.job()
    late_low = rows.run(job, priority=0, available_at=ago(10))
    early_low = rows.run(job, priority=0, available_at=ago(20))
    high = rows.run(job, priority=5, available_at=ago(1))
    tie_a = rows.run(job, priority=0, available_at=ago(30))
    tie_b = rows.run(job, priority=0, available_at=rows.value(tie_a, "available_at"))

    order = [r.id for r in claim(storage, limit=10)]

    assert order == [high, tie_a, tie_b, early_low, late_low]


def test_claim__takes_at_most_the_limit_and_the_first_in_order(storage, rows):
    job = rows.job()
    runs = [rows.run(job, priority=p) for p in (1, 3, 2)]

    assert [r.id for r in claim(storage, limit=2)] == [runs[1], runs[2]]


def test_claim__never_takes_runs_not_due_or_of_a_disabled_job(storage, rows):
    rows.run(rows.job(), available_at=timezone.now() + dt.timedelta(hours=1))
    rows.run(rows.job(enabled=False))
    due = rows.run(rows.job())

    assert [r.id for r in claim(storage)] == [due]


def test_claim__takes_only_queued_runs(storage, rows):
    job = rows.job()
    for status in ("dequeued", "executing", "completed", "dead_letter", "waiting"):
        rows.run(job, status=status)

    assert claim(storage) == []


@pytest.mark.parametrize(
    ("queues", "expected"), [((), {"a", "b", "c"}), (("b",), {"b"}), (("a", "c"), {"a", "c"})]
)
def test_claim__takes_the_queues_asked_for(storage, rows, queues, expected):
    job = rows.job()
    for queue in ("a", "b", "c"):
        rows.run(job, queue=queue)

    claimed = claim(storage, queues=queues)

    assert {rows.value(r.id, "queue") for r in claimed} == expected


def test_claim__marks_the_runs_dequeued_by_this_worker(storage, rows):
    run = rows.run(payload={})

    [claimed] = claim(storage, "w7")

    marks = [rows.value(run, name) for name in ("status", "claimed_by")]
    assert (marks, claimed.payload) == (["dequeued", "w7"], {})
    assert rows.value(run, "dequeued_at") and rows.value(run, "heartbeat_at")


#: Payloads the database stores as valid JSON and Python cannot decode, with the error
#: each gives. A 5,000-digit number passes every database's JSON check and exceeds
#: Python's integer-string limit (4,300 digits) on every supported version; nesting
#: 5,000 deep exceeds the decoder's recursion limit, but SQLite refuses JSON nested more
#: than 1,000 deep and Python 3.12+ decodes that much, so SQLite has only the number.
UNREADABLE_PAYLOADS = {
    "huge-number": ('{"a": ' + "9" * 5000 + "}", "ValueError"),
    "deep": ('{"a": ' * 5000 + "1" + "}" * 5000, "RecursionError"),
}


@pytest.mark.needs_database
@pytest.mark.parametrize("kind", UNREADABLE_PAYLOADS)
def test_claim__a_payload_it_cannot_read_is_a_row_error_not_an_exception(storage, kind):
    if kind == "deep" and connection.vendor == "sqlite":
        pytest.skip("SQLite refuses JSON nested more than 1,000 deep, which Python 3.12+ reads")
    text, error = UNREADABLE_PAYLOADS[kind]
    good, bad = make_run(), make_run()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_strait_jobrun SET payload = %s WHERE id = %s", [text, bad.pk])

    by_id = {r.id: r for r in claim(storage)}

    assert by_id[good.pk].row_error == ""
    assert error in by_id[bad.pk].row_error and by_id[bad.pk].payload is None


def test_claim__two_workers_one_after_the_other_never_share_a_run(storage, rows):
    job = rows.job()
    for _ in range(10):
        rows.run(job)

    first, second = claim(storage, "w1", 6), claim(storage, "w2", 6)

    assert (len(first), len(second)) == (6, 4)
    assert not {r.id for r in first} & {r.id for r in second}


@pytest.mark.slow
@pytest.mark.needs_database
def test_claim__workers_claiming_at_once_take_every_run_exactly_once(storage):
    job = make_job()
    JobRun.objects.bulk_create([JobRun(job=job, available_at=ago(1)) for _ in range(300)])

    def drain(i: int) -> list[int]:
        taken: list[int] = []
        while batch := start(storage, f"w{i}", limit=7):
            taken += [r.id for r in batch]
        return taken

    taken = [rid for ids in in_threads(6, drain) for rid in ids]

    assert len(taken) == 300 and len(set(taken)) == 300
    assert set(JobRun.objects.values_list("status", "attempt")) == {("executing", 1)}


def test_start__returns_the_runs_in_claim_order(storage, rows):
    job = rows.job()
    runs = [rows.run(job, priority=p) for p in (1, 9, 5, 7, 3)]

    started = start(storage, limit=5)

    assert [r.id for r in started] == [runs[i] for i in (1, 3, 2, 4, 0)]


# Claim floors (storage.floors): where a worker's claims start on PostgreSQL.


def test_claim_with_floors__keeps_claim_order_across_priorities_batch_after_batch(storage, rows):
    job = rows.job()
    made = [
        (-p, rows.value(run, "available_at"), run)
        for i, p in enumerate([0, 5, -3, 0, 5, -3, 0, 5, -3, 0])
        for run in [rows.run(job, priority=p, available_at=ago(100 - i))]
    ]
    expected = [run for *_, run in sorted(made)]
    floors = ClaimFloors(rescan=3600)

    order = [r.id for _ in range(5) for r in claim(storage, limit=2, floors=floors)]

    assert order == expected


def test_claim_with_floors__takes_a_run_queued_later_behind_the_floor_by_the_next_rescan(
    storage, rows
):
    job = rows.job()
    first = rows.run(job, available_at=ago(60))
    floors = ClaimFloors(rescan=0.5)
    assert [r.id for r in claim(storage, floors=floors)] == [first]
    # Queued since, due before what the last claim took (a replay, a rolled-back claim).
    behind = rows.run(job, available_at=ago(120))
    newer = rows.run(job, available_at=ago(0.5))

    taken = [r.id for r in claim(storage, floors=floors)]
    time.sleep(0.6)
    taken += [r.id for r in claim(storage, floors=floors)]

    assert sorted(taken) == sorted([behind, newer])
    if isinstance(storage, PostgresStorage):  # the first claim started at its floor
        assert taken == [newer, behind]


def test_claim_with_floors__takes_a_run_due_just_before_the_floor_at_once(storage, rows):
    """A trigger that committed within the lag of its due time is found by the next claim."""
    job = rows.job()
    rows.run(job, available_at=ago(0.2))
    floors = ClaimFloors(rescan=3600, lag=1.0)
    claim(storage, floors=floors)
    late = rows.run(job, available_at=ago(0.5))  # set before the claim, committed after it

    assert [r.id for r in claim(storage, floors=floors)] == [late]


@pytest.mark.needs_database
def test_claim_with_floors__under_a_held_snapshot_reads_few_buffers_where_the_whole_index_reads_many(
    storage,
):
    needs_postgres("dead index entries and EXPLAIN")
    if not isinstance(storage, PostgresStorage):
        pytest.skip("the ORM backend has no floors")
    job = make_job()
    JobRun.objects.bulk_create(
        [JobRun(job=job, available_at=ago(600 - i * 0.01)) for i in range(10_100)]
    )
    floors = ClaimFloors(rescan=3600, lag=0)
    with held_snapshot():
        for _ in range(100):  # 10,000 dead entries at the front of the claim's index
            claim(storage, limit=100, floors=floors)
        bounded = claim_buffers(storage, floors)
        whole = claim_buffers(storage, None)

    # Measured: 7 and 217 buffers (the whole index walks 10,000 dead entries).
    assert bounded <= 20 < 100 <= whole


@contextlib.contextmanager
def held_snapshot():
    """Another connection in a REPEATABLE READ transaction that has read: the horizon held."""
    with psycopg_connection() as other:
        other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM django_strait_jobrun").fetchone()
        yield
        other.rollback()


def claim_buffers(storage, floors) -> int:
    """The shared buffers of the claim's index scans, from EXPLAIN (ANALYZE, BUFFERS), rolled back."""
    from django.db import transaction

    class Explaining(PostgresStorage):
        plan = ""

        def _execute(self, sql, params, **options):
            rows = super()._execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            Explaining.plan = "\n".join(row[0] for row in rows)
            return []

    with transaction.atomic():
        claim(Explaining(storage.alias), limit=10, floors=floors)
        transaction.set_rollback(True)
    scans = re.findall(
        # The claim's index: on a table partitioned by status class, the live leaf's copy.
        r"Index Scan using (?:strait_run_claim_any_queue|django_strait_jobrun_live_priority_"
        r"available_at_id_idx).*\n(?:.*\n)*?\s*Buffers: shared hit=(\d+)",
        Explaining.plan,
    )
    return sum(int(b) for b in scans)


def test_claim_with_floors__a_claim_that_rolled_back_leaves_its_runs_to_the_next_claim(
    storage, rows
):
    from django_strait.transitions.worker import claim_and_start

    job = rows.job()
    runs = [rows.run(job, available_at=ago(60 - i)) for i in range(3)]
    floors = ClaimFloors(rescan=3600)

    def failing_gate(claimed, now):
        raise RuntimeError("a bad row")

    with pytest.raises(RuntimeError):
        claim_and_start("w1", limit=10, gate=failing_gate, storage=storage, floors=floors)
    again = claim_and_start("w1", limit=10, storage=storage, floors=floors)

    assert [r.id for r in again] == runs


@pytest.mark.needs_database
def test_claim_that_starts__writes_one_row_version_per_run_and_commits_without_a_flush(storage):
    needs_postgres("pg_stat_xact_user_tables and synchronous_commit")
    if not isinstance(storage, PostgresStorage):
        pytest.skip("the ORM backend's claim never starts runs")
    job = make_job()
    for _ in range(5):
        make_run(job)

    with storage.claim_transaction():
        runs = storage.claim("w1", queues=(), limit=10, now=timezone.now(), start=True)
        started = storage.start("w1", runs, now=timezone.now())
        with connection.cursor() as cursor:
            cursor.execute(
                # Over the table's leaves when it is partitioned, else the table itself.
                "SELECT sum(n_tup_upd) FROM pg_stat_xact_user_tables WHERE relid = %s::regclass "
                "OR relid IN (SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf)",
                [JobRun._meta.db_table] * 2,
            )
            [(updates,)] = cursor.fetchall()
            cursor.execute("SHOW synchronous_commit")
            [(commit_mode,)] = cursor.fetchall()

    # Claimed and started in one UPDATE (two before: dequeued, then executing).
    assert (len(started), updates, commit_mode) == (5, 5, "off")
    assert set(JobRun.objects.values_list("status", "attempt")) == {("executing", 1)}
    assert [r.attempt for r in started] == [1] * 5


def test_claim__leaves_out_the_queues_excluded(storage, rows):
    job = rows.job()
    for queue in ("a", "b", "c"):
        rows.run(job, queue=queue)

    with storage.claim_transaction():
        claimed = storage.claim("w1", queues=(), limit=10, now=timezone.now(), exclude=["b"])

    assert {rows.value(r.id, "queue") for r in claimed} == {"a", "c"}


def test_claim_and_start__skips_a_paused_queue_until_it_is_resumed(storage, rows):
    from django_strait.storage import queues as queue_states
    from django_strait.transitions.worker import claim_and_start

    job = rows.job()
    held, free = rows.run(job, queue="held"), rows.run(job, queue="free")
    queue_states.set_paused("default", "held", True, timezone.now())
    try:
        assert claim_and_start("w1", queues=["held"], limit=5, storage=storage) == []
        assert [r.id for r in start(storage)] == [free]
        queue_states.set_paused("default", "held", False, timezone.now())
        assert [r.id for r in start(storage)] == [held]
    finally:
        queue_states.forget()
