#!/usr/bin/env python
"""Finished history against the queue: a drain beside it, and pruning it (PostgreSQL).

    python bench/bench_prune.py [--history 3000000] [--n 10000] [--reps 4]
                                [--concurrency 100] [--batch-size 100]
                                [--prune-batch 1000] [--no-prune] [--prune-reps 2]
                                [--span 200000] [--span-lead 5]
                                [--prune-in thread|process] [--db URL]
                                [--layout plain|partitioned] [--tablespace NAME]
                                [--trace]

Four phases, printed as one JSON object:
  drain_empty        --n no-op runs drained by one worker on an empty install (the
                     database ``<--db>_empty``), --reps times
  drain_history      the same on ``--db``, with --history finished runs (completed
                     60 days ago, one attempt each) in the runs table, loaded by
                     generate_series SQL, not the ORM, then VACUUM ANALYZE (as a
                     steady install would have them); its drains alternate with
                     drain_empty's, the order swapped each rep. The figure that
                     matters: its runs/s against drain_empty's
  prune              ``strait_prune --older-than 30d`` (the whole history), timed:
                     seconds and runs/s. ``--prune-in thread`` (the default) calls
                     the command in a thread of this process, Django already loaded,
                     as the leader's pruning duty runs in a worker; ``process`` runs
                     ``manage.py strait_prune``, timed from spawn to exit, its
                     start-up (about 1 s of CPU) included. The drain workers' own
                     pruning duty is kept idle (STRAIT_RETENTION_DAYS is 100 years
                     for them)
  drain_spanning_prune
                     that prune started --span-lead s into a drain of --span runs:
                     the drain's runs/s from the prune's start over its seconds (2 s
                     at least) against the same drain's in windows as long just
                     before and just after ("loss"),
                     and the same windows of a drain with no prune just before it
                     ("control_loss": what a drain moves by itself), and
                     the whole drain's runs/s against the control's
                     ("whole_loss": a drain of --span runs with a prune in it
                     against one without, back to back); --prune-reps
                     times, the history loaded again for each, each drain
                     starting from a vacuumed table. The samples are
                     the drain's completed runs, read from the rollup the
                     record adds to, every 0.25 s and at the prune's start
                     and end
With ``--trace`` (``--prune-in thread`` only) the spanning drains are sampled every
0.02 s, and the prune's steps are timed in this process (the storage's prepare,
count, detach and finish of each day, and the row-by-row deletes after them; inside
the finish, the day's count and the prune's commits):
``drain_spanning_prune.steps`` says for each step its seconds and the runs the drain
fell short in it against its pace in the 2 s before the prune (``short``), and
``after`` the same for the 1 s after the prune.
Both databases are made afresh, in tablespace ``--tablespace`` if given (made
beforehand by the operator: a directory of another filesystem, to compare the
prune on filesystems mounted differently; the WAL stays in the data directory).
With ``--layout plain`` they keep the plain runs
table (``STRAIT_PARTITION_RUNS=false``); with ``--layout partitioned`` they are as
migration 0020 leaves a new install, partitioned by status class, history and
attempts by day (``storage.postgres.layout``), the days of the loaded history made
before it is loaded: the prune then drops whole days. On the plain table the prune
deletes row by row for minutes: raise --span to outlast it.
Each drain reports steady runs/s (first completion to last) and the worker's CPU
ms per run from /proc, which a loaded machine moves less. ``load`` is the
1-minute load average at the start and the end.

The databases are ``--db`` and ``<--db>_empty`` (default: PostgreSQL
``strait_bench_prune`` on 127.0.0.1, created if missing, emptied at the end); the server's autovacuum setting is left
as it is. Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import sys
import threading
import time

from bench_worker import (
    clear,
    cpu_seconds,
    create_pg_database,
    make_jobs,
    setup_django,
    spawn,
    spawn_worker,
    stop,
    summarize,
)

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_prune"

#: One statement loads the finished runs, one their attempts: no ORM, no Python per row.
LOAD_RUNS = """
INSERT INTO django_strait_jobrun (
    job_id, payload, status, attempt, attempts_before_replay, priority, queue,
    available_at, claimed_by, dequeued_at, started_at, finished_at, cancel_requested,
    result, last_error, error_type, endpoint_used, replay_count, replayed_by,
    created_at, updated_at, preset
)
SELECT %(job)s, jsonb_build_object('i', g), 'completed', 1, 0, 0, 'default',
       t, 'bench-history', t, t, t + interval '5 ms', false,
       'null'::jsonb, '', '', '', 0, '', t, t, ''
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - interval '60 days' - g * interval '1 ms' AS t) AS at
"""
LOAD_ATTEMPTS = """
INSERT INTO django_strait_runattempt (
    run_id, number, endpoint, started_at, finished_at, duration_ms, outcome,
    error_type, error, response_excerpt, worker, preset
)
SELECT id, 1, '', started_at, finished_at, 5, 'succeeded', '', '', '', 'bench-history', ''
FROM django_strait_jobrun WHERE claimed_by = 'bench-history'
"""


def load_history(n: int) -> float:
    """Load ``n`` finished runs and their attempts; return the seconds it took."""
    from django.db import connection

    from django_strait.models import Job

    job = Job.objects.get(name="bench-noop").pk
    t0 = time.perf_counter()
    with connection.cursor() as c:
        c.execute(LOAD_RUNS, {"job": job, "n": n})
        c.execute(LOAD_ATTEMPTS)
        c.execute("VACUUM ANALYZE django_strait_jobrun")
        c.execute("VACUUM ANALYZE django_strait_runattempt")
    return time.perf_counter() - t0


def max_run_id() -> int:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT coalesce(max(id), 0) FROM django_strait_jobrun")
        return c.fetchone()[0]


def done_since(first_id: int) -> int:
    """Completed runs with an id above ``first_id``: this drain's, not the history's."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(
            "SELECT count(*) FROM django_strait_jobrun WHERE id > %s AND status = 'completed'",
            [first_id],
        )
        return c.fetchone()[0]


#: Seconds between the spanning drains' samples of their completed runs.
SAMPLE_EVERY = 0.25
#: Seconds between samples with --trace.
TRACE_EVERY = 0.02
#: The storage methods --trace times, one step each call.
TRACED = ("prepare_history", "history_days", "detach_history_day", "finish_history_day")
#: (step, start, end) of each traced call of the running prune, perf_counter seconds.
STEPS: list[tuple[str, float, float]] = []


def recorded() -> int:
    """Completed runs the workers have recorded, from the per-minute rollup their record
    statement adds to (the loaded history has none): a lookup of a few rows, where a
    count of the drain's runs read up to 200,000 every sample (0.1 s of a core)."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute(
            "SELECT coalesce(sum(count), 0) FROM django_strait_runrollup WHERE status = 'completed'"
        )
        return int(c.fetchone()[0])


def history_left() -> int:
    """Loaded history runs the prune has not deleted (0 when it did its job)."""
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM django_strait_jobrun WHERE claimed_by = 'bench-history'")
        return c.fetchone()[0]


def drain(n: int, concurrency: int, batch: int) -> dict:
    """Queue ``n`` no-op runs beside whatever the table holds and drain them with one worker."""
    from django.db import connections

    from django_strait import trigger_many

    first_id = max_run_id()
    trigger_many("bench-noop", [{"i": i} for i in range(n)])
    connections.close_all()
    t0 = time.perf_counter()
    proc = spawn_worker(concurrency, batch)
    first = cpu_first = None
    first_done = 0
    try:
        while (d := done_since(first_id)) < n:
            t = time.perf_counter()
            if d and first is None:
                first, first_done, cpu_first = t, d, cpu_seconds(proc.pid)
            if proc.poll() is not None:
                return {"error": f"worker exited rc={proc.returncode}"}
            if t - t0 > 600:
                return {"error": f"timeout: {d}/{n}"}
            time.sleep(0.02)
        t = time.perf_counter()
        cpu = cpu_seconds(proc.pid)
    finally:
        stop(proc)
    if first is None or cpu is None or cpu_first is None or n <= first_done:
        return {"error": "drained before the first poll: raise --n"}
    return {
        "steady_runs_per_s": (n - first_done) / (t - first),
        "worker_steady_cpu_ms_per_run": (cpu - cpu_first) * 1000 / (n - first_done),
    }


def figures(drains: list[dict]) -> dict:
    """Median, min and max of each drain figure, and the errors if any."""
    out = {
        key: summarize([d.get(key) for d in drains])
        for key in ("steady_runs_per_s", "worker_steady_cpu_ms_per_run")
    }
    errors = [d["error"] for d in drains if "error" in d]
    return {**out, "drains": len(drains), **({"errors": errors} if errors else {})}


def prune_spanning_drains(args) -> tuple[dict, dict]:
    """Prune the history in the middle of a long drain, beside a drain with no prune; ``--prune-reps`` times.

    Each rep drains ``--span`` runs twice with one worker, counting completed runs
    every 0.25 s: first with nothing else running (the control, history in place),
    then with ``strait_prune --older-than 30d`` started ``--span-lead`` seconds
    after the first completion (``--prune-in``). The drain's runs/s from the
    prune's start is set against its own just before and after (:func:`windows`),
    and the control is read in the same windows: its "loss" is what the drain
    moves by itself. The history is loaded again before each rep after the first.
    """
    reps, control, prunes = [], [], []
    for rep in range(args.prune_reps):
        if rep:
            use(args.db)
            if args.layout == "partitioned":
                make_history_days()  # the last rep's prune dropped them
            load_history(args.history)
        quiet = spanning_drain(args, prune=False)
        pruned = spanning_drain(args, prune=True)
        if "error" in quiet or "error" in pruned:
            reps.append({"errors": [d["error"] for d in (quiet, pruned) if "error" in d]})
            continue
        start, end = pruned["window"]
        first = quiet["first_completion"] - pruned["first_completion"]
        control.append(windows(quiet["samples"], start + first, end + first))
        reps.append(windows(pruned["samples"], start, end))
        if reps[-1]["whole"] and control[-1]["whole"]:
            reps[-1]["whole_loss"] = 1 - reps[-1]["whole"] / control[-1]["whole"]
        if args.trace:
            reps[-1]["steps"] = steps_short(pruned["samples"], pruned["steps"], start, end)
        prunes.append({"seconds": end - start, "rc": pruned["rc"], "history_left": history_left()})
    prune = {
        "runs": args.history,
        "seconds": summarize([p["seconds"] for p in prunes]),
        "runs_per_s": summarize([args.history / p["seconds"] for p in prunes]),
        "reps": prunes,
    }
    spanning = {
        "loss": summarize([r.get("loss") for r in reps]),
        "whole_loss": summarize([r.get("whole_loss") for r in reps]),
        "control_loss": summarize([c.get("loss") for c in control]),
        "reps": reps,
        "control": control,
    }
    return prune, spanning


def spanning_drain(args, prune: bool) -> dict:
    """Drain ``--span`` runs with one worker, sampled; with ``prune``, strait_prune runs in the middle."""
    from django.db import connections

    from django_strait import trigger_many

    # Both drains of a rep start from a vacuumed table: the control left 200,000 dead
    # versions in the live leaf, and the drain after it ran 6,000 runs/s before the
    # prune where the control, after the history's VACUUM, ran 9,500 (11 reps of 13).
    # And from a checkpoint: the control follows the history's load (about 1 GB of
    # WAL), whose checkpoint would otherwise fall in the control and not in the drain
    # with the prune, and flatter the prune.
    with connections["default"].cursor() as cursor:
        cursor.execute("VACUUM django_strait_jobrun")
        cursor.execute("CHECKPOINT")
    base = recorded()
    trigger_many("bench-noop", [{"i": i} for i in range(args.span)])
    connections.close_all()
    proc = spawn_worker(args.concurrency, args.batch_size)
    samples: list[tuple[float, int]] = []
    first = pruner = rc = None
    window: list[float] = []
    try:
        t0 = next_sample = time.perf_counter()
        while True:
            t = time.perf_counter()
            edge = False
            if prune and first is not None and not window and t - first >= args.span_lead:
                STEPS.clear()
                pruner = start_prune(args.prune_in)
                window.append(t)
                edge = True  # a sample at the window's start
            elif pruner is not None and len(window) == 1 and pruner.poll() is not None:
                window.append(t)
                rc = pruner.returncode
                edge = True  # and at its end
            if edge or t >= next_sample:
                t = time.perf_counter()  # the count's snapshot is taken as it starts
                done = recorded() - base
                samples.append((t, done))
                next_sample = t + (TRACE_EVERY if args.trace else SAMPLE_EVERY)
                if done >= args.span:
                    break
                if first is None and done:
                    first = t
            if proc.poll() is not None:
                return {"error": f"worker exited rc={proc.returncode}"}
            if t - t0 > 900:
                return {"error": f"timeout: {samples[-1][1]}/{args.span}"}
            time.sleep(0.02)
    finally:
        stop(proc)
        if pruner is not None:
            pruner.wait() if args.prune_in == "thread" else stop(pruner)
    if prune and len(window) != 2:
        return {"error": "the drain ended before the prune: raise --span"}
    return {"samples": samples, "first_completion": first, "window": window, "rc": rc,
            "steps": list(STEPS)}  # fmt: skip


def trace_steps() -> None:
    """Time each call of the prune's storage steps and row-by-row batches into STEPS; inside
    the finish of a day, its count and the prune thread's commits (which remove its files)."""
    import functools

    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    from django_strait.duties.pruner import Pruner
    from django_strait.storage.postgres import PostgresStorage

    def timed(cls: type, name: str, step_of) -> None:
        """Wrap ``cls.name``: each call whose ``step_of(args)`` names a step goes into STEPS."""
        method = getattr(cls, name)

        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if step := step_of(args):
                    STEPS.append((step, t, time.perf_counter()))

        setattr(cls, name, wrapper)

    for name in TRACED:
        timed(PostgresStorage, name, lambda args, name=name: name)
    timed(Pruner, "_delete_batch", lambda args: "delete_batch")
    day_count = "SELECT count(*) FROM django_strait_jobrun_p"
    timed(
        CursorWrapper,
        "execute",
        lambda args: "finish.count" if str(args[1]).startswith(day_count) else None,
    )
    timed(
        BaseDatabaseWrapper,
        "_commit",
        lambda args: "commit" if isinstance(threading.current_thread(), _PruneThread) else None,
    )


def steps_short(samples: list[tuple[float, int]], steps: list, start: float, end: float) -> dict:
    """Each step's seconds and the runs the drain fell short in it, against its pace
    in the 2 s before the prune; the rest of the prune's window, and the 1 s after it."""
    pace = (done_at(samples, start) - done_at(samples, start - 2.0)) / 2.0

    def short(lo: float, hi: float) -> float:
        return pace * (hi - lo) - (done_at(samples, hi) - done_at(samples, lo))

    out: dict = {"pace": pace}
    for step, lo, hi in steps:
        got = out.setdefault(step, {"calls": 0, "seconds": 0.0, "short": 0.0})
        got["calls"] += 1
        got["seconds"] += hi - lo
        got["short"] += short(lo, hi)
    # Steps named "x.y" lie inside another step, and so do the finish's commits.
    outer = [(step, lo, hi) for step, lo, hi in steps if "." not in step and step != "commit"]
    out["rest_of_prune"] = {
        "seconds": end - start - sum(hi - lo for _, lo, hi in outer),
        "short": short(start, end) - sum(short(lo, hi) for _, lo, hi in outer),
    }
    out["after"] = {"seconds": 1.0, "short": short(end, end + 1.0)}
    return out


class _PruneThread(threading.Thread):
    """``strait_prune`` run by ``call_command`` in a thread of the bench's own process, Popen-like."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.returncode: int | None = None

    def run(self) -> None:
        from django.core.management import call_command
        from django.db import connections

        try:
            call_command("strait_prune", "--older-than", "30d", stdout=io.StringIO())
            self.returncode = 0
        except Exception as exc:  # noqa: BLE001 - reported as the prune's rc, the bench goes on
            print(f"strait_prune failed: {exc!r}", file=sys.stderr)
            self.returncode = 1
        finally:
            connections.close_all()

    def poll(self) -> int | None:
        return None if self.is_alive() else self.returncode

    def wait(self) -> int | None:
        self.join()
        return self.returncode


def start_prune(where: str):
    """Start ``strait_prune --older-than 30d``: in a thread here (Django loaded, as in a worker's
    pruning duty) or as the command in a process of its own (its start-up included)."""
    if where == "process":
        return spawn([sys.executable, "-m", "django", "strait_prune", "--older-than", "30d"])
    thread = _PruneThread()
    thread.start()
    return thread


def windows(samples: list[tuple[float, int]], start: float, end: float) -> dict:
    """Runs/s from the prune's start over ``max(its seconds, 2 s)``, and in windows as long
    just before it and just after that: the prune and what follows it (plans made again
    after a detach) against the drain's own pace; and over the whole drain (its first
    completion to its last second), which the caller sets against the control's."""
    width = max(end - start, 2.0)
    first_done = next(t for t, done in samples if done)
    last = samples[-1][0] - 1.0  # the drain's tail, its last runs in flight, left out

    def rate(lo: float, hi: float) -> float | None:
        return (done_at(samples, hi) - done_at(samples, lo)) / (hi - lo) if hi - lo >= 0.5 else None

    out = {
        "whole": rate(first_done, last),
        "during": rate(start, start + width),
        "before": rate(max(start - width, first_done), start),
        "after": rate(start + width, min(start + 2 * width, last)),
    }
    around = [r for r in (out["before"], out["after"]) if r is not None]
    if out["during"] is not None and around:
        out["loss"] = 1 - out["during"] / (sum(around) / len(around))
    return out


def done_at(samples: list[tuple[float, int]], t: float) -> float:
    """Completed runs at ``t``, interpolated between the samples around it."""
    for (t1, d1), (t2, d2) in itertools.pairwise(samples):
        if t1 <= t <= t2:
            return d1 + (d2 - d1) * (t - t1) / (t2 - t1) if t2 > t1 else d2
    return samples[0][1] if t < samples[0][0] else samples[-1][1]


def use(db_url: str) -> None:
    """Point this process's connection, and the workers it spawns, at ``db_url``."""
    from django.db import connections

    connections.close_all()
    connections["default"].settings_dict["NAME"] = db_url.rsplit("/", 1)[1]
    os.environ["DATABASE_URL"] = db_url


def prepare(db_url: str, layout: str = "plain", tablespace: str | None = None) -> None:
    """Create, migrate and empty ``db_url``, with the bench jobs (and its runs partitioned)."""

    import psycopg
    from django.core.management import call_command
    from django.db import connection, connections, transaction

    from django_strait.storage.postgres.layout import partition_runs

    # Made afresh: a database left by a run on the other layout would keep its layout.
    connections.close_all()
    base, name = db_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    create_pg_database(db_url, tablespace)
    use(db_url)
    call_command("migrate", verbosity=0)
    make_jobs(None)
    clear()
    if layout == "partitioned":
        with transaction.atomic(), connection.cursor() as cursor:
            partition_runs(cursor)  # done by the migration already: this checks it
        make_history_days()


def make_history_days() -> None:
    """Make the day partitions the loaded history falls in (a prune drops them), if missing.

    Without them the history would go to the default partition, which is pruned row by row.
    """
    import datetime as dt

    from django.db import connection, transaction

    from django_strait.storage.postgres.layout import make_ranges

    loaded = (dt.datetime.now(dt.UTC) - dt.timedelta(days=60)).date()
    with transaction.atomic(), connection.cursor() as cursor:
        make_ranges(cursor, [loaded - dt.timedelta(days=1), loaded])


def alternating_drains(args, empty_db: str) -> tuple[dict, dict]:
    """Drain on the empty database and beside the history in turn, the order swapped each rep."""
    drains: dict[str, list[dict]] = {args.db: [], empty_db: []}
    for rep in range(args.reps):
        order = (empty_db, args.db) if rep % 2 == 0 else (args.db, empty_db)
        for db_url in order:
            use(db_url)
            drains[db_url].append(drain(args.n, args.concurrency, args.batch_size))
    use(args.db)
    return figures(drains[empty_db]), figures(drains[args.db])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=3_000_000)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--prune-batch", type=int, default=1000)
    ap.add_argument("--no-prune", action="store_true", help="stop after drain_history")
    ap.add_argument("--prune-reps", type=int, default=2)
    ap.add_argument("--span", type=int, default=200_000, help="runs in each spanning drain")
    ap.add_argument("--span-lead", type=float, default=5.0)
    ap.add_argument(
        "--prune-in", choices=("thread", "process"), default="thread",
        help="thread: call_command here, Django loaded; process: the command's own start-up too",
    )  # fmt: skip
    ap.add_argument("--db", default=DEFAULT_DB)
    ap.add_argument("--layout", choices=("plain", "partitioned"), default="plain")
    ap.add_argument("--tablespace", help="an existing tablespace to make both databases in")
    ap.add_argument("--trace", action="store_true", help="time the prune's steps (module doc)")
    args = ap.parse_args()
    if args.trace and args.prune_in != "thread":
        ap.error("--trace: the prune's steps are timed in this process (--prune-in thread)")
    if not args.db.startswith("postgres"):
        ap.error("--db: PostgreSQL only (the history is loaded with generate_series)")
    empty_db = args.db + "_empty"
    os.environ["STRAIT_PRUNE_BATCH_SIZE"] = str(args.prune_batch)
    # A worker prunes when it starts (its pruning duty): the drain workers must not, or
    # drain_history would be a drain beside 100 batches of pruning. The prune phase says
    # --older-than 30d instead.
    os.environ["STRAIT_RETENTION_DAYS"] = "36500"
    if args.layout == "plain":
        # Migration 0020 partitions a new install unless told not to.
        os.environ["STRAIT_PARTITION_RUNS"] = "false"
    setup_django(args.db)
    if args.trace:
        trace_steps()
    out: dict = {"history": args.history, "n": args.n, "layout": args.layout,
                 "tablespace": args.tablespace, "load": [os.getloadavg()[0]]}  # fmt: skip
    try:
        prepare(empty_db, args.layout, args.tablespace)
        prepare(args.db, args.layout, args.tablespace)
        out["load_history_s"] = load_history(args.history)
        out["drain_empty"], out["drain_history"] = alternating_drains(args, empty_db)
        if not args.no_prune:
            out["prune"], out["drain_spanning_prune"] = prune_spanning_drains(args)
    finally:
        for db_url in (empty_db, args.db):
            use(db_url)
            clear()
    out["load"].append(os.getloadavg()[0])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
