#!/usr/bin/env python
"""The plans of the claim, start and record under a held horizon, with their buffers.

    python bench/explain_claim.py [--queued 30000] [--done 20000] [--priorities 0]
                                  [--no-hold] [--analyze] [--db URL]

Queues ``--queued`` no-op runs (spread over ``--priorities``, e.g. ``0,5``), opens
another connection holding a REPEATABLE READ snapshot (unless ``--no-hold``), then
claims, starts and records ``--done`` of them ten at a time through the storage
backend as a worker does (with its claim floors where this version has them); with
``--analyze``, then runs ``VACUUM (ANALYZE)`` on the runs table from a third connection,
as the leader's vacuum duty does, while the snapshot is still held. Then,
in a transaction rolled back at the end, it runs the claim, the start and the
record once more under ``EXPLAIN (ANALYZE, BUFFERS)`` and prints each plan, and a
JSON line of each statement's time and shared buffers. Runs the same against an
older checkout (``PYTHONPATH=<checkout>``), for a before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time

from bench_history import hold_snapshot
from bench_worker import DEFAULT_DB, clear, make_jobs, setup_django

WORKER = "explain-worker"


class Explained(Exception):
    """Raised by the explaining backend once it has its plan."""


def explaining_backend(alias: str, plans: dict[str, str], name: str):
    """A PostgreSQL backend whose next statement is run under EXPLAIN and kept in ``plans``."""
    from django.db import connections

    from django_strait.storage import PostgresStorage
    from django_strait.storage.sql import server_bound_cursor

    class Explaining(PostgresStorage):
        def _execute(self, sql, params, **options):
            with server_bound_cursor(connections[self.alias]) as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
                plans[name] = "\n".join(row[0] for row in cursor.fetchall())
            raise Explained

    return Explaining(alias)


def floors_or_none():
    try:
        from django_strait.storage.floors import ClaimFloors
    except ImportError:  # a version before the claim floors
        return None
    return ClaimFloors(rescan=3600)


def claim_kwargs(floors) -> dict:
    return {"floors": floors} if floors is not None else {}


def work(storage, n: int, floors) -> None:
    """Claim, start and record ``n`` runs ten at a time, as a worker does."""
    from django.utils import timezone

    from django_strait.rules.states import Transition
    from django_strait.storage import Record, RecordBatch
    from django_strait.transitions import claim_and_start, record

    done = 0
    while done < n:
        runs = claim_and_start(WORKER, limit=10, storage=storage, **claim_kwargs(floors))
        if not runs:
            break
        now = timezone.now()
        recs = [
            Record(r.id, r.attempt, Transition.COMPLETE, now, now, 1, "succeeded", job_id=r.job_id)
            for r in runs
        ]
        record(RecordBatch(WORKER, recs), storage=storage)
        done += len(runs)


def explain_all(storage, floors) -> dict[str, str]:
    """The claim, start and record of one batch under EXPLAIN, rolled back."""
    from django.db import transaction
    from django.utils import timezone

    from django_strait.rules.states import Transition
    from django_strait.storage import Record, RecordBatch

    plans: dict[str, str] = {}
    alias = storage.alias

    def explain(name, call):
        try:
            call(explaining_backend(alias, plans, name))
        except Explained:
            pass

    with transaction.atomic(using=alias):
        now = timezone.now()
        kw = claim_kwargs(floors)
        explain("claim", lambda s: s.claim(WORKER, queues=(), limit=10, now=now, **kw))
        runs = storage.claim(WORKER, queues=(), limit=10, now=now, **kw)
        explain("start", lambda s: s.start(WORKER, runs, now=now))  # EXPLAIN ANALYZE: started
        recs = [
            Record(
                r.id, r.attempt + 1, Transition.COMPLETE, now, now, 1, "succeeded", job_id=r.job_id
            )
            for r in runs
        ]
        explain("record", lambda s: s.record(RecordBatch(WORKER, recs)))
        transaction.set_rollback(True, using=alias)
    return plans


def vacuum_analyze(db_url: str) -> None:
    """``VACUUM (ANALYZE)`` the runs table on a connection of its own, as the leader does."""
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(os.environ.get("EXPLAIN_VACUUM", "VACUUM (ANALYZE)") + " django_strait_jobrun")


def figures(plan: str) -> dict:
    """Execution time and the top node's shared buffers (hit + read) of a plan."""
    ms = re.search(r"Execution Time: ([\d.]+) ms", plan)
    buffers = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    return {
        "ms": float(ms[1]) if ms else None,
        "buffers": int(buffers[1]) + int(buffers[2] or 0) if buffers else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queued", type=int, default=30_000)
    ap.add_argument("--done", type=int, default=20_000)
    ap.add_argument("--priorities", default="0")
    ap.add_argument("--no-hold", action="store_true")
    ap.add_argument("--analyze", action="store_true", help="VACUUM (ANALYZE) before explaining")
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    setup_django(args.db)
    from django.db import connection

    from django_strait import trigger_many
    from django_strait.storage import backend

    clear()
    make_jobs(None)
    trigger_many("bench-noop", [{"i": i} for i in range(args.queued)])
    priorities = [int(p) for p in args.priorities.split(",")]
    with connection.cursor() as c:
        c.execute(
            "UPDATE django_strait_jobrun SET priority = (%s::int[])[1 + id %% %s]",
            [priorities, len(priorities)],
        )
        c.execute("VACUUM ANALYZE django_strait_jobrun")
    held = None if args.no_hold else hold_snapshot(args.db)
    storage, floors = backend(), floors_or_none()
    try:
        t = time.perf_counter()
        work(storage, args.done, floors)
        worked = time.perf_counter() - t
        if args.analyze:
            vacuum_analyze(args.db)
        plans = explain_all(storage, floors)
    finally:
        if held is not None:
            held.close()
    for name, plan in plans.items():
        print(f"-- {name}\n{plan}\n")
    print(
        json.dumps(
            {
                "held": held is not None,
                "analyzed": args.analyze,
                "runs_done_per_s": args.done / worked,
                **{name: figures(plan) for name, plan in plans.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
