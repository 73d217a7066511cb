"""The metrics view against the real database, and a worker's metrics server on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
import re
import urllib.request
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.urls import include, path
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_strait import define_workflow, trigger_workflow
from django_strait.metrics import WorkerMetrics
from django_strait.metrics.database import dead_letters_by_job, in_flight_by_job
from django_strait.models import (
    BudgetLedger,
    EndpointCircuit,
    EndpointHealth,
    JobRun,
    Project,
    WorkerProcess,
)
from django_strait.rules.states import Transition
from django_strait.storage import Record, Recorded
from django_strait.storage.gauges import queued_by_queue
from tests.integration.factories import make_job, make_run

urlpatterns = [path("metrics/", include("django_strait.metrics.urls"))]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

TOKEN = "scrape-token-123"
WITH_TOKEN = override_settings(
    STRAIT={"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8"], "METRICS_TOKEN": TOKEN}
)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample in a Prometheus text page: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def analyze() -> None:
    """Refresh PostgreSQL's statistics (the row estimate and the planner's choices)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {JobRun._meta.db_table}")


@pytest.fixture
def staff_client(client):
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


# -- who may read it ---------------------------------------------------------------


def test_metrics_view__refuses_anonymous_requests_with_401_and_a_bearer_challenge(client):
    response = client.get("/metrics/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_metrics_view__refuses_a_logged_in_user_who_is_not_staff_with_403(client):
    client.force_login(User.objects.create_user("someone"))

    assert client.get("/metrics/").status_code == 403


@WITH_TOKEN
def test_metrics_view__refuses_a_wrong_token(client):
    response = client.get("/metrics/", headers={"Authorization": "Bearer not-the-token"})

    assert response.status_code == 401


def test_metrics_view__refuses_any_token_when_none_is_configured(client):
    response = client.get("/metrics/", headers={"Authorization": "Bearer "})

    assert response.status_code == 401


@WITH_TOKEN
def test_metrics_view__admits_the_configured_bearer_token(client):
    response = client.get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def test_metrics_view__admits_staff_and_refuses_post(staff_client):
    assert staff_client.get("/metrics/").status_code == 200
    assert staff_client.post("/metrics/").status_code == 405


# -- what it says ------------------------------------------------------------------


def test_metrics_view__reports_queues_in_flight_dead_letters_and_workers(staff_client):
    now = timezone.now()
    mail, report = make_job("mail", queue="mail"), make_job("report")
    for _ in range(3):
        make_run(report, available_at=now - dt.timedelta(seconds=5))
    make_run(report, priority=50, available_at=now - dt.timedelta(seconds=1))
    make_run(report, available_at=now - dt.timedelta(minutes=2))  # the oldest due
    make_run(report, available_at=now + dt.timedelta(hours=1))  # queued, not due
    make_run(mail, available_at=now + dt.timedelta(hours=1))
    make_run(report, status="executing")
    make_run(report, status="dequeued")
    make_run(report, status="dequeued")
    make_run(mail, status="dead_letter")
    make_run(mail, status="dead_letter")
    for _ in range(4):
        make_run(report, status="completed")
    WorkerProcess.objects.create(
        worker_id="alive",
        host="h",
        pid=1,
        concurrency=5,
        started_at=now,
        last_seen_at=now,
        in_flight=3,
    )
    WorkerProcess.objects.create(
        worker_id="gone",
        host="h",
        pid=2,
        concurrency=5,
        started_at=now,
        last_seen_at=now - dt.timedelta(days=1),
        in_flight=9,
    )
    analyze()

    response = staff_client.get("/metrics/")

    assert response.status_code == 200
    got = samples(response.content.decode())
    assert got[("strait_queue_depth", (("queue", "default"),))] == 6
    assert got[("strait_queue_due", (("queue", "default"),))] == 5
    assert got[("strait_queue_depth", (("queue", "mail"),))] == 1
    assert got[("strait_queue_due", (("queue", "mail"),))] == 0
    assert got[("strait_queue_lag_seconds", (("queue", "mail"),))] == 0
    # The oldest due run, though a higher priority run is claimed first.
    assert 120 <= got[("strait_queue_lag_seconds", (("queue", "default"),))] < 3600
    assert got[("strait_runs_in_flight", (("job", "report"), ("status", "executing")))] == 1
    assert got[("strait_runs_in_flight", (("job", "report"), ("status", "dequeued")))] == 2
    assert got[("strait_runs_in_flight", (("job", "mail"), ("status", "executing")))] == 0
    assert got[("strait_dead_letters", (("job", "mail"),))] == 2
    assert got[("strait_dead_letters", (("job", "report"),))] == 0
    assert got[("strait_workers_alive", ())] == 1
    assert got[("strait_workers_in_flight", ())] == 3
    assert got[("strait_runs_estimate", ())] == JobRun.objects.count() == 16


def test_metrics_view__reports_circuits_health_and_todays_budgets(staff_client):
    now = timezone.now()
    EndpointCircuit.objects.create(endpoint_url="http://127.0.0.1:1/a", state="open", opened_at=now)
    EndpointCircuit.objects.create(endpoint_url="http://127.0.0.1:1/b")
    EndpointHealth.objects.create(
        endpoint_url="http://127.0.0.1:1/a", success_rate=0.1, failure_rate=0.9
    )
    acme = Project.objects.create(name="acme", daily_budget=Decimal(50))
    Project.objects.create(name="idle", daily_budget=Decimal(5))
    BudgetLedger.objects.create(
        project=acme,
        day=timezone.localdate(now),
        spent=Decimal("41.5"),
        reserved=Decimal(2),
        soft_warning_sent_at=now,
    )
    BudgetLedger.objects.create(
        project=acme, day=timezone.localdate(now) - dt.timedelta(days=1), spent=Decimal(50)
    )

    got = samples(staff_client.get("/metrics/").content.decode())

    assert got[("strait_circuits", (("state", "open"),))] == 1
    assert got[("strait_circuits", (("state", "closed"),))] == 1
    assert got[("strait_circuits", (("state", "half_open"),))] == 0
    key = (
        "strait_endpoint_health_score",
        (("endpoint", "http://127.0.0.1:1/a"), ("level", "unhealthy")),
    )
    assert got[key] == pytest.approx(100 * (0.5 * 0.1 + 0.3 * 0.1 + 0.2))
    assert got[("strait_budget_daily", (("project", "acme"),))] == 50
    assert got[("strait_budget_spent", (("project", "acme"),))] == 41.5
    assert got[("strait_budget_reserved", (("project", "acme"),))] == 2
    assert got[("strait_budget_soft_limit_reached", (("project", "acme"),))] == 1
    assert got[("strait_budget_spent", (("project", "idle"),))] == 0
    assert got[("strait_budget_soft_limit_reached", (("project", "idle"),))] == 0


def test_metrics_view__a_queue_that_emptied_reports_zero_rather_than_vanishing(staff_client):
    make_job("idle", queue="idle")

    got = samples(staff_client.get("/metrics/").content.decode())

    assert got[("strait_queue_depth", (("queue", "idle"),))] == 0
    assert got[("strait_queue_lag_seconds", (("queue", "idle"),))] == 0


# -- cost: the partial indexes, never the history ---------------------------------------


def _bulk(job, status: str, n: int) -> None:
    now = timezone.now()
    JobRun.objects.bulk_create(
        JobRun(job=job, status=status, queue=job.queue, available_at=now) for _ in range(n)
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # VACUUM cannot run inside a transaction
def test_metrics_queries__use_the_partial_indexes_not_a_scan_of_history():
    if connection.vendor != "postgresql":
        pytest.skip("the query plans checked are PostgreSQL's (SQLite has no partial index stats)")
    job = make_job("busy")
    _bulk(job, "completed", 20_000)  # history, as a long-lived install has
    _bulk(job, "queued", 300)
    _bulk(job, "dead_letter", 50)
    _bulk(job, "executing", 20)
    with connection.cursor() as cursor:
        # The statistics and visibility map autovacuum keeps in a live database.
        cursor.execute(f"VACUUM ANALYZE {JobRun._meta.db_table}")
    queries = {
        "queued": (queued_by_queue("default", timezone.now()), 300),
        "in flight": (in_flight_by_job("default"), 20),
        "dead letters": (dead_letters_by_job("default"), 50),
    }

    for name, (query, counted) in queries.items():
        plan = query.explain(analyze=True)
        # The planner may pick the partial index or (status, finished_at): both
        # read only the counted rows. What must never happen is reading history.
        assert _rows_read_from_runs(plan) == counted, f"{name}:\n{plan}"
        history = (f"{JobRun._meta.db_table} ", f"{JobRun._meta.db_table}_history ")
        assert not any(f"Seq Scan on {t}" in plan for t in history), f"{name}:\n{plan}"


def _rows_read_from_runs(plan: str) -> int:
    """The actual rows of the plan node that reads the run table (or its one leaf)."""
    table = re.compile(rf" on {JobRun._meta.db_table}(_live|_kept|_history)? ")
    [line] = [ln for ln in plan.splitlines() if table.search(ln)]
    return int(re.search(r"actual time=\S+ rows=(\d+)", line).group(1))


# -- a worker's own metrics --------------------------------------------------------------


def _record(run_id: int, outcome: str, ms: int) -> Record:
    now = timezone.now()
    return Record(run_id, 1, Transition.COMPLETE, now, now, ms, outcome)


def test_worker_metrics__counts_moved_runs_by_job_and_status_and_times_attempts():
    metrics = WorkerMetrics()
    records = [_record(1, "succeeded", 40), _record(2, "failed", 2000), _record(3, "failed", 5)]
    moved = Recorded(moved={1: "completed", 2: "queued"}, lost=[3])

    metrics.observe_recorded(records, moved, {1: "mail", 2: "mail", 3: "mail"})
    metrics.observe_claimed(3)
    metrics.observe_claimed(0)

    reg = metrics.registry
    finished = "strait_worker_runs_finished_total"
    assert reg.get_sample_value(finished, {"job": "mail", "status": "completed"}) == 1
    assert reg.get_sample_value(finished, {"job": "mail", "status": "queued"}) == 1
    duration = "strait_worker_attempt_duration_seconds"
    assert reg.get_sample_value(f"{duration}_count", {"job": "mail", "outcome": "failed"}) == 1
    assert reg.get_sample_value(f"{duration}_sum", {"job": "mail", "outcome": "failed"}) == 2.0
    assert reg.get_sample_value("strait_worker_claimed_total") == 3
    assert reg.get_sample_value("strait_worker_results_lost_total") == 1


def test_worker_metrics__serves_its_registry_on_127_0_0_1():
    metrics = WorkerMetrics()
    held = [1, 2]
    metrics.watch_in_flight(lambda: len(held))
    metrics.observe_claimed(2)
    port = metrics.serve(0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        metrics.close()

    got = samples(text)
    assert got[("strait_worker_in_flight", ())] == 2
    assert got[("strait_worker_claimed_total", ())] == 2


# -- workflows ---------------------------------------------------------------------------


def test_metrics_view__reports_running_workflow_runs_by_workflow(staff_client):
    define_workflow("busy-flow", steps=[{"name": "a", "job": "wf-step"}])
    define_workflow("idle-flow", steps=[{"name": "a", "job": "wf-step"}])
    for _ in range(2):
        trigger_workflow("busy-flow")
    got = samples(staff_client.get("/metrics/").content.decode())
    assert got[("strait_workflow_runs_running", (("workflow", "busy-flow"),))] == 2
    assert got[("strait_workflow_runs_running", (("workflow", "idle-flow"),))] == 0


@pytest.mark.django_db(transaction=True)
def test_worker_metrics__counts_workflow_runs_by_final_status(burst):
    define_workflow("fine", steps=[{"name": "a", "job": "wf-step"}])
    define_workflow("broken", steps=[{"name": "a", "job": "wf-fail"}])
    metrics = WorkerMetrics()
    metrics.watch_workflows()
    try:
        for name in ("fine", "fine", "broken"):
            trigger_workflow(name)
        burst()
    finally:
        metrics.close()
    trigger_workflow("fine")
    burst()  # after close: no longer counted

    finished = "strait_worker_workflow_runs_finished_total"
    value = metrics.registry.get_sample_value
    assert value(finished, {"workflow": "fine", "status": "completed"}) == 2
    assert value(finished, {"workflow": "broken", "status": "failed"}) == 1
