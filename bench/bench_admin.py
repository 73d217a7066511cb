#!/usr/bin/env python
"""Time the admin's pages over a million runs and print the figures as one JSON object.

    python bench/bench_admin.py [--runs 1000000] [--reps 5] [--reload]

Loads (once; later calls reuse the rows unless ``--reload``) a PostgreSQL
database ``strait_bench_admin`` on 127.0.0.1 with ``--runs`` runs of eight
jobs in one ``INSERT ... SELECT generate_series``: mostly completed, some
queued, executing, failed, discarded, canceled and dead-lettered, created over
the last 30 days; attempts for every fifth run and every failed one (three for a
dead letter), and 50,000 more in the last hour for the latency charts; a hold
period for every dead letter; a day of per-minute rollups and queue samples so
the overview's charts have data; circuits and health for the HTTP endpoints;
projects with a month of ledger.
Then ANALYZE, and for each admin page: one warm-up GET, then ``--reps`` timed
GETs by a logged-in superuser (Django's test Client, in this process), printing
``{page: {"median_ms", "queries"}}``.

The database is ``DATABASE_URL`` if set (it must be PostgreSQL: the point is
the planner's behaviour at a million rows).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/strait_bench_admin"
JOBS = 8
HTTP_JOBS = 4
PROJECTS = 3


def setup_django(db_url: str) -> None:
    os.environ["DATABASE_URL"] = db_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.admin_settings"
    sys.path.insert(0, str(ROOT))
    from bench.bench_worker import create_pg_database

    create_pg_database(db_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# -- loading ---------------------------------------------------------------------------


def loaded_runs() -> int:
    from django_strait.models import JobRun

    return JobRun.objects.filter(job__name__startswith="bench-admin-").count()


def load(runs: int) -> dict[str, float]:
    """Empty the strait tables and fill them; return seconds per step."""
    from django.db import connection, transaction

    took: dict[str, float] = {}
    with connection.cursor() as c:
        c.execute(
            "TRUNCATE django_strait_runattempt, django_strait_jobrun, django_strait_runrollup, "
            "django_strait_job, django_strait_endpointcircuit, django_strait_endpointhealth, "
            "django_strait_healthsample, django_strait_budgetledger, django_strait_project, "
            "django_strait_runhold, django_strait_queuesample "
            "RESTART IDENTITY CASCADE"
        )
    with transaction.atomic():
        job_ids, urls = _jobs()
    steps = [
        ("runs", lambda c: c.execute(RUNS_SQL, {"n": runs, "jobs": job_ids, "urls": urls})),
        ("attempts", lambda c: c.execute(ATTEMPTS_SQL, {})),
        ("rollups", lambda c: c.execute(ROLLUPS_SQL, {"jobs": job_ids})),
        ("health_samples", lambda c: c.execute(SAMPLES_SQL, {"urls": urls})),
        ("recent_attempts", lambda c: c.execute(RECENT_ATTEMPTS_SQL, {})),
        ("holds", lambda c: c.execute(HOLDS_SQL, {})),
        ("queue_samples", lambda c: c.execute(QUEUE_SAMPLES_SQL, {})),
    ]
    for name, step in steps:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as c:
            step(c)
        took[name] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE")
    took["vacuum_analyze"] = round(time.perf_counter() - started, 1)
    return took


def _jobs() -> tuple[list[int], list[str]]:
    import datetime as dt
    from decimal import Decimal

    from django.utils import timezone

    from django_strait.models import (
        BudgetLedger,
        EndpointCircuit,
        EndpointHealth,
        Job,
        Project,
    )

    projects = [
        Project.objects.create(name=f"bench-project-{i}", daily_budget=Decimal(1000))
        for i in range(PROJECTS)
    ]
    today = timezone.localdate()
    BudgetLedger.objects.bulk_create(
        BudgetLedger(
            project=p, day=today - dt.timedelta(days=d), spent=Decimal(400 + 10 * d),
            reserved=Decimal(5) if d == 0 else Decimal(0),
        )
        for p in projects
        for d in range(30)
    )  # fmt: skip
    ids, urls = [], []
    for i in range(JOBS):
        url = f"http://127.0.0.1:9/hook-{i}" if i < HTTP_JOBS else ""
        job = Job.objects.create(
            name=f"bench-admin-{i}",
            queue=f"queue-{i % 3}",
            endpoint_url=url,
            handler="" if url else "bench.jobs.noop",
            project=projects[i % PROJECTS] if i % 2 else None,
            estimated_cost=Decimal("0.01") if i % 2 else None,
        )
        ids.append(job.pk)
        if url:
            urls.append(url)
    for n, url in enumerate(urls):
        EndpointCircuit.objects.create(
            endpoint_url=url, state="open" if n == 0 else "closed", failures=5 if n == 0 else n
        )
        EndpointHealth.objects.create(
            endpoint_url=url, success_rate=1 - 0.3 * n, failure_rate=0.3 * n, samples=10_000
        )
    return ids, urls


#: One statement for every run: statuses by g % 100, times spread over 30 days.
RUNS_SQL = """
INSERT INTO django_strait_jobrun (
    job_id, payload, status, attempt, attempts_before_replay, priority, queue, available_at,
    claimed_by, cancel_requested, last_error, error_type, endpoint_used, replay_count,
    replayed_by, created_at, updated_at, dequeued_at, started_at, finished_at, heartbeat_at,
    actual_cost
)
SELECT job_id, jsonb_build_object('order', g, 'note', 'bench'), status,
       CASE status WHEN 'queued' THEN 0 WHEN 'dead_letter' THEN 3 ELSE 1 END, 0, 0,
       'queue-' || ((g %% 8) %% 3), created, '',
       false,
       CASE WHEN status IN ('failed', 'dead_letter', 'discarded')
            THEN 'HTTP 503 from the endpoint' ELSE '' END,
       CASE WHEN status IN ('failed', 'dead_letter', 'discarded')
            THEN (ARRAY['http.503', 'http.500', 'timeout.read', 'connection.refused'])[1 + g %% 4]
            ELSE '' END,
       COALESCE(url, ''), 0, '', created, created,
       CASE WHEN status <> 'queued' THEN created END,
       CASE WHEN status NOT IN ('queued', 'canceled') THEN created END,
       CASE WHEN status NOT IN ('queued', 'executing') THEN created + interval '120 ms' END,
       CASE WHEN status = 'executing' THEN now() END,
       CASE WHEN status = 'completed' AND (g %% 8) %% 2 = 1 THEN 0.01 END
FROM (
    SELECT g,
           (%(jobs)s::bigint[])[1 + g %% 8] AS job_id,
           (%(urls)s::text[])[1 + g %% 8] AS url,
           now() - (%(n)s - g) * interval '30 days' / %(n)s AS created,
           CASE
               WHEN g %% 100 < 2 THEN 'dead_letter'
               WHEN g %% 100 < 5 THEN 'failed'
               WHEN g > %(n)s - 60000 AND g %% 100 < 40 THEN 'queued'
               WHEN g > %(n)s - 2000 AND g %% 100 < 60 THEN 'executing'
               WHEN g %% 100 = 5 THEN 'discarded'
               WHEN g %% 100 = 6 THEN 'canceled'
               ELSE 'completed'
           END AS status
    FROM generate_series(1, %(n)s) AS g
) AS runs
"""

#: Attempts for every fifth run and every run that failed: three for a dead letter.
ATTEMPTS_SQL = """
INSERT INTO django_strait_runattempt (
    run_id, number, endpoint, started_at, finished_at, duration_ms, outcome, status_code,
    error_type, error, response_excerpt, worker
)
SELECT r.id, a, r.endpoint_used, r.started_at, r.finished_at, 120,
       CASE WHEN r.status = 'completed' THEN 'succeeded' ELSE 'failed' END,
       CASE WHEN r.endpoint_used = '' THEN NULL
            WHEN r.status = 'completed' THEN 200 ELSE 503 END,
       r.error_type, r.last_error, '', 'bench-worker:1'
FROM django_strait_jobrun AS r
CROSS JOIN LATERAL generate_series(1, CASE r.status WHEN 'dead_letter' THEN 3 ELSE 1 END) AS a
WHERE r.status IN ('failed', 'dead_letter', 'discarded')
   OR (r.status = 'completed' AND r.id %% 5 = 0)
"""

#: A day of per-minute rollups per job: what the overview's throughput chart reads.
ROLLUPS_SQL = """
INSERT INTO django_strait_runrollup (minute, job_id, status, count, total_duration_ms)
SELECT date_trunc('minute', now()) - m * interval '1 minute', job_id, status,
       CASE status WHEN 'completed' THEN 25 WHEN 'queued' THEN 2 ELSE 1 END,
       CASE status WHEN 'completed' THEN 3000 ELSE 120 END
FROM generate_series(0, 1439) AS m,
     unnest(%(jobs)s::bigint[]) AS job_id,
     unnest(ARRAY['completed', 'queued', 'dead_letter']) AS status
"""

#: A day of per-minute health samples per endpoint, for the overview's sparklines.
SAMPLES_SQL = """
INSERT INTO django_strait_healthsample (endpoint_url, at, score)
SELECT url, date_trunc('minute', now()) - m * interval '1 minute', 50 + (m %% 50)
FROM generate_series(0, 1439) AS m, unnest(%(urls)s::text[]) AS url
"""


#: The last hour's traffic for the latency charts: 50,000 attempts of the newest runs.
RECENT_ATTEMPTS_SQL = """
INSERT INTO django_strait_runattempt (
    run_id, number, endpoint, started_at, finished_at, duration_ms, outcome, status_code,
    error_type, error, response_excerpt, worker
)
SELECT r.id, 10 + s, r.endpoint_used, now() - (s * interval '3600 seconds' / 50000),
       now() - (s * interval '3600 seconds' / 50000) + interval '80 ms', 20 + (s * 7919) %% 900,
       CASE WHEN s %% 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN r.endpoint_used = '' THEN NULL WHEN s %% 10 = 0 THEN 503 ELSE 200 END,
       '', '', '', 'bench-worker:2'
FROM generate_series(1, 50000) AS s
JOIN LATERAL (
    SELECT id, endpoint_used FROM django_strait_jobrun ORDER BY id DESC OFFSET (s %% 5000) LIMIT 1
) AS r ON true
"""

#: A circuit hold period before each dead letter's last attempt.
HOLDS_SQL = """
INSERT INTO django_strait_runhold (run_id, after_attempt, reason, error, endpoint, started_at,
    last_held_at, until, times, worker)
SELECT id, 2, 'circuit.open', 'circuit open for ' || endpoint_used, endpoint_used,
       created_at, created_at + interval '90 s', created_at + interval '120 s', 4, 'bench'
FROM django_strait_jobrun WHERE status = 'dead_letter'
"""

#: A day of per-minute samples of the three queues, for the lag chart.
QUEUE_SAMPLES_SQL = """
INSERT INTO django_strait_queuesample (queue, at, depth, due, lag_seconds)
SELECT 'queue-' || q, date_trunc('minute', now()) - m * interval '1 minute', 20000, 500,
       (m %% 30) * 0.5
FROM generate_series(0, 1439) AS m, generate_series(0, 2) AS q
"""


# -- timing ----------------------------------------------------------------------------


def pages() -> dict[str, str]:
    """Return the admin pages to time, by name."""
    from django.contrib import admin

    from django_strait.admin.runs import JobRunAdmin
    from django_strait.models import (
        ApiKey,
        EndpointCircuit,
        EndpointHealth,
        Job,
        JobRun,
        Project,
        WorkerProcess,
    )

    job = Job.objects.get(name="bench-admin-1")
    # The last page the list links to (its count may be an estimate).
    last_page = JobRunAdmin.paginator(JobRun.objects.order_by("-pk"), 100).num_pages
    dead = JobRun.objects.filter(status="dead_letter").order_by("-pk").values_list("pk", flat=True)
    runs = "/admin/django_strait/jobrun/"
    found = {
        "index": "/admin/",
        "overview": "/admin/django_strait/job/overview/",
        "runs": runs,
        "runs_page_100": f"{runs}?p=100",
        "runs_last_page": f"{runs}?p={last_page}",
        "runs_status_completed": f"{runs}?status__exact=completed",
        "runs_status_failed": f"{runs}?status__exact=failed",
        "runs_job": f"{runs}?job__id__exact={job.pk}",
        "runs_job_and_status": f"{runs}?job__id__exact={job.pk}&status__exact=dead_letter",
        "runs_search_id": f"{runs}?q={dead[0]}",
        "run_detail": f"{runs}{dead[0]}/change/",
        "dead_letters": "/admin/django_strait/deadletter/",
        "dead_letters_job": f"/admin/django_strait/deadletter/?job__id__exact={job.pk}",
        "dead_letter_detail": f"/admin/django_strait/deadletter/{dead[0]}/change/",
        "jobs": "/admin/django_strait/job/",
        "job_detail": f"/admin/django_strait/job/{job.pk}/change/",
        "job_stats": f"/admin/django_strait/job/{job.pk}/stats/",
        "endpoint_stats": "/admin/django_strait/job/endpoint-stats/?url="
        + quote("http://127.0.0.1:9/hook-1", safe=""),
    }
    optional = {
        "circuits": EndpointCircuit,
        "health": EndpointHealth,
        "budgets": Project,
        "workers": WorkerProcess,
        "api_keys": ApiKey,
    }
    for name, model in optional.items():
        if model in admin.site._registry:
            found[name] = f"/admin/django_strait/{model._meta.model_name}/"
    return found


def time_pages(reps: int) -> dict[str, dict[str, float | int]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user = User.objects.filter(username="bench-admin").first() or User.objects.create_superuser(
        "bench-admin", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)
    figures: dict[str, dict[str, float | int]] = {}
    for name, url in pages().items():
        warm = client.get(url)
        if warm.status_code != 200:
            raise SystemExit(f"{name}: GET {url} answered {warm.status_code}")
        times = []
        for _ in range(reps):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - started) * 1000)
        figures[name] = {"median_ms": round(statistics.median(times), 1), "queries": len(queries)}
        print(f"{name}: {figures[name]}", file=sys.stderr)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=_positive, default=1_000_000)
    parser.add_argument("--reps", type=_positive, default=5)
    parser.add_argument("--reload", action="store_true", help="Load the rows again.")
    args = parser.parse_args()
    db_url = os.environ.get("DATABASE_URL") or DEFAULT_DB
    if not db_url.startswith("postgres"):
        raise SystemExit("DATABASE_URL must name a PostgreSQL database")
    setup_django(db_url)
    present = loaded_runs()
    loading = {}
    if args.reload or present != args.runs:
        print(f"loading {args.runs} runs (found {present})...", file=sys.stderr)
        loading = load(args.runs)
        print(f"loaded: {loading}", file=sys.stderr)
    result = {"runs": args.runs, "load_seconds": loading, "pages": time_pages(args.reps)}
    print(json.dumps(result, indent=2))


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


if __name__ == "__main__":
    main()
