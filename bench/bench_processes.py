#!/usr/bin/env python
"""Process execution on this machine (docs/process-execution.md), as one JSON object.

    python bench/bench_processes.py [--n-cpu 400] [--n-noop 2000] [--reps 3] [--only ...]

Phases (each a median over ``--reps``):
  cpu          N runs of a CPU-bound handler (~5 ms of pure Python each), drained by one
               worker: on its threads, then with --processes 2 (steady runs/s)
  noop         N no-op runs: thread mode vs process mode (--processes 2), steady runs/s
  child_start  how long a child takes to be ready: spawned (``python -m``, Django set up
               in the child: what the pool does) vs forked from a process that has
               Django set up, a database connection open and threads running (what
               the pool does not do), and what a forked child does to the parent's
               connection when it closes the one it inherited

The database is ``DATABASE_URL`` (default: PostgreSQL database ``strait_bench`` on
127.0.0.1, created if missing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time

from bench_worker import DEFAULT_DB, drain, setup_django, summarize

CPU_MS = 5


def make_process_jobs() -> None:
    """The bench's process jobs, and the CPU-bound job on threads for comparison."""
    from django_strait.models import Job

    for name, handler, execution in (
        ("bench-noop", "bench.jobs.noop", "thread"),
        ("bench-noop-process", "bench.jobs.noop", "process"),
        ("bench-cpu-thread", "bench.jobs.cpu", "thread"),
        ("bench-cpu-process", "bench.jobs.cpu", "process"),
    ):
        Job.objects.update_or_create(
            name=name, defaults={"handler": handler, "endpoint_url": "", "execution": execution}
        )


def calibrate(ms: float) -> int:
    """How many loops of the CPU handler's work take ``ms`` milliseconds here, alone."""
    from bench.jobs import work

    began = time.perf_counter()
    work(200)
    per_loop = (time.perf_counter() - began) / 200
    return max(1, round(ms / 1000 / per_loop))


def cpu_phase(n: int, reps: int) -> dict:
    loops = calibrate(CPU_MS)
    out: dict = {"loops_per_run": loops}
    for mode, job, extra in (
        ("threads", "bench-cpu-thread", []),
        ("processes_2", "bench-cpu-process", ["--processes", "2"]),
    ):
        results = [drain(job, n, 100, 100, extra, payload={"loops": loops}) for _ in range(reps)]
        out[mode] = summarize([r.get("steady_runs_per_s") for r in results])
    return out


def noop_phase(n: int, reps: int) -> dict:
    out = {}
    for mode, job, extra in (
        ("thread", "bench-noop", []),
        ("process_2", "bench-noop-process", ["--processes", "2"]),
    ):
        results = [drain(job, n, 100, 100, extra) for _ in range(reps)]
        out[mode] = summarize([r.get("steady_runs_per_s") for r in results])
    return out


def child_start(reps: int) -> dict:
    from django.db import connection, connections

    from django_strait.worker.process.pool import ProcessPool

    async def spawn_times() -> list[float]:
        pool = ProcessPool(
            asyncio.get_running_loop(), size=1, max_runs=1, max_result_bytes=65536,
            settings_module=os.environ["DJANGO_SETTINGS_MODULE"],
            databases={a: connections[a].settings_dict["NAME"] for a in connections},
        )  # fmt: skip
        times = []
        for _ in range(reps):
            began = time.perf_counter()
            child = await pool._spawn()
            times.append(time.perf_counter() - began)
            pool._retire(child)
        await pool.close()
        return times

    spawned = asyncio.run(spawn_times())
    # A worker's state when it would fork: a connection open, threads running.
    connection.ensure_connection()
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, daemon=True)
    busy.start()
    forked = []
    for _ in range(reps):
        read, write = os.pipe()
        began = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: drop the inherited connection object without closing it
            connection.connection = None
            os.write(write, b"r")
            os._exit(0)
        os.read(read, 1)
        forked.append(time.perf_counter() - began)
        os.waitpid(pid, 0)
        os.close(read)
        os.close(write)
    stop.set()
    return {
        "spawned_ready_ms": statistics.median(spawned) * 1000,
        "forked_ready_ms": statistics.median(forked) * 1000,
        "forked_child_closing_its_inherited_connection_breaks_the_parents": _fork_breaks(),
    }


def _fork_breaks() -> bool:
    """Fork with an open connection; the child closes what it inherited, as Django would."""
    from django.db import connection

    connection.ensure_connection()
    pid = os.fork()
    if pid == 0:
        try:
            connection.close()  # PostgreSQL: sends Terminate on the parent's socket
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return False
    except Exception:
        connection.close()
        return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-cpu", type=int, default=400)
    ap.add_argument("--n-noop", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="cpu,noop,child_start")
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    args = ap.parse_args()
    setup_django(args.db)
    make_process_jobs()
    from django.db import connection

    phases = set(args.only.split(","))
    out: dict = {"database": connection.vendor, "cpus": os.cpu_count(), "reps": args.reps}
    if "cpu" in phases:
        out["cpu_bound_5ms_runs_per_s"] = cpu_phase(args.n_cpu, args.reps)
    if "noop" in phases:
        out["noop_runs_per_s"] = noop_phase(args.n_noop, args.reps)
    if "child_start" in phases:
        out["child_start"] = child_start(args.reps)
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
