"""Fuzz the admin over two databases: the pages of rows on "jobs2", and every list with
hostile ``?database=`` values. No answer may be a 5xx (``test_admin_fuzz`` says how)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from django_strait import define_workflow, trigger_workflow
from django_strait.api.auth import issue_key
from django_strait.models import (
    EndpointCircuit,
    EndpointHealth,
    Project,
    WebhookDelivery,
    WorkerProcess,
    Workflow,
    WorkflowRun,
)
from tests.hostile import path_value
from tests.integration.factories import make_job, make_run
from tests.security.test_admin_fuzz import PAGES, fuzz, page_url, read, superuser, tally

__all__ = ["superuser", "tally"]  # the fixtures, shared with the one-database fuzz

pytestmark = [
    pytest.mark.slow,
    pytest.mark.layout_free,
    pytest.mark.django_db(databases=["default", "jobs2"], transaction=True),
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
    pytest.mark.filterwarnings("ignore:DateTimeField .* received a naive datetime:RuntimeWarning"),
]


@pytest.fixture
def rows(two_aliases) -> dict[str, Any]:
    """The jobs' rows on "jobs2"; what lives on the first alias (workflows, circuits) there."""
    project = Project.objects.create(name="fuzz-project", daily_budget=Decimal("10"))
    make_job("fuzz-job", queue="default")  # the workflow's step job, on the first alias
    job = make_job(
        "fuzz-far", queue="two", using="jobs2", webhook_url="https://hooks.example.com/x"
    )
    runs = {s: make_run(job, status=s, error_type="http.503") for s in
            ("queued", "dead_letter", "failed", "completed", "executing")}  # fmt: skip
    url = "https://api.example.com/x"
    circuit = EndpointCircuit.objects.create(endpoint_url=url, state="open", failures=5)
    health = EndpointHealth.objects.create(endpoint_url=url, success_rate=0.4, failure_rate=0.6)
    delivery = WebhookDelivery.objects.using("jobs2").create(
        run=runs["completed"], url=job.webhook_url, event="run.completed"
    )
    now = timezone.now()
    worker = WorkerProcess.objects.using("jobs2").create(
        worker_id="fuzz-worker", host="h", pid=1, concurrency=4, started_at=now, last_seen_at=now
    )
    define_workflow("fuzz-flow", steps=[{"name": "a", "job": "fuzz-job"}])
    trigger_workflow("fuzz-flow", {"n": 1})
    key, _ = issue_key("fuzz", ["*"])
    return {
        "job": job.pk, "jobrun": runs["failed"].pk, "deadletter": runs["dead_letter"].pk,
        "project": project.pk, "endpointcircuit": circuit.pk, "endpointhealth": health.pk,
        "webhookdelivery": delivery.pk, "workerprocess": worker.pk, "apikey": key.pk,
        "workflow": Workflow.objects.get().pk, "workflowrun": WorkflowRun.objects.get().pk,
    }  # fmt: skip


def test_admin_over_two_databases__hostile_requests_never_answer_5xx(superuser, rows, tally):
    for route, _ in PAGES:
        url = page_url(route, rows)
        fuzz(superuser, tally, route, url, read(superuser, url))
        if "<" in route:  # an id of no alias (beyond the two), and one of the first alias's
            for value in (str(7 * 2**48 + 3), str(2**48), "1"):
                bad = page_url(route, rows, object_id=path_value(value), job_id=path_value(value))
                tally.record(route, "GET", bad, None, superuser.get(bad).status_code)
        for value in ("jobs2", "nope", "\x00", "", "default"):
            tally.record(
                route, "GET", url, None, superuser.get(url, {"database": value}).status_code
            )
    assert not tally.failures, tally.report()
