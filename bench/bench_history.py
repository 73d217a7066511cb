#!/usr/bin/env python
"""A steady trigger rate while another connection holds a snapshot: does the queue stay flat?

    python bench/bench_history.py [--rate 300] [--minutes 12] [--hold 2-10]
                                  [--concurrency 10] [--db URL]

One worker (``--concurrency``) runs no-op Python runs that this process triggers one
``trigger()`` at a time at ``--rate`` per second for ``--minutes``. From the start of
minute ``a`` to the start of minute ``b`` of ``--hold a-b`` another connection holds a
REPEATABLE READ transaction open (after one read), so that no vacuum can remove the
rows dead since: every claimed run leaves one. Per minute it prints, as JSON:
runs triggered and done (throughput), the backlog at the minute's end (triggered,
not yet done), the worker's claim time (mean and p95 of the claim statement's round
trip, from ``bench/claim_timer.py``) and the p95 trigger-to-done latency of the runs
triggered in that minute (runs not done by the end count as not done). The figure
that matters: minute ``b`` against minute ``a``.

The database is ``--db`` (default: PostgreSQL ``strait_bench_history`` on 127.0.0.1,
created if missing); the server's own autovacuum setting is left as it is.
Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_worker import clear, make_jobs, setup_django, spawn, stop

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_history"


def spawn_worker(concurrency: int, claims_log: str) -> subprocess.Popen:
    """The worker as ``run_strait_worker`` would run, its claims timed."""
    cmd = [sys.executable, "-m", "bench.claim_timer", claims_log, "run_strait_worker"]
    cmd += ["--concurrency", str(concurrency)]
    return spawn(cmd)


def hold_snapshot(db_url: str):
    """Open a REPEATABLE READ transaction and read once: its snapshot holds the horizon."""
    import psycopg

    conn = psycopg.connect(db_url)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM django_strait_job").fetchone()
    return conn


def trigger_steadily(rate: float, seconds: float, on_minute) -> list[float]:
    """Trigger ``rate`` runs a second for ``seconds``; call ``on_minute(m)`` at each minute."""
    from django_strait import trigger

    t0 = time.time()
    sent = 0
    minute = 0
    starts = [t0]
    while (elapsed := time.time() - t0) < seconds:
        if int(elapsed // 60) > minute:
            minute = int(elapsed // 60)
            starts.append(t0 + 60 * minute)
            on_minute(minute)
        due = int(rate * elapsed)
        if sent >= due:
            time.sleep(0.001)
            continue
        trigger("bench-noop", {"i": sent})
        sent += 1
    return starts


def per_minute(t0: float, minutes: int, claims_log: str, end: float) -> list[dict]:
    """The figures of each minute, from the runs' timestamps and the worker's claim log."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(
            """
            SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8
            FROM django_strait_jobrun
            """
        )
        runs = c.fetchall()
    claims = [tuple(map(float, line.split())) for line in Path(claims_log).read_text().splitlines()]
    out = []
    for m in range(minutes):
        lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
        made = [(c, f) for c, f in runs if lo <= c < hi]
        waits = sorted((f - c) for c, f in made if f is not None)
        ms = sorted(ms for t, ms, _ in claims if lo <= t < hi)
        out.append(
            {
                "minute": m + 1,
                "triggered": len(made),
                "done": sum(1 for _, f in runs if f is not None and lo <= f < hi),
                "backlog_at_end": sum(
                    1 for c, f in runs if c < min(hi, end) and (f is None or f >= hi)
                ),
                "not_done_by_end": sum(1 for _, f in made if f is None),
                "p95_trigger_to_done_ms": _p95(waits) * 1000 if waits else None,
                "claims": len(ms),
                "claim_ms_mean": statistics.fmean(ms) if ms else None,
                "claim_ms_p95": _p95(ms) if ms else None,
            }
        )
    return out


def _p95(values: list[float]) -> float:
    return values[min(len(values) - 1, int(0.95 * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--minutes", type=int, default=12)
    ap.add_argument("--hold", default="2-10", help="minutes a-b: the snapshot held from a to b")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    hold_from, hold_to = (int(x) for x in args.hold.split("-"))
    setup_django(args.db)
    from django.db import connections

    clear()
    make_jobs(None)
    connections.close_all()
    claims_log = tempfile.NamedTemporaryFile(prefix="claims-", suffix=".log", delete=False).name
    worker = spawn_worker(args.concurrency, claims_log)
    held = []

    def on_minute(m: int) -> None:
        if m == hold_from:
            held.append(hold_snapshot(args.db))
        if m == hold_to and held:
            held.pop().rollback()
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited, rc={worker.returncode}")

    try:
        time.sleep(3)  # the worker's start-up, outside the measured minutes
        t0 = time.time()
        trigger_steadily(args.rate, 60 * args.minutes, on_minute)
        end = time.time()
    finally:
        for conn in held:
            conn.close()
        stop(worker)
    minutes = per_minute(t0, args.minutes, claims_log, end)
    os.unlink(claims_log)
    a, b = minutes[hold_from - 1], minutes[hold_to - 1]

    def ratio(key: str) -> float | None:
        return b[key] / a[key] if a[key] and b[key] is not None else None

    print(
        json.dumps(
            {
                "rate": args.rate,
                "concurrency": args.concurrency,
                "hold_minutes": [hold_from, hold_to],
                "minutes": minutes,
                f"minute_{hold_to}_over_minute_{hold_from}": {
                    k: ratio(k) for k in ("claim_ms_mean", "claim_ms_p95", "p95_trigger_to_done_ms")
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
