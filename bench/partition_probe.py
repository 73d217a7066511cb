#!/usr/bin/env python
"""What a partitioned runs table would cost, measured on copies of it (PostgreSQL).

    python bench/partition_probe.py [--runs 20000] [--reps 5] [--history 3000000]
                                    [--upgrade 1000000] [--db URL]

Issue 19 asks for finished history in time-range partitions. Before the runs table
is rebuilt, this probe measures the three costs that decide its shape, on tables
made ``LIKE django_strait_jobrun`` (same columns and, where the layout allows,
same indexes), in the bench database, never on the app's own table:

  record     the hot path's cost: ``--runs`` runs queued, then started and recorded
             by id 100 at a time as the worker does (status IS TRUE guard, updated
             columns as queries.sql's record), on the plain table and on one LIST-
             partitioned by status class (live / kept / history), where the record
             moves each row live -> history (a delete and an insert); again with
             history in 30 RANGE partitions (29 of them empty: older history), with
             the guard as today and with the status named (status = 'executing',
             which lets PostgreSQL prune to the live partition). The variants' order
             rotates each rep; ms per run of the record statements (client wall time)
  drop       ``--history`` finished runs in five RANGE(id) sub-partitions of history;
             one is dropped (DROP TABLE: an ACCESS EXCLUSIVE lock on the parent) and
             one detached CONCURRENTLY then dropped, while another connection claims
             from the parent and locks two live runs by id as the start does (the
             status a filter only), in a loop: each step's seconds, the longest claim
             and the longest lock by id;
             then both again while a third connection holds the history open for 1 s
             (a long admin page or report)
  upgrade    ``--upgrade`` runs in a plain copy of today's table: moved into a
             RANGE(id)-partitioned parent by attaching the old table as one partition
             (a CHECK constraint added NOT VALID, then validated without blocking
             writes, so that ATTACH does not scan under its lock), timing each step,
             against copying the same rows in batches of 10,000 (runs/s)

Prints one JSON object. The database is ``--db`` (default: PostgreSQL
``strait_bench_probe`` on 127.0.0.1, created and migrated if missing); the probe's
tables are dropped at the end. Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

from bench_worker import setup_django

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_probe"

LIVE = "'queued', 'dequeued', 'executing', 'waiting'"
KEPT = "'dead_letter', 'failed', 'system_failed'"

#: The claim's shape (queries.sql "claim" without floors or limits): due queued runs in
#: priority order, locked, skipping those another claim holds.
CLAIM = """
SELECT id FROM {table} WHERE status = 'queued' AND available_at <= now()
ORDER BY priority DESC, available_at, id LIMIT 10 FOR UPDATE SKIP LOCKED
"""
#: The start's and record's shape (by id, the status a filter only): no partition pruning.
BY_ID = """
SELECT id FROM {table} WHERE id = ANY(ARRAY[%s, %s]::bigint[]) AND (status = 'queued') IS TRUE
FOR UPDATE
"""
START = """
UPDATE {table} SET status = 'executing', started_at = now(), attempt = attempt + 1
WHERE id = ANY(%s) AND (status = 'dequeued') IS TRUE
"""
RECORD = """
UPDATE {table} SET status = 'completed', finished_at = now(), result = 'null'::jsonb,
    claimed_by = '', heartbeat_at = NULL, updated_at = now()
WHERE id = ANY(%s) AND (status = 'executing') IS TRUE
"""
#: The record naming its status, so that PostgreSQL can prune it to the live partition.
RECORD_NAMED = RECORD.replace("(status = 'executing') IS TRUE", "status = 'executing'")
FILL = """
INSERT INTO {table} (
    id, job_id, payload, status, attempt, attempts_before_replay, priority, queue,
    available_at, claimed_by, dequeued_at, started_at, finished_at, cancel_requested,
    result, last_error, error_type, endpoint_used, replay_count, replayed_by,
    created_at, updated_at, preset
)
SELECT g, %(job)s::bigint, jsonb_build_object('i', g), %(status)s::varchar, 0, 0, 0, 'default',
       now(), '', NULL, NULL, {finished}, false,
       NULL, '', '', '', 0, '', now(), now(), ''
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""


def connect(db_url: str):
    import psycopg

    return psycopg.connect(db_url, autocommit=True)


def bench_job(conn) -> int:
    row = conn.execute("SELECT id FROM django_strait_job WHERE name = 'probe'").fetchone()
    if row:
        return row[0]
    from django_strait.models import Job

    return Job.objects.create(name="probe", handler="bench.jobs.noop").pk


def fill(conn, table: str, job: int, first: int, last: int, status: str = "queued") -> None:
    finished = "now() - interval '60 days'" if status == "completed" else "NULL"
    sql = FILL.format(table=table, finished=finished)
    conn.execute(sql, {"job": job, "status": status, "first": first, "last": last})


def make_plain(conn, table: str) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    conn.execute(f"CREATE TABLE {table} (LIKE django_strait_jobrun INCLUDING ALL)")


def make_by_status(conn, table: str, history_ranges: list[tuple[int, int]]) -> None:
    """LIST by status class; history sub-partitioned by RANGE(id); the claim's indexes."""
    conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    conn.execute(
        f"CREATE TABLE {table} (LIKE django_strait_jobrun INCLUDING DEFAULTS) "
        "PARTITION BY LIST (status)"
    )
    conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id, status)")
    conn.execute(f"CREATE TABLE {table}_live PARTITION OF {table} FOR VALUES IN ({LIVE})")
    conn.execute(f"CREATE TABLE {table}_kept PARTITION OF {table} FOR VALUES IN ({KEPT})")
    conn.execute(
        f"CREATE TABLE {table}_history PARTITION OF {table} DEFAULT PARTITION BY RANGE (id)"
    )
    for i, (lo, hi) in enumerate(history_ranges):
        conn.execute(
            f"CREATE TABLE {table}_history_{i} PARTITION OF {table}_history "
            f"FOR VALUES FROM ({lo}) TO ({hi})"
        )
    for name, cols, where in (
        ("claim_any", "priority DESC, available_at, id", "status = 'queued'"),
        ("claim_queue", "queue, priority DESC, available_at, id", "status = 'queued'"),
        ("active", "job_id, status", f"status IN ({LIVE})"),
        ("status_finished", "status, finished_at", None),
        # Today's other non-unique indexes, so that the record maintains as many.
        ("job", "job_id", None),
        ("dead_letters", "job_id, error_type", "status = 'dead_letter'"),
        ("idempotency_key", "idempotency_key", "idempotency_key IS NOT NULL"),
        ("workflow_step", "workflow_step_run_id", "workflow_step_run_id IS NOT NULL"),
    ):
        clause = f" WHERE {where}" if where else ""
        conn.execute(f"CREATE INDEX {table}_{name} ON {table} ({cols}){clause}")


def record_ms_per_run(conn, table: str, job: int, runs: int, record: str = RECORD) -> float:
    """Queue ``runs``, claim-start-record them 100 at a time; ms per run of the record."""
    conn.execute(f"TRUNCATE {table}")
    fill(conn, table, job, 1, runs)
    conn.execute(f"VACUUM ANALYZE {table}")
    spent = 0.0
    for first in range(1, runs + 1, 100):
        ids = list(range(first, min(first + 100, runs + 1)))
        conn.execute(
            f"UPDATE {table} SET status = 'dequeued' WHERE id = ANY(%s) AND status = 'queued'",
            [ids],
        )
        conn.execute(START.format(table=table), [ids])
        t = time.perf_counter()
        conn.execute(record.format(table=table), [ids])
        spent += time.perf_counter() - t
    done = conn.execute(f"SELECT count(*) FROM {table} WHERE status = 'completed'").fetchone()[0]
    if done != runs:
        raise RuntimeError(f"{table}: {done} of {runs} recorded")
    return spent * 1000 / runs


#: History partitions that hold no recorded run: the older ones a layout by time keeps.
OLDER = [(-(i + 1) * 10**9, -i * 10**9) for i in range(29, 0, -1)]

#: Each variant: its table, its history partitions and its record statement.
VARIANTS = {
    "plain": ("probe_plain", None, RECORD),
    "partitioned": ("probe_part", [(1, 10**12)], RECORD),
    "partitioned_30": ("probe_part30", [*OLDER, (1, 10**12)], RECORD),
    "partitioned_30_status_named": ("probe_part30", [*OLDER, (1, 10**12)], RECORD_NAMED),
}


def record_phase(conn, job: int, runs: int, reps: int) -> dict:
    """The record's ms per run in each variant, the variants' order rotated each rep."""
    for table, history, _ in VARIANTS.values():
        if history is None:
            make_plain(conn, table)
        elif not conn.execute("SELECT to_regclass(%s)", [table]).fetchone()[0]:
            make_by_status(conn, table, history)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            table, _, record = VARIANTS[name]
            times[name].append(record_ms_per_run(conn, table, job, runs, record))
    out = {f"record_ms_per_run_{k}": statistics.median(v) for k, v in times.items()}
    plain = out["record_ms_per_run_plain"]
    for name in names[1:]:
        out[f"record_ratio_{name}_to_plain"] = out[f"record_ms_per_run_{name}"] / plain
    return out


class Claimer(threading.Thread):
    """Claims, then locks two live runs by id as the start does, in a loop on its own connection."""

    def __init__(self, db_url: str, table: str, live: tuple[int, int]) -> None:
        super().__init__(daemon=True)
        self.conn = connect(db_url)
        self.claim = CLAIM.format(table=table)
        self.by_id = BY_ID.format(table=table)
        self.live = live
        self.times: list[tuple[float, float]] = []
        self.running = True

    def run(self) -> None:
        while self.running:
            with self.conn.transaction(force_rollback=True):
                t = time.perf_counter()
                self.conn.execute(self.claim).fetchall()
                t2 = time.perf_counter()
                self.conn.execute(self.by_id, self.live).fetchall()
                t3 = time.perf_counter()
            self.times.append((t2 - t, t3 - t2))

    def window(self, since: int) -> dict:
        times = self.times[since:]
        return {
            "claims": len(times),
            "longest_claim_ms": max((c for c, _ in times), default=0) * 1000,
            "longest_by_id_ms": max((b for _, b in times), default=0) * 1000,
        }


def read_history(db_url: str, hold: float) -> threading.Thread:
    """A reader (an admin page, a report) with the history open for ``hold`` seconds."""
    conn = connect(db_url)
    started = threading.Event()

    def read() -> None:
        with conn.transaction():
            conn.execute("SELECT count(*) FROM probe_part WHERE status = 'completed'").fetchone()
            started.set()
            time.sleep(hold)
        conn.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started.wait()
    return reader


def timed_under_claims(
    claimer: Claimer, conn, statements: list[str], db_url: str, reader_s: float
) -> dict:
    """Run ``statements`` while claims go on; with ``reader_s``, beside a reader that long."""
    reader = read_history(db_url, reader_s) if reader_s else None
    since = len(claimer.times)
    t = time.perf_counter()
    for sql in statements:
        conn.execute(sql)
    seconds = time.perf_counter() - t
    if reader:
        reader.join()
    time.sleep(0.2)
    return {"seconds": seconds, **claimer.window(since)}


def drop_phase(db_url: str, conn, job: int, history: int) -> dict:
    fifth = history // 5
    ranges = [(1 + i * fifth, 1 + (i + 1) * fifth) for i in range(4)]
    ranges.append((1 + 4 * fifth, 10**12))
    make_by_status(conn, "probe_part", ranges)
    t = time.perf_counter()
    fill(conn, "probe_part", job, 1, history, status="completed")
    fill(conn, "probe_part", job, history + 1, history + 1000)  # a live queue to claim from
    conn.execute("VACUUM ANALYZE probe_part")
    out: dict = {"history": history, "load_s": time.perf_counter() - t}
    claimer = Claimer(db_url, "probe_part", (history + 1, history + 2))
    claimer.start()
    try:
        time.sleep(1.0)
        out["idle"] = claimer.window(0)
        for i, reader_s in enumerate((0.0, 1.0)):
            beside = "_beside_a_1s_reader" if reader_s else ""
            out[f"drop_table{beside}"] = timed_under_claims(
                claimer, conn, [f"DROP TABLE probe_part_history_{2 * i}"], db_url, reader_s
            )
            out[f"detach_concurrently_then_drop{beside}"] = timed_under_claims(
                claimer,
                conn,
                [
                    "ALTER TABLE probe_part_history DETACH PARTITION "
                    f"probe_part_history_{2 * i + 1} CONCURRENTLY",
                    f"DROP TABLE probe_part_history_{2 * i + 1}",
                ],
                db_url,
                reader_s,
            )
    finally:
        claimer.running = False
        claimer.join()
        claimer.conn.close()
    left = conn.execute("SELECT count(*) FROM probe_part").fetchone()[0]
    out["rows_left"] = left  # the last fifth of the history and the live queue
    return out


def upgrade_phase(conn, job: int, runs: int) -> dict:
    make_plain(conn, "probe_old")
    fill(conn, "probe_old", job, 1, runs, status="completed")
    conn.execute("VACUUM ANALYZE probe_old")
    conn.execute("DROP TABLE IF EXISTS probe_new CASCADE")
    conn.execute(
        "CREATE TABLE probe_new (LIKE django_strait_jobrun INCLUDING DEFAULTS) "
        "PARTITION BY RANGE (id)"
    )
    conn.execute("ALTER TABLE probe_new ADD PRIMARY KEY (id)")
    out: dict = {"runs": runs}
    steps = {
        "check_not_valid": f"ALTER TABLE probe_old ADD CONSTRAINT probe_old_bound "
        f"CHECK (id IS NOT NULL AND id >= 1 AND id < {runs + 1}) NOT VALID",
        "validate": "ALTER TABLE probe_old VALIDATE CONSTRAINT probe_old_bound",
        "attach": f"ALTER TABLE probe_new ATTACH PARTITION probe_old FOR VALUES FROM (1) TO ({runs + 1})",
    }
    for name, sql in steps.items():
        t = time.perf_counter()
        conn.execute(sql)
        out[f"{name}_s"] = time.perf_counter() - t
    n = conn.execute("SELECT count(*) FROM probe_new").fetchone()[0]
    out["rows_in_new_parent"] = n
    # The other path: copy the rows into an empty partitioned table, 10,000 a batch.
    conn.execute("DROP TABLE IF EXISTS probe_copy CASCADE")
    make_by_status(conn, "probe_copy", [(1, 10**12)])
    t = time.perf_counter()
    for first in range(1, runs + 1, 10_000):
        conn.execute(
            "INSERT INTO probe_copy SELECT * FROM probe_new WHERE id >= %s AND id < %s",
            [first, first + 10_000],
        )
    seconds = time.perf_counter() - t
    out["batched_copy_s"] = seconds
    out["batched_copy_runs_per_s"] = runs / seconds
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--history", type=int, default=3_000_000)
    ap.add_argument("--upgrade", type=int, default=1_000_000)
    ap.add_argument("--only", default="record,drop,upgrade")
    ap.add_argument("--db", default=DEFAULT_DB)
    args = ap.parse_args()
    if not args.db.startswith("postgres"):
        ap.error("--db: PostgreSQL only (the probe is about declarative partitions)")
    setup_django(args.db)
    phases = args.only.split(",")
    conn = connect(args.db)
    job = bench_job(conn)
    out: dict = {"load": [os.getloadavg()[0]]}
    try:
        if "record" in phases:
            out["record"] = record_phase(conn, job, args.runs, args.reps)
        if "drop" in phases:
            out["drop"] = drop_phase(args.db, conn, job, args.history)
        if "upgrade" in phases:
            out["upgrade"] = upgrade_phase(conn, job, args.upgrade)
    finally:
        tables = ("probe_plain", "probe_part", "probe_part30", "probe_old", "probe_new")
        for table in (*tables, "probe_copy"):
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        conn.close()
    out["load"].append(os.getloadavg()[0])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
