#!/usr/bin/env python
"""Measure django-strait on this machine and print the figures as one JSON object.

    python bench/bench_worker.py [--n 5000] [--reps 3] [--concurrency 100] [--only drain_noop,...]

Phases (each a median over ``--reps``):
  bulk_trigger     trigger_many() of N runs (one INSERT per 5,000): runs/s
  trigger_one      N trigger() calls one at a time, in autocommit and inside one
                   transaction.atomic(): runs/s, and this process's CPU ms per call
  drain_noop       N no-op Python runs queued, ONE worker process spawned: runs/s
                   (steady: first to last completion; incl_startup: spawn to last)
  drain_http       N HTTP runs against a fast endpoint in its own process on 127.0.0.1
  latency          idle worker, one run at a time: trigger -> started_at, median and p95
  recorded         idle worker, one run at a time, each after --recorded-gap idle:
                   trigger() called -> the run seen completed from another connection,
                   --recorded-samples (1,000), median and p95, with the hops from the
                   run's own timestamps (trigger to started_at, started_at to
                   finished_at, finished_at to seen)
  rss              the drain worker's peak RSS (VmHWM) in MB
  --protect        off (default) | limits | all: the same drain with never-binding
                   limits (and a budget and a fallback): the protection layer's cost
  --webhook        every bench run notifies a webhook receiver (the fast endpoint, in
                   its own process on 127.0.0.1): the drain's cost with the outbox, and
                   deliveries/s (first completion to last delivery) and how long the
                   last delivery trails the last completion
  which bound      drain_http: the endpoint process's CPU per run, and the machine's
                   busy cores (/proc/stat, every process) over the steady part
  cpu per run      the drain worker's CPU time (user + system) per run, including its
                   start-up (~0.8 s), and steady (first completion to last): steadier
                   than runs/s when other work shares the machine
  statements       the worker's claim (claim + start) and record of --batch-size runs,
                   timed in this process on one fresh connection let prepare as a
                   worker's is, --batches times, with claim, start and record prepared
                   and with nothing prepared (STRAIT["PREPARE_STATEMENTS"] True and
                   False), the order alternating between reps: median ms per call of each
  --prepare        setting (default: STRAIT["PREPARE_STATEMENTS"] as configured) | on (True:
                   claim, start and record) | off (False: nothing) | both (on and off,
                   alternating, on first in odd reps): the drain workers' PREPARE_STATEMENTS

The database is ``DATABASE_URL`` (default: PostgreSQL database ``strait_bench`` on
127.0.0.1, created if missing). Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench"
SETTINGS = "bench.settings"


def setup_django(db_url: str, settings: str = SETTINGS) -> None:
    os.environ["DATABASE_URL"] = db_url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    sys.path.insert(0, str(ROOT))
    if db_url.startswith("postgres"):
        create_pg_database(db_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def create_pg_database(db_url: str, tablespace: str | None = None) -> None:
    """Create ``db_url``'s database if missing (in ``tablespace``, if given)."""
    import psycopg

    base, name = db_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            where = f' TABLESPACE "{tablespace}"' if tablespace else ""
            conn.execute(f'CREATE DATABASE "{name}"{where}')


def clear() -> None:
    """Empty the runs, their attempts and holds, and the workflow runs (they point at each other)."""
    from django.db import connection

    from django_strait.models import (
        JobRun,
        RunAttempt,
        RunHold,
        WebhookDelivery,
        WorkflowRun,
        WorkflowStepRun,
    )

    ordered = (WebhookDelivery, RunAttempt, RunHold, JobRun, WorkflowStepRun, WorkflowRun)
    if connection.vendor != "postgresql":
        JobRun.objects.update(workflow_step_run=None)
        for model in (WebhookDelivery, WorkflowStepRun, WorkflowRun, RunAttempt, RunHold, JobRun):
            model.objects.all().delete()
        return
    tables = [m._meta.db_table for m in ordered]
    with connection.cursor() as c:
        c.execute(f"TRUNCATE {', '.join(tables)}")
        for table in tables:
            c.execute(f"VACUUM ANALYZE {table}")


#: --protect: what each level configures on the bench jobs (all of it generous enough
#: never to hold a run, so the figure is the protection layer's own cost).
PROTECT_LEVELS = ("off", "limits", "all")


def make_jobs(endpoint: str | None, protect: str = "off", webhook: str = "") -> None:
    """Create the bench jobs; ``protect`` adds limits (and a budget and a fallback) to them.

    Circuits and endpoint health are always on for HTTP jobs (they cannot be
    switched off); ``limits`` adds max_concurrency and a rate limit that never
    bind, ``all`` also a project budget that never runs out and a fallback URL.
    """
    from decimal import Decimal

    from django_strait.models import EndpointHealth, Job, Project

    limits = {"max_concurrency": None, "rate_limit_max": None, "rate_limit_window_secs": None}
    budget: dict = {"project": None, "estimated_cost": None}
    fallbacks: list[str] = []
    if protect in ("limits", "all"):
        limits = {
            "max_concurrency": 100_000,
            "rate_limit_max": 1_000_000_000,
            "rate_limit_window_secs": 60.0,
        }
    if protect == "all":
        project, _ = Project.objects.update_or_create(
            name="bench", defaults={"daily_budget": Decimal(10) ** 11}
        )
        budget = {"project": project, "estimated_cost": Decimal("0.001")}
        fallbacks = [endpoint + "fallback"] if endpoint else []
    EndpointHealth.objects.all().delete()
    Job.objects.update_or_create(
        name="bench-noop",
        defaults={
            "handler": "bench.jobs.noop",
            "endpoint_url": "",
            "webhook_url": webhook,
            "signing_secret": "bench" if webhook else "",
            **limits,
            **budget,
        },
    )
    if endpoint:
        Job.objects.update_or_create(
            name="bench-http",
            defaults={
                "endpoint_url": endpoint,
                "handler": "",
                "timeout_secs": 10,
                "fallback_endpoint_urls": fallbacks,
                **limits,
                **budget,
            },
        )


def spawn_worker(concurrency: int, batch: int, extra: list[str] | None = None) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "django",
        "run_strait_worker",
        "--concurrency",
        str(concurrency),
        "--batch-size",
        str(batch),
        *(extra or []),
    ]
    return spawn(cmd)


def spawn(cmd: list[str]) -> subprocess.Popen:
    """Start ``cmd`` in this tree, in a session of its own (stopped by :func:`stop`), logging to bench/worker.log."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(ROOT / "bench" / "worker.log", "ab"),
    )


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (robust to a busy machine)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def machine_ticks() -> tuple[int, int]:
    """Busy and total CPU ticks of the whole machine so far (from /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def done_count() -> int:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM django_strait_jobrun WHERE status = 'completed'")
        return c.fetchone()[0]


def bulk_trigger(n: int) -> float:
    from django_strait import trigger_many

    clear()
    t = time.perf_counter()
    trigger_many("bench-noop", [{"i": i} for i in range(n)])
    return n / (time.perf_counter() - t)


def trigger_one(n: int) -> dict:
    """N trigger() calls one by one, each committed alone, then N inside one transaction."""
    from django.db import transaction

    from django_strait import trigger

    out = {}
    for mode in ("autocommit", "atomic"):
        clear()
        trigger("bench-noop", {})  # the job row synced, the connection open
        cpu, t = time.process_time(), time.perf_counter()
        with transaction.atomic() if mode == "atomic" else _nothing():
            for i in range(n):
                trigger("bench-noop", {"i": i})
        wall = time.perf_counter() - t
        out[f"{mode}_runs_per_s"] = n / wall
        out[f"{mode}_cpu_ms_per_call"] = (time.process_time() - cpu) * 1000 / n
    return out


@contextlib.contextmanager
def _nothing():
    yield


def delivered_count() -> int:
    from django.db import connection

    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM django_strait_webhookdelivery WHERE status = 'delivered'")
        return c.fetchone()[0]


def drain(
    job: str,
    n: int,
    concurrency: int,
    batch: int,
    extra: list[str] | None = None,
    payload: dict | None = None,
    webhooks: bool = False,
    endpoint_pid: int | None = None,
) -> dict:
    """Drain N runs of ``job`` with one worker (``extra``: more worker options)."""
    from django.db import connections

    from django_strait import trigger_many

    clear()
    trigger_many(job, [{"i": i, **(payload or {})} for i in range(n)])
    connections.close_all()
    t0 = time.perf_counter()
    proc = spawn_worker(concurrency, batch, extra)
    first = None
    first_done = 0
    cpu_first = None
    endpoint_first = machine_first = None
    try:
        while True:
            d = done_count()
            t = time.perf_counter()
            if d and first is None:
                first, first_done = t, d
                cpu_first = cpu_seconds(proc.pid)
                endpoint_first = cpu_seconds(endpoint_pid) if endpoint_pid else None
                machine_first = machine_ticks()
            if d >= n:
                break
            if proc.poll() is not None:
                return {"error": f"worker exited rc={proc.returncode}"}
            if t - t0 > 300:
                return {"error": f"timeout: {d}/{n}"}
            time.sleep(0.02)
        rss = peak_rss_mb(proc.pid)
        cpu = cpu_seconds(proc.pid)
        endpoint_cpu = cpu_seconds(endpoint_pid) if endpoint_pid else None
        machine_last = machine_ticks()
        hooks = _deliveries(n, first, t, t0) if webhooks else {}
    finally:
        stop(proc)
    return {
        **hooks,
        "worker_cpu_ms_per_run": cpu * 1000 / n if cpu is not None else None,
        # From the first completion on: what a run costs once the worker is up.
        "worker_steady_cpu_ms_per_run": (
            (cpu - cpu_first) * 1000 / (n - first_done)
            if cpu is not None and cpu_first is not None and n > first_done
            else None
        ),
        "steady_runs_per_s": (n - first_done) / (t - first) if t > first else None,
        # Which bound holds: the endpoint's CPU per run, and how many of the machine's
        # cores were busy (every process, the other work on the box included).
        "endpoint_steady_cpu_ms_per_run": (
            (endpoint_cpu - endpoint_first) * 1000 / (n - first_done)
            if endpoint_cpu is not None and endpoint_first is not None and n > first_done
            else None
        ),
        "machine_busy_cores_steady": _busy_cores(machine_first, machine_last),
        "incl_startup_runs_per_s": n / (t - t0),
        "peak_rss_mb": rss,
    }


def _busy_cores(first: tuple[int, int] | None, last: tuple[int, int]) -> float | None:
    if first is None or last[1] <= first[1]:
        return None
    return (last[0] - first[0]) / (last[1] - first[1]) * (os.cpu_count() or 1)


def statements(batches: int, batch: int, prepare: bool) -> dict:
    """Time claim + start and record of ``batch`` runs, ``batches`` times, on a fresh session."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import override_settings
    from django.utils import timezone

    from django_strait import trigger_many
    from django_strait.conf import strait_settings
    from django_strait.rules.states import Transition
    from django_strait.storage import Record, RecordBatch, backend
    from django_strait.storage.sql import keep_plans
    from django_strait.transitions import claim_and_start

    clear()
    trigger_many("bench-noop", [{"i": i} for i in range(batches * batch)])
    connection.close()  # nothing prepared yet: the first calls' preparing is counted too
    storage = backend()
    claims, records = [], []
    with override_settings(STRAIT={**settings.STRAIT, "PREPARE_STATEMENTS": prepare}):
        # As the worker's claim and record threads do.
        keep_plans(connection, time.monotonic(), strait_settings.PLAN_LIFETIME)
        for _ in range(batches):
            t = time.perf_counter()
            runs = claim_and_start("bench", limit=batch, storage=storage)
            claims.append((time.perf_counter() - t) * 1000)
            now = timezone.now()
            done = [Record(r.id, r.attempt, Transition.COMPLETE, now, now, 1, "succeeded",
                           job_id=r.job_id) for r in runs]  # fmt: skip
            t = time.perf_counter()
            storage.record(RecordBatch("bench", done))
            records.append((time.perf_counter() - t) * 1000)
    connection.close()
    return {"claim_ms": statistics.median(claims), "record_ms": statistics.median(records)}


def _deliveries(n: int, first: float, last_done: float, t0: float) -> dict:
    """Wait for every run's webhook to be delivered; return deliveries/s and the trail."""
    while (delivered := delivered_count()) < n:
        if time.perf_counter() - t0 > 300:
            return {"error": f"timeout: {delivered}/{n} webhooks delivered"}
        time.sleep(0.02)
    t = time.perf_counter()
    return {
        "deliveries_per_s": n / (t - first) if t > first else None,
        "last_delivery_after_last_run_s": t - last_done,
    }


def latency(samples: int, concurrency: int) -> dict:
    import random

    from django_strait import trigger
    from django_strait.models import JobRun

    clear()
    proc = spawn_worker(concurrency, 100)
    lat = []
    try:
        warm = trigger("bench-noop", {})
        _wait_started(warm.pk, 60)
        rnd = random.Random(7)
        for _ in range(samples):
            time.sleep(rnd.uniform(0.05, 0.3))
            run = trigger("bench-noop", {})
            _wait_started(run.pk, 30)
            row = JobRun.objects.values("created_at", "started_at").get(pk=run.pk)
            lat.append((row["started_at"] - row["created_at"]).total_seconds() * 1000)
    finally:
        stop(proc)
    lat.sort()
    return {
        "median_ms": statistics.median(lat),
        "p95_ms": lat[int(len(lat) * 0.95) - 1],
        "samples": len(lat),
    }


def recorded(samples: int, concurrency: int, gap: tuple[float, float] = (0.01, 0.05)) -> dict:
    """trigger() called -> the run seen completed from another connection, with its hops.

    The watcher polls every 0.2 ms on a connection of its own (autocommit), so a
    sample is what a client that asks sees, commit and all. Wall-clock times
    (``time.time()``) beside the row's ``started_at`` and ``finished_at`` split
    each sample: trigger -> started (the trigger's commit, NOTIFY, the claim
    loop's wake-up, the claim's transaction), started -> finished (the start
    statement, handing the run on, the handler) and finished -> seen (the record
    statement and its commit). A hop ending at ``started_at`` (the claim
    transaction's ``now()``) leaves the claim's own time in the next hop.
    ``gap`` (seconds, drawn uniformly) is the idle time before each trigger: the
    peer harness waits 0.2-1.2 s, long enough for every process on the path to
    sleep, which on a busy machine costs more than the work itself.
    """
    import random

    import psycopg

    from django_strait import trigger

    clear()
    proc = spawn_worker(concurrency, 100)
    rows: list[tuple[float, float, float, float]] = []
    params = _psycopg_params()
    try:
        with psycopg.connect(**params, autocommit=True) as watcher:
            warm = trigger("bench-noop", {})
            _wait_completed(watcher, warm.pk, 60)
            rnd = random.Random(7)
            for _ in range(samples):
                time.sleep(rnd.uniform(*gap))
                t0 = time.time()
                run = trigger("bench-noop", {})
                started, finished, seen = _wait_completed(watcher, run.pk, 30)
                rows.append((t0, started, finished, seen))
    finally:
        stop(proc)
    total = sorted((seen - t0) * 1000 for t0, _, _, seen in rows)
    hops = {
        "trigger_to_started_ms": [(s - t0) * 1000 for t0, s, _, _ in rows],
        "started_to_finished_ms": [(f - s) * 1000 for _, s, f, _ in rows],
        "finished_to_seen_ms": [(seen - f) * 1000 for _, _, f, seen in rows],
    }
    return {
        "median_ms": statistics.median(total),
        "p95_ms": total[int(len(total) * 0.95) - 1],
        "samples": len(total),
        **{name: statistics.median(values) for name, values in hops.items()},
    }


def _psycopg_params() -> dict:
    from django.db import connection

    return connection.get_connection_params()


def _wait_completed(watcher, pk: int, timeout: float) -> tuple[float, float, float]:
    """Poll until run ``pk`` is completed; its started_at, finished_at and when it was seen."""
    deadline = time.perf_counter() + timeout
    sql = (
        "SELECT extract(epoch FROM started_at), extract(epoch FROM finished_at) "
        "FROM django_strait_jobrun WHERE id = %s AND status = 'completed'"
    )
    while True:
        row = watcher.execute(sql, [pk], prepare=True).fetchone()
        if row is not None:
            return float(row[0]), float(row[1]), time.time()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"run {pk} not completed within {timeout}s")
        time.sleep(0.0002)


def _wait_started(pk: int, timeout: float) -> None:
    from django_strait.models import JobRun

    deadline = time.perf_counter() + timeout
    while not JobRun.objects.filter(pk=pk, started_at__isnull=False).exists():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"run {pk} not started within {timeout}s")
        time.sleep(0.002)


def start_endpoint() -> tuple[subprocess.Popen, str]:
    """A fast endpoint in its own process: aiohttp.web answering 200 {}."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "endpoint.py")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = proc.stdout.readline().strip()
    return proc, url


def summarize(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--latency-samples", type=int, default=30)
    ap.add_argument("--recorded-samples", type=int, default=1000)
    ap.add_argument(
        "--recorded-gap",
        default="0.01,0.05",
        help="recorded: idle seconds before each trigger, MIN,MAX (the peer harness: 0.2,1.2)",
    )
    ap.add_argument("--batches", type=int, default=200, help="statements: batches per rep")
    ap.add_argument("--prepare", choices=("setting", "on", "off", "both"), default="setting")
    ap.add_argument(
        "--only", default="bulk_trigger,trigger_one,drain_noop,drain_http,latency,recorded"
    )
    ap.add_argument("--db", default=os.environ.get("DATABASE_URL", DEFAULT_DB))
    ap.add_argument(
        "--protect",
        choices=PROTECT_LEVELS,
        default="off",
        help="limits: never-binding max_concurrency and rate limit on the bench jobs; "
        "all: also a budget that never runs out and a fallback endpoint",
    )
    ap.add_argument(
        "--webhook",
        action="store_true",
        help="every bench run notifies a webhook receiver on 127.0.0.1 (signed)",
    )
    args = ap.parse_args()
    phases = args.only.split(",")
    setup_django(args.db)
    needs_endpoint = "drain_http" in phases or args.webhook
    endpoint_proc, url = start_endpoint() if needs_endpoint else (None, None)
    make_jobs(url, args.protect, webhook=url if args.webhook else "")
    raw: dict[str, list] = {p: [] for p in phases}
    prepared: dict[str, list] = {"on": [], "off": []}
    drains: dict[str, list] = {"on": [], "off": [], "setting": []}
    try:
        for rep in range(args.reps):
            # Alternate which goes first, so neither always runs on a warmer machine.
            order = ("on", "off") if rep % 2 == 0 else ("off", "on")
            if "statements" in phases:
                for mode in order:
                    prepared[mode].append(statements(args.batches, args.batch_size, mode == "on"))
            if "bulk_trigger" in phases:
                raw["bulk_trigger"].append(bulk_trigger(args.n))
            for mode in order if args.prepare == "both" else (args.prepare,):
                if "drain_noop" not in phases:
                    break
                if mode != "setting":
                    os.environ["STRAIT_PREPARE_STATEMENTS"] = "true" if mode == "on" else "false"
                result = drain(
                    "bench-noop", args.n, args.concurrency, args.batch_size, webhooks=args.webhook
                )
                drains[mode].append(result)
                raw["drain_noop"].append(result)
            if "trigger_one" in phases:
                raw["trigger_one"].append(trigger_one(args.n))
            if "drain_http" in phases:
                raw["drain_http"].append(
                    drain(
                        "bench-http",
                        args.n,
                        args.concurrency,
                        args.batch_size,
                        endpoint_pid=endpoint_proc.pid if endpoint_proc else None,
                    )
                )
            if "latency" in phases:
                raw["latency"].append(latency(args.latency_samples, args.concurrency))
            if "recorded" in phases:
                gap = tuple(float(s) for s in args.recorded_gap.split(","))
                raw["recorded"].append(recorded(args.recorded_samples, args.concurrency, gap))
    finally:
        if endpoint_proc:
            endpoint_proc.terminate()
        clear()
    from django.db import connection

    out: dict = {
        "database": connection.vendor,
        "n": args.n,
        "reps": args.reps,
        "concurrency": args.concurrency,
        "batch_size": args.batch_size,
        "protect": args.protect,
        "webhook": args.webhook,
        "prepare": args.prepare,
    }
    if raw.get("bulk_trigger"):
        out["bulk_trigger_runs_per_s"] = summarize(raw["bulk_trigger"])
    for key in ("drain_noop", "drain_http"):
        if raw.get(key):
            out[f"{key}_steady_runs_per_s"] = summarize(
                [r.get("steady_runs_per_s") for r in raw[key]]
            )
            out[f"{key}_incl_startup_runs_per_s"] = summarize(
                [r.get("incl_startup_runs_per_s") for r in raw[key]]
            )
            out[f"{key}_worker_peak_rss_mb"] = summarize([r.get("peak_rss_mb") for r in raw[key]])
            out[f"{key}_worker_cpu_ms_per_run"] = summarize(
                [r.get("worker_cpu_ms_per_run") for r in raw[key]]
            )
            out[f"{key}_worker_steady_cpu_ms_per_run"] = summarize(
                [r.get("worker_steady_cpu_ms_per_run") for r in raw[key]]
            )
            out[f"{key}_machine_busy_cores_steady"] = summarize(
                [r.get("machine_busy_cores_steady") for r in raw[key]]
            )
            if key == "drain_http":
                out["drain_http_endpoint_steady_cpu_ms_per_run"] = summarize(
                    [r.get("endpoint_steady_cpu_ms_per_run") for r in raw[key]]
                )
            if args.webhook and key == "drain_noop":
                out["webhook_deliveries_per_s"] = summarize(
                    [r.get("deliveries_per_s") for r in raw[key]]
                )
                out["webhook_last_delivery_after_last_run_s"] = summarize(
                    [r.get("last_delivery_after_last_run_s") for r in raw[key]]
                )
            errors = [r["error"] for r in raw[key] if "error" in r]
            if errors:
                out[f"{key}_errors"] = errors
    if "statements" in phases:
        for mode, runs in prepared.items():
            for key in ("claim_ms", "record_ms"):
                out[f"statements_prepared_{mode}_{key}"] = summarize([r[key] for r in runs])
    if args.prepare == "both":
        for mode, runs in drains.items():
            out[f"drain_noop_prepared_{mode}_steady_runs_per_s"] = summarize(
                [r.get("steady_runs_per_s") for r in runs]
            )
            out[f"drain_noop_prepared_{mode}_worker_steady_cpu_ms_per_run"] = summarize(
                [r.get("worker_steady_cpu_ms_per_run") for r in runs]
            )
    if raw.get("latency"):
        out["latency_median_ms"] = summarize([r["median_ms"] for r in raw["latency"]])
        out["latency_p95_ms"] = summarize([r["p95_ms"] for r in raw["latency"]])
    if raw.get("trigger_one"):
        for key in raw["trigger_one"][0]:
            out[f"trigger_one_{key}"] = summarize([r[key] for r in raw["trigger_one"]])
    if raw.get("recorded"):
        for key in ("median_ms", "p95_ms", "trigger_to_started_ms", "started_to_finished_ms",
                    "finished_to_seen_ms"):  # fmt: skip
            out[f"recorded_{key}"] = summarize([r[key] for r in raw["recorded"]])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
