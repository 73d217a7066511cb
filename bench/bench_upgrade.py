#!/usr/bin/env python
"""Upgrading a large install to the partitioned layout while its queue drains (PostgreSQL).

    python bench/bench_upgrade.py [--history 1000000] [--queued 400000] [--days 30]
                                  [--batch-size 10000] [--concurrency 100] [--db URL]

A fresh database (``--db``, default ``strait_bench_upgrade`` on 127.0.0.1, dropped
and made again) is migrated with the plain runs table (``STRAIT_PARTITION_RUNS=false``,
as migration 0020 leaves an install of 100,000 runs or more), and loaded with
--history completed runs spread over --days days, one attempt each, and
--queued no-op runs (generate_series SQL), then VACUUM ANALYZE. Retention is set to
100 years: the worker's pruning duty must not delete the history being moved. One worker drains
the queue; ``manage.py strait_partition`` runs beside it once the drain has gone
10 s. Printed as one JSON object:

  move_s, locked_ms   the command's time, and how long it held the queue's lock
                      (its own report)
  drain_before/_during/_after
                      runs/s of the worker over 10 s before the move, while it ran,
                      and until the queue is empty after it (the worker keeps its
                      plain table's statements; restarted workers get the
                      partitioned ones: drain_restarted drains --queued / 4 more
                      runs with a new worker)
  runs, duplicates, executed_twice, lost
                      every run once, every queued run executed once, none missing

Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

from bench_worker import ROOT, make_jobs, spawn_worker, stop

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_upgrade"
COLUMNS = (
    "job_id, payload, status, attempt, attempts_before_replay, priority, queue, available_at, "
    "claimed_by, dequeued_at, started_at, finished_at, cancel_requested, result, last_error, "
    "error_type, endpoint_used, replay_count, replayed_by, created_at, updated_at, preset"
)
LOAD_HISTORY = f"""
INSERT INTO django_strait_jobrun ({COLUMNS})
SELECT %(job)s, jsonb_build_object('i', g), 'completed', 1, 0, 0, 'default', t,
       'bench-history', t, t, t + interval '5 ms', false, 'null'::jsonb, '', '', '', 0, '',
       t, t, ''
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - (1 + g %% %(days)s) * interval '1 day' - g * interval '1 ms' AS t) AS a
"""
LOAD_ATTEMPTS = """
INSERT INTO django_strait_runattempt (run_id, number, endpoint, started_at, finished_at,
    duration_ms, outcome, error_type, error, response_excerpt, worker, preset)
SELECT id, 1, '', started_at, finished_at, 5, 'succeeded', '', '', '', 'bench-history', ''
FROM django_strait_jobrun WHERE claimed_by = 'bench-history'
"""
LOAD_QUEUED = f"""
INSERT INTO django_strait_jobrun ({COLUMNS})
SELECT %(job)s, '{{}}', 'queued', 0, 0, 0, 'default', now(), '', NULL, NULL, NULL, false,
       NULL, '', '', '', 0, '', now(), now(), ''
FROM generate_series(1, %(n)s)
"""


def fresh_database(db_url: str) -> None:
    import psycopg

    base, name = db_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def one(sql: str, params=None):
    from django.db import connection

    with connection.cursor() as c:
        c.execute(sql, params)
        return c.fetchone()[0]


def queued() -> int:
    return one("SELECT count(*) FROM django_strait_jobrun WHERE status = 'queued'")


def rate_over(seconds: float | None, until=None) -> dict:
    """Runs/s drained: over ``seconds``, or until ``until()`` says stop."""
    first, t0 = queued(), time.perf_counter()
    while True:
        time.sleep(0.5)
        elapsed = time.perf_counter() - t0
        if (seconds is not None and elapsed >= seconds) or (until is not None and until()):
            break
    left = queued()
    return {"runs": first - left, "seconds": round(elapsed, 2),
            "runs_per_s": round((first - left) / elapsed)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=1_000_000)
    ap.add_argument("--queued", type=int, default=400_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--db", default=DEFAULT_DB)
    args = ap.parse_args()
    fresh_database(args.db)
    os.environ.update(DATABASE_URL=args.db, DJANGO_SETTINGS_MODULE="bench.settings",
                      STRAIT_PARTITION_RUNS="false", STRAIT_RETENTION_DAYS="36500")  # fmt: skip
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from django_strait.models import Job

    call_command("migrate", verbosity=0)
    make_jobs(None)
    job = Job.objects.get(name="bench-noop").pk
    out: dict = {"history": args.history, "queued": args.queued, "days": args.days,
                 "load": [os.getloadavg()[0]]}  # fmt: skip
    t0 = time.perf_counter()
    with connection.cursor() as c:
        c.execute(LOAD_HISTORY, {"job": job, "n": args.history, "days": args.days})
        c.execute(LOAD_ATTEMPTS)
        c.execute(LOAD_QUEUED, {"job": job, "n": args.queued})
        c.execute("VACUUM ANALYZE django_strait_jobrun")
        c.execute("VACUUM ANALYZE django_strait_runattempt")
    out["load_s"] = round(time.perf_counter() - t0, 1)
    runs_before = one("SELECT count(*) FROM django_strait_jobrun")
    worker = spawn_worker(args.concurrency, 100, ["--worker-id", "upgrade-1"])
    try:
        while queued() == args.queued:
            time.sleep(0.1)
        out["drain_before"] = rate_over(10)
        command = subprocess.Popen(
            [sys.executable, "-m", "django", "strait_partition", "--batch-size",
             str(args.batch_size), "--in-one-go-below", "0"],
            cwd=ROOT, env={**os.environ, "STRAIT_PARTITION_RUNS": "true", "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        began = time.perf_counter()
        out["drain_during"] = rate_over(None, until=lambda: command.poll() is not None)
        said = command.communicate()[0]
        out["move_s"] = round(time.perf_counter() - began, 1)
        if command.returncode != 0:
            raise SystemExit(f"strait_partition failed:\n{said}")
        out["locked_ms"] = int(re.search(r"the queue was locked (\d+) ms", said)[1])
        out["steps"] = [line for line in said.splitlines() if line and not line.startswith(" ")]
        out["drain_after"] = rate_over(None, until=lambda: queued() == 0)
    finally:
        stop(worker)
    worker = spawn_worker(args.concurrency, 100, ["--worker-id", "upgrade-2"])
    try:
        with connection.cursor() as c:
            c.execute(LOAD_QUEUED, {"job": job, "n": args.queued // 4})
        while queued() == args.queued // 4:
            time.sleep(0.1)
        out["drain_restarted"] = rate_over(None, until=lambda: queued() == 0)
    finally:
        stop(worker)
    out["partitioned"] = one(
        "SELECT relkind = 'p' FROM pg_class WHERE relname = 'django_strait_jobrun'"
    )
    out["runs"] = one("SELECT count(*) FROM django_strait_jobrun")
    out["duplicates"] = out["runs"] - one("SELECT count(DISTINCT id) FROM django_strait_jobrun")
    out["lost"] = runs_before + args.queued // 4 - out["runs"]
    out["executed_twice"] = one(
        "SELECT count(*) FROM (SELECT run_id FROM django_strait_runattempt "
        "WHERE worker LIKE 'upgrade-%%' GROUP BY run_id HAVING count(*) > 1) AS t"
    )
    out["load"].append(os.getloadavg()[0])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
