#!/usr/bin/env python
"""Full-speed drain for half an hour: does the queue stay flat while dead rows pile up?

    python bench/bench_sustained.py [--minutes 30] [--concurrency 100] [--backlog 20000]
                                    [--db URL]

One worker (``--concurrency``, batches of 100) drains no-op Python runs for
``--minutes`` while this process keeps about ``--backlog`` runs queued with
``trigger_many()`` (5,000 per call), so the worker never waits for work. Every run
it claims, starts and records leaves dead rows and dead index entries behind; with
autovacuum off (as on this project's machines) only the leader's vacuum duty
(``VACUUM_DEAD_ROWS``) removes them.

Per minute it prints, as JSON: the runs the worker claimed, its claim time (mean and
p95 of the claim statement's round trip, from ``bench/claim_timer.py``), and the runs
table's live and dead rows and size (``pg_stat_user_tables``, summed over the leaves of a
partitioned table, its live leaf's apart). The figure that
matters: the last minute against the first (issue 19: within 1.5x).

The database is ``--db`` (default: PostgreSQL ``strait_bench_sustained`` on
127.0.0.1, created if missing, emptied before and after); the server's autovacuum
setting is left as it is. Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_history import spawn_worker
from bench_worker import clear, make_jobs, setup_django, stop

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_sustained"
CHUNK = 5000


def queued() -> int:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM django_strait_jobrun WHERE status = 'queued'")
        return c.fetchone()[0]


def table_state() -> dict:
    """The runs table's rows, dead rows, size and vacuums: summed over its leaves when it
    is partitioned (pg_partition_tree lists a plain table alone), with the live leaf's
    dead rows and size apart (where every claim, start and record leaves its versions)."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(
            """
            SELECT coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0),
                   coalesce(sum(pg_total_relation_size(s.relid)), 0),
                   coalesce(sum(vacuum_count + autovacuum_count), 0),
                   sum(n_dead_tup) FILTER (WHERE s.relname = 'django_strait_jobrun_live'),
                   sum(pg_total_relation_size(s.relid))
                       FILTER (WHERE s.relname = 'django_strait_jobrun_live')
            FROM pg_partition_tree('django_strait_jobrun') AS t
            JOIN pg_stat_user_tables AS s ON s.relid = t.relid
            """
        )
        live, dead, size, vacuums, live_leaf_dead, live_leaf_size = c.fetchone()
    state = {
        "live_rows": int(live),
        "dead_rows": int(dead),
        # Sums over the leaves come back as numeric (Decimal), which JSON cannot write.
        "size_mb": round(float(size) / 2**20, 1),
        "vacuums": int(vacuums),
    }
    if live_leaf_size is not None:
        state.update(live_leaf_dead_rows=int(live_leaf_dead),
                     live_leaf_mb=round(float(live_leaf_size) / 2**20, 1))  # fmt: skip
    return state


def feed(minutes: int, backlog: int, worker) -> tuple[float, list[dict]]:
    """Keep ``backlog`` runs queued for ``minutes``; return the start and each minute's table state."""
    from django_strait import trigger_many

    t0 = time.time()
    states = []
    while (elapsed := time.time() - t0) < 60 * minutes:
        if int(elapsed // 60) >= len(states) + 1:
            states.append(table_state())
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited, rc={worker.returncode}")
        if queued() < backlog:
            trigger_many("bench-noop", [{} for _ in range(CHUNK)])
        else:
            time.sleep(0.05)
    states.append(table_state())
    return t0, states


def per_minute(t0: float, minutes: int, claims_log: str, states: list[dict]) -> list[dict]:
    claims = [tuple(map(float, line.split())) for line in Path(claims_log).read_text().splitlines()]
    out = []
    for m in range(minutes):
        lo, hi = t0 + 60 * m, t0 + 60 * (m + 1)
        mine = [(ms, n) for t, ms, n in claims if lo <= t < hi]
        ms = sorted(ms for ms, _ in mine)
        out.append(
            {
                "minute": m + 1,
                "claimed": int(sum(n for _, n in mine)),
                "claims": len(mine),
                "claim_ms_mean": round(statistics.fmean(ms), 3) if ms else None,
                "claim_ms_p95": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 3) if ms else None,
                **(states[m] if m < len(states) else {}),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--backlog", type=int, default=20000)
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    setup_django(args.db)
    from django.db import connection, connections

    clear()
    make_jobs(None)
    with connection.cursor() as c:
        c.execute("SELECT current_setting('autovacuum')")
        autovacuum = c.fetchone()[0]
    connections.close_all()
    claims_log = tempfile.NamedTemporaryFile(prefix="claims-", suffix=".log", delete=False).name
    worker = spawn_worker(args.concurrency, claims_log)
    try:
        time.sleep(3)  # the worker's start-up, outside the measured minutes
        t0, states = feed(args.minutes, args.backlog, worker)
    finally:
        stop(worker)
    minutes = per_minute(t0, args.minutes, claims_log, states)
    os.unlink(claims_log)
    clear()
    first, last = minutes[0], minutes[-1]

    def ratio(key: str) -> float | None:
        return round(last[key] / first[key], 3) if first[key] and last[key] is not None else None

    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "concurrency": args.concurrency,
                "backlog": args.backlog,
                "autovacuum": autovacuum,
                "per_minute": minutes,
                "last_over_first": {
                    k: ratio(k) for k in ("claimed", "claim_ms_mean", "claim_ms_p95")
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
