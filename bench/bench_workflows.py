#!/usr/bin/env python
"""Time a 1,000-wide fan-out/fan-in workflow against the same number of plain runs.

    python bench/bench_workflows.py [--width 1000] [--reps 3] [--concurrency 100]

Each rep, in the same sitting and with ONE worker process each time:
  workflow   one root, ``--width`` children depending on it, one join depending on
             all of them (width + 2 no-op runs), triggered, then a worker spawned;
             timed to the workflow run's end
  plain      width + 2 no-op runs queued with trigger_many(), a worker spawned,
             timed to the last completion

Both report steady runs/s (first completion to last, from the runs' finished_at)
and end to end runs/s (worker spawn to the end, start-up included); the workflow
also its phases: ``fan_out_s`` (root finished to first child started),
``children_runs_per_s`` (the 1,000 children's drain) and ``fan_in_s`` (last child
finished to join started). Each ``ratio_*`` is a workflow median over the plain
runs' steady or end to end median. The database is
``DATABASE_URL`` (default: PostgreSQL ``strait_bench_wf`` on 127.0.0.1, created
if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_worker import (  # noqa: E402 - the bench scripts run as files, not modules
    clear,
    make_jobs,
    setup_django,
    spawn_worker,
    stop,
    summarize,
)

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_wf"
WORKFLOW = "bench-wide"


def define(width: int) -> None:
    from django_strait import define_workflow

    steps = [{"name": "root", "job": "bench-noop"}]
    steps += [{"name": f"s{i}", "job": "bench-noop", "depends_on": ["root"]} for i in range(width)]
    steps.append(
        {"name": "join", "job": "bench-noop", "depends_on": [f"s{i}" for i in range(width)]}
    )
    define_workflow(WORKFLOW, steps=steps)


def finished_span() -> tuple[int, float]:
    """Return how many runs completed and the seconds from the first completion to the last."""
    from django.db.models import Count, Max, Min

    from django_strait.models import JobRun

    row = JobRun.objects.filter(status="completed").aggregate(
        n=Count("id"), first=Min("finished_at"), last=Max("finished_at")
    )
    span = (row["last"] - row["first"]).total_seconds() if row["n"] else 0.0
    return row["n"], span


def timed(start, done, n: int, concurrency: int, batch: int) -> dict:
    """Queue the work with ``start()``, spawn a worker, wait for ``done()``; return the rates."""
    from django.db import connections

    clear()
    start()
    connections.close_all()
    t0 = time.perf_counter()
    proc = spawn_worker(concurrency, batch)
    try:
        while not done():
            if proc.poll() is not None:
                return {"error": f"worker exited rc={proc.returncode}"}
            if time.perf_counter() - t0 > 600:
                return {"error": "timeout"}
            time.sleep(0.02)
        elapsed = time.perf_counter() - t0
    finally:
        stop(proc)
    completed, span = finished_span()
    if completed != n:
        return {"error": f"{completed}/{n} runs completed"}
    return {
        "steady_runs_per_s": (n - 1) / span if span else None,
        "end_to_end_runs_per_s": n / elapsed,
        "end_to_end_s": elapsed,
    }


def workflow_rep(width: int, concurrency: int, batch: int) -> dict:
    from django_strait import trigger_workflow
    from django_strait.models import WorkflowRun

    def done() -> bool:
        return not WorkflowRun.objects.filter(status="running").exists()

    result = timed(lambda: trigger_workflow(WORKFLOW, {}), done, width + 2, concurrency, batch)
    statuses = list(WorkflowRun.objects.values_list("status", flat=True))
    if statuses != ["completed"] and "error" not in result:
        result["error"] = f"workflow run ended {statuses}"
    return result if "error" in result else {**result, **phases(width)}


def phases(width: int) -> dict:
    """Where the workflow's time went: fan-out, the children's drain, fan-in."""
    from django.db.models import Max, Min

    from django_strait.models import JobRun

    def times(**step):
        runs = JobRun.objects.filter(workflow_step_run__step__workflow__name=WORKFLOW, **step)
        return runs.aggregate(
            started=Min("started_at"), first=Min("finished_at"), last=Max("finished_at")
        )

    root, join = (
        times(workflow_step_run__step__name="root"),
        times(workflow_step_run__step__name="join"),
    )
    children = times(workflow_step_run__step__depends_on=["root"])
    drain = (children["last"] - children["first"]).total_seconds()
    return {
        # The parent's finish to the first child's start: queuing 1,000 steps in the
        # parent's record, then a worker claiming them.
        "fan_out_s": (children["started"] - root["last"]).total_seconds(),
        "children_runs_per_s": (width - 1) / drain if drain else None,
        # The last child's finish to the join's start: the last records, the join queued.
        "fan_in_s": (join["started"] - children["last"]).total_seconds(),
    }


def plain_rep(n: int, concurrency: int, batch: int) -> dict:
    from django_strait import trigger_many

    def done() -> bool:
        return finished_span()[0] >= n

    return timed(
        lambda: trigger_many("bench-noop", [{"i": i} for i in range(n)]),
        done, n, concurrency, batch,
    )  # fmt: skip


def report(raw: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for kind, reps in raw.items():
        out[kind] = {
            key: summarize([r.get(key) for r in reps])
            for key in (
                "steady_runs_per_s",
                "end_to_end_runs_per_s",
                "end_to_end_s",
                "fan_out_s",
                "children_runs_per_s",
                "fan_in_s",
            )
            if any(key in r for r in reps)
        }
        errors = [r["error"] for r in reps if "error" in r]
        if errors:
            out[kind]["errors"] = errors
    pairs = {
        "steady_runs_per_s": "steady_runs_per_s",
        "end_to_end_runs_per_s": "end_to_end_runs_per_s",
        "children_runs_per_s": "steady_runs_per_s",  # the fan-out's drain vs plain runs'
    }
    for key, plain_key in pairs.items():
        wf, plain = out["workflow"].get(key), out["plain"].get(plain_key)
        if wf and plain:
            out[f"ratio_{key}"] = wf["median"] / plain["median"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    setup_django(args.db)
    make_jobs(None)
    clear()  # a run left by an interrupted bench would keep its steps from changing
    define(args.width)
    raw: dict[str, list[dict]] = {"workflow": [], "plain": []}
    try:
        for _ in range(args.reps):
            # Alternated, so that a slower moment of a shared machine falls on both.
            raw["workflow"].append(workflow_rep(args.width, args.concurrency, args.batch_size))
            raw["plain"].append(plain_rep(args.width + 2, args.concurrency, args.batch_size))
    finally:
        clear()
    from django.db import connection

    out = {
        "database": connection.vendor,
        "width": args.width,
        "runs": args.width + 2,
        "reps": args.reps,
        "concurrency": args.concurrency,
        "batch_size": args.batch_size,
        **report(raw),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
