#!/usr/bin/env python
"""A steady trigger rate while another connection holds a snapshot: does the queue stay flat?

    python bench/bench_history.py [--rate 300] [--minutes 12] [--hold 2-10]
                                  [--concurrency 10] [--db URL]
    /tmp/peerbench/venv/bin/python bench/bench_history.py --system procrastinate [...]

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

``--system procrastinate`` runs procrastinate through the same minutes, as the peer
harness (``../shared/peer-bench``) sets it up: ``noop.defer()`` one at a time, one
``manage.py procrastinate worker --concurrency N``, the claim being its job manager's
``fetch_job`` (one job per call), triggered and done the job's ``deferred`` and
``succeeded`` events (their ``at``, the database's clock). Run it with the Python of a
venv holding the harness's requirements (``/tmp/peerbench/venv`` from its
``setup.sh``); it needs neither django-strait nor django-environ.

The database is ``--db`` (default: PostgreSQL ``strait_bench_history`` on 127.0.0.1, or
DATABASE_URL; for procrastinate ``strait_bench_history_procrastinate``, DATABASE_URL not
read; created if missing, then migrated); the server's own autovacuum setting is left
as it is. Traffic stays on 127.0.0.1.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_worker import clear, make_jobs, setup_django, spawn, stop

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_history"


@dataclass(frozen=True)
class System:
    """What differs between the systems run through the same minutes."""

    settings: str
    db: str
    worker: tuple[str, ...]  # the management command claim_timer runs
    held_table: str  # what the held snapshot's one read reads
    runs_sql: str  # every run's (triggered, done) in epoch seconds, done NULL if not yet
    prepare: Callable[[], None]  # empty the queue, make what it needs
    sender: Callable[[], Callable[[int], object]]  # the one-run trigger, imported once


def _strait_prepare() -> None:
    clear()
    make_jobs(None)


def _strait_sender() -> Callable[[int], object]:
    from django_strait import trigger

    return lambda i: trigger("bench-noop", {"i": i})


def _procrastinate_prepare() -> None:
    from django.db import connection

    # As the peer harness empties it, no ANALYZE after: with an empty table's statistics
    # (nothing renews them, autovacuum off) the worker's cached plan of
    # procrastinate_fetch_job_v2 nests two sequential scans, 1.9 s a fetch at 5,000 queued.
    with connection.cursor() as c:
        c.execute("TRUNCATE procrastinate_jobs RESTART IDENTITY CASCADE")


def _procrastinate_sender() -> Callable[[int], object]:
    from benchapp.tasks import noop

    return lambda i: noop.defer()


SYSTEMS = {
    "strait": System(
        settings="bench.settings",
        db=os.environ.get("DATABASE_URL", DEFAULT_DB),
        worker=("run_strait_worker",),
        held_table="django_strait_job",
        runs_sql="""
            SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8
            FROM django_strait_jobrun
        """,
        prepare=_strait_prepare,
        sender=_strait_sender,
    ),
    "procrastinate": System(
        settings="bench.procrastinate_settings",
        db=DEFAULT_DB + "_procrastinate",
        worker=("procrastinate", "worker"),
        held_table="procrastinate_workers",
        runs_sql="""
            SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'deferred'))::float8,
                   extract(epoch FROM min(at) FILTER (WHERE type = 'succeeded'))::float8
            FROM procrastinate_events GROUP BY job_id
        """,
        prepare=_procrastinate_prepare,
        sender=_procrastinate_sender,
    ),
}


def spawn_worker(
    concurrency: int, claims_log: str, command: tuple[str, ...] = ("run_strait_worker",)
) -> subprocess.Popen:
    """The worker as ``command`` (``run_strait_worker``) would run, its claims timed."""
    cmd = [sys.executable, "-m", "bench.claim_timer", claims_log, *command]
    cmd += ["--concurrency", str(concurrency)]
    return spawn(cmd)


def hold_snapshot(db_url: str, table: str = "django_strait_job"):
    """Open a REPEATABLE READ transaction and read once: its snapshot holds the horizon."""
    import psycopg

    conn = psycopg.connect(db_url)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return conn


def trigger_steadily(rate: float, seconds: float, on_minute, send) -> list[float]:
    """Call ``send(i)`` ``rate`` times a second for ``seconds``; ``on_minute(m)`` at each minute."""
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
        send(sent)
        sent += 1
    return starts


def per_minute(t0: float, minutes: int, claims_log: str, end: float, runs_sql: str) -> list[dict]:
    """The figures of each minute, from the runs' timestamps and the worker's claim log."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(runs_sql)
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
    ap.add_argument(
        "--system", choices=SYSTEMS, default="strait", help="procrastinate: in the peer venv"
    )
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--minutes", type=int, default=12)
    ap.add_argument("--hold", default="2-10", help="minutes a-b: the snapshot held from a to b")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument(
        "--db",
        help="default: DATABASE_URL or strait_bench_history on 127.0.0.1; "
        "procrastinate: strait_bench_history_procrastinate",
    )
    args = ap.parse_args()
    system = SYSTEMS[args.system]
    db = args.db or system.db
    hold_from, hold_to = (int(x) for x in args.hold.split("-"))
    setup_django(db, system.settings)
    from django.db import connections

    system.prepare()
    send = system.sender()
    connections.close_all()
    claims_log = tempfile.NamedTemporaryFile(prefix="claims-", suffix=".log", delete=False).name
    worker = spawn_worker(args.concurrency, claims_log, system.worker)
    held = []

    def on_minute(m: int) -> None:
        if m == hold_from:
            held.append(hold_snapshot(db, system.held_table))
        if m == hold_to and held:
            held.pop().rollback()
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited, rc={worker.returncode}")

    try:
        time.sleep(3)  # the worker's start-up, outside the measured minutes
        t0 = time.time()
        trigger_steadily(args.rate, 60 * args.minutes, on_minute, send)
        end = time.time()
    finally:
        for conn in held:
            conn.close()
        stop(worker)
    minutes = per_minute(t0, args.minutes, claims_log, end, system.runs_sql)
    os.unlink(claims_log)
    a, b = minutes[hold_from - 1], minutes[hold_to - 1]

    def ratio(key: str) -> float | None:
        return b[key] / a[key] if a[key] and b[key] is not None else None

    print(
        json.dumps(
            {
                "system": args.system,
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
