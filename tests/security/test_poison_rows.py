"""Every reader survives any one row: one bad row per table, each kind of bad value.

For each poison row of tests/security/poison.py (written with raw SQL beside healthy
work), in one test and one transaction: the worker's own claim, gate and record
(called as its loop calls them, the attempts' ends made up: this is about reading
rows) take the healthy runs of other jobs to completed, the webhook deliverer claims
the healthy delivery, cron fires, pruning prunes, the reaper rescues, the samplers
sample, and every admin page and REST and OJS list answers 200. Real worker
processes run the five rows of issue 41 together in test_poison_pace.py.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_strait import models as m
from django_strait.duties.pruner import Pruner
from django_strait.duties.reaper import Reaper
from django_strait.duties.sampler import HealthSampler, QueueSampler
from django_strait.duties.scheduler import Scheduler
from django_strait.duties.vacuum import Vacuumer
from django_strait.management.commands.run_strait_worker import build_config
from django_strait.rules.outcome import Outcome, failure, success
from django_strait.storage import backend
from django_strait.storage.workflows.graph import GRAPHS
from django_strait.worker.engine import Worker
from django_strait.worker.outcomes import to_record
from tests.integration.factories import client_with
from tests.security.poison import POISONS, POSTGRES_ONLY, Poison, World, build, poison

pytestmark = pytest.mark.django_db

#: Every list of the admin, by model name.
ADMIN_LISTS = (
    "job", "jobrun", "deadletter", "workflow", "workflowrun", "workerprocess",
    "endpointcircuit", "endpointhealth", "webhookdelivery", "project",
)  # fmt: skip
#: The admin's page of each victim row that has one (the others show on these: attempts
#: and holds on their run's, step runs on their workflow run's, the ledger on its project's).
ADMIN_PAGES = {
    m.Job: "job", m.JobRun: "jobrun", m.Project: "project", m.EndpointCircuit: "endpointcircuit",
    m.EndpointHealth: "endpointhealth", m.WebhookDelivery: "webhookdelivery",
    m.WorkerProcess: "workerprocess", m.Workflow: "workflow", m.WorkflowRun: "workflowrun",
}  # fmt: skip
API_LISTS = (
    "jobs/",
    "runs/",
    "dead-letters/",
    "circuits/",
    "health/",
    "budgets/",
    "workflow-runs/",
)
OJS_READS = (
    "/ojs/v1/cron", "/ojs/v1/dead-letter", "/ojs/v1/admin/dead-letter",
    "/ojs/v1/admin/dead-letter/stats",
)  # fmt: skip


#: The HTTP jobs' address: nothing here calls it (the attempts' ends are made up).
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def world() -> World:
    return build(NOWHERE)


def written(world: World, bad: Poison) -> None:
    """Write ``bad``; skip the case where the database itself refuses the value."""
    if bad.kind in POSTGRES_ONLY and connection.vendor != "postgresql":
        pytest.skip(f"SQLite cannot hold {bad.kind} as PostgreSQL does")
    try:
        with transaction.atomic():
            poison(world, bad)
    except DatabaseError as exc:  # a partitioned runs table has no partition for 'sideways'
        pytest.skip(f"the database refuses it at write: {exc}")


@pytest.mark.parametrize("bad", POISONS, ids=lambda bad: bad.id)
def test_a_bad_row_harms_only_itself(bad, world, admin_client, settings):
    written(world, bad)
    now = timezone.now()

    duties = {
        duty.name: duty.run_once(now)
        for duty in (
            Scheduler(), Pruner(), Reaper.from_settings(), QueueSampler(), HealthSampler(),
            Vacuumer(),
        )
    }  # fmt: skip
    work_through()
    claimed = backend().claim_deliveries(
        limit=50, now=timezone.now(), lease=dt.timedelta(seconds=60)
    )

    assert all(result.led for result in duties.values()), duties
    assert m.JobRun.objects.filter(job=world.cron).exists(), "cron did not fire"
    assert not m.JobRun.objects.filter(pk=world.old.pk).exists(), "pruning did not prune"
    stale = m.JobRun.objects.values_list("status", flat=True).get(pk=world.stale.pk)
    assert stale != "executing", "the reaper did not rescue"
    done = m.JobRun.objects.filter(pk__in=[r.pk for r in world.due])
    assert set(done.values_list("status", flat=True)) == {"completed"}
    assert world.hook.pk in {d.pk for d in claimed if not d.row_error}
    assert every_page_answers(world, admin_client, settings) == []


def work_through(rounds: int = 5) -> None:
    """Do what a worker's loop does with the due runs, in this process and transaction:
    claim, gate and start (job by job after a claim that raised, as its producer does),
    then record each attempt as succeeded (an HTTP job's with a 200)."""
    GRAPHS.clear()  # as a worker process starts: definitions read afresh
    worker = Worker(build_config({"worker_id": "poison-w", "burst": True}))
    rng = random.Random(0)
    for _ in range(rounds):
        try:
            started = worker.claimer.claim_and_start(50)
        except Exception:
            started = worker.claimer.claim_and_start(50, isolate=True)
        if not started:
            return
        now = timezone.now()
        records = [
            to_record(run, worker.catalog.get(run.job_id), _ended(run), begun=time.monotonic(),
                      now=now, catalog=worker.catalog, rng=rng)
            for run in started
        ]  # fmt: skip
        worker.recorder.write(records)


def _ended(run) -> Outcome:
    if run.row_error:  # as the executors end a run whose own row cannot be read
        return failure("run.invalid", run.row_error, retryable=False)
    if run.endpoint:
        return success({"ok": True}, status_code=200, endpoint=run.endpoint)
    return success(None)


def every_page_answers(world: World, admin: Client, settings) -> list[str]:
    """Request every admin list and page of a victim, every REST list and detail, the OJS
    reads; return those that did not answer 200."""
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": False}
    victim, wr = world.rows[m.Job], world.rows[m.WorkflowRun]
    admin_urls = [reverse(f"admin:django_strait_{name}_changelist") for name in ADMIN_LISTS]
    admin_urls += [
        reverse(f"admin:django_strait_{name}_change", args=[world.rows[model].pk])
        for model, name in ADMIN_PAGES.items()
        if model.objects.filter(pk=world.rows[model].pk).exists()  # not one a duty removed
    ]
    admin_urls += [
        reverse("admin:django_strait_jobrun_change", args=[world.rows[m.RunAttempt].run_id]),
        reverse("admin:django_strait_overview"),
        reverse("admin:django_strait_job_stats", args=[victim.pk]),
        reverse("admin:django_strait_endpoint_stats") + f"?url={world.http_url}/elsewhere",
    ]
    api = client_with("*")
    api_paths = [*API_LISTS, "jobs/victim/", f"runs/{world.rows[m.JobRun].pk}/",
                 f"runs/{world.rows[m.RunAttempt].run_id}/",
                 f"runs/{world.rows[m.WebhookDelivery].run_id}/deliveries/",
                 f"workflow-runs/{wr.pk}/"]  # fmt: skip
    project = m.Project.objects.values_list("name", flat=True).get(pk=world.rows[m.Project].pk)
    api_paths += [f"budgets/{project}/"] if project else []
    failed = [
        f"{r.status_code} {url}" for url in admin_urls if (r := admin.get(url)).status_code != 200
    ]
    failed += [
        f"{r.status_code} /api/strait/{path}"
        for path in api_paths
        if (r := api.get("/api/strait/" + path)).status_code != 200
    ]
    ojs = Client()
    failed += [
        f"{r.status_code} {path}" for path in OJS_READS if (r := ojs.get(path)).status_code != 200
    ]
    return failed
