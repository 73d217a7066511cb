"""Issue 41's five bad rows together, with two real worker processes running.

The same two workers drain a batch of healthy runs (Python and HTTP jobs, webhooks,
workflows going through their steps) twice: before the rows are written, and after.
The second drain's pace is reported as a share of the first's and held to a loose
bound (the figure docs/security.md gives is measured here; speed itself is bench/'s
business). Meanwhile cron fires every minute, pruning prunes, and every admin and
REST list answers 200.

The rows: a workflow run's payload nested 5,000 deep (one of the workflow runs under
way), a circuit at opened_at = 'infinity' for an unrelated URL, a scheduled job whose
last tick is '-infinity', a job whose retention_days is 2147483647, and a queued run
due at '-infinity'.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from django_strait import trigger_many
from django_strait.models import EndpointCircuit, Job, JobRun, WorkerProcess, WorkflowRun
from django_strait.rules.cron import tick_key
from django_strait.workflows import define_workflow, trigger_workflow
from tests.conftest import ROOT, worker_command
from tests.integration.factories import DIAMOND, client_with, make_job, make_run
from tests.security.poison import deep_json, write
from tests.security.test_poison_rows import ADMIN_LISTS, API_LISTS

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

#: Healthy runs per drain: Python runs, HTTP runs (each owing a webhook), workflow runs.
PYTHON_RUNS, HTTP_RUNS, WORKFLOW_RUNS = 5000, 500, 30
#: The loosest share of the clean drain's pace the poisoned drain may keep (issue 41: 0.8,
#: measured; a shared CI machine's noise is far wider than the rows' cost).
LOOSE_BOUND = 0.5
WORKERS = 2
#: Clean and poisoned drains, alternated.
REPS = 2


@pytest.fixture
def workers(worker_env) -> Iterator[list[subprocess.Popen]]:
    """Two long-running workers (duties every second or two), stopped by pid at the end."""
    env = {
        **worker_env,
        "STRAIT_SCHEDULER_INTERVAL": "1",
        "STRAIT_PRUNE_INTERVAL": "2",
        "STRAIT_REAPER_INTERVAL": "2",
    }
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(WORKERS)]
    started = [
        subprocess.Popen(
            worker_command("--worker-id", f"pace-w{n}", "--concurrency", "16"),
            cwd=ROOT,
            env=env,
            stdout=logs[n],
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for n in range(WORKERS)
    ]
    try:
        yield started
    finally:
        for worker in started:
            if worker.poll() is None:
                worker.terminate()
        for worker, log in zip(started, logs, strict=True):
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            log.seek(0)
            print(f"--- {worker.args[-3]} (exit {worker.returncode})\n{log.read()[-4000:]}")
            log.close()


def wait_for(what: str, done, timeout: float) -> float:
    """Poll ``done()`` every 50 ms; return the seconds it took (fail after ``timeout``)."""
    began = time.monotonic()
    while not done():
        assert time.monotonic() - began < timeout, f"{what}: not done in {timeout:g} s"
        time.sleep(0.05)
    return time.monotonic() - began


def drain(label: str, share: float = 1.0) -> tuple[float, list[WorkflowRun]]:
    """Queue a batch of healthy work at once; return the seconds until every run of it ended."""
    flows = [trigger_workflow("flow", {"n": n, "label": label}) for n in range(WORKFLOW_RUNS)]
    began = time.monotonic()
    runs = trigger_many("test-noop", [{"i": i} for i in range(int(PYTHON_RUNS * share))])
    runs += trigger_many("healthy-http", [{"i": i} for i in range(int(HTTP_RUNS * share))])
    ids = [r.pk for r in runs]
    left = JobRun.objects.filter(pk__in=ids).exclude(status="completed")
    wait_for(f"{label} drain", lambda: not left.exists(), timeout=300)
    return time.monotonic() - began, flows


def test_five_bad_rows_together__healthy_work_keeps_its_pace_cron_fires_pruning_prunes(
    workers, http_server, admin_client
):
    if connection.vendor != "postgresql":
        pytest.skip("'infinity' is a PostgreSQL timestamp")
    make_job(
        "healthy-http", endpoint_url=http_server.url("/ok"), webhook_url=http_server.url("/hook")
    )
    define_workflow("flow", DIAMOND)
    cron = make_job("healthy-cron", schedule="* * * * *")
    Job.objects.filter(pk=cron.pk).update(created_at=timezone.now() - dt.timedelta(minutes=5))
    wait_for("two workers", lambda: WorkerProcess.objects.count() == WORKERS, timeout=60)
    drain("warm-up", share=0.2)  # first claims, caches, connections: in neither figure
    clean, poisoned = [], []
    poisoned_at = timezone.now()
    old = old_runs(kept_days=1)
    for rep in range(REPS):  # alternated: the machine's own drift falls on both alike
        clean.append(drain(f"clean {rep}")[0])
        rows = write_the_five_rows(http_server.url(""), rep)
        time.sleep(2)  # the workers' caches (jobs, circuits) reload with the rows in them
        took, flows = drain(f"poisoned {rep}")
        poisoned.append(took)
        flows.append(rows["workflow_run"])
        running = WorkflowRun.objects.filter(pk__in=[w.pk for w in flows], status="running")
        wait_for("the workflow runs", lambda left=running: not left.exists(), timeout=60)
        bad_flow = WorkflowRun.objects.values_list("status", "error_type").get(
            pk=rows["workflow_run"].pk
        )
        assert bad_flow == ("failed", "workflow.invalid")
        if rep < REPS - 1:
            fix_the_rows(rows)

    pace = sum(clean) / sum(poisoned)
    print(
        f"\nPACE: clean drains {', '.join(f'{t:.2f}' for t in clean)} s, with the five rows "
        f"{', '.join(f'{t:.2f}' for t in poisoned)} s: {pace:.2f} of the clean pace"
    )
    assert pace >= LOOSE_BOUND
    # Pruning prunes (PRUNE_INTERVAL 2 s): the old runs of a job that keeps a day go.
    wait_for("pruning", lambda: not JobRun.objects.filter(pk__in=old).exists(), timeout=30)
    # Cron fires every minute: each minute's tick since the rows were written (one at least).
    first = _minute(poisoned_at) + dt.timedelta(minutes=1)
    fired = JobRun.objects.filter(job=cron, idempotency_key=tick_key(first))
    wait_for("a cron tick after the rows", fired.exists, timeout=90)
    settled = _minute(timezone.now() - dt.timedelta(seconds=5))  # each tick had 5 s to fire
    ticks = range(int((settled - first).total_seconds() // 60) + 1)
    keys = {tick_key(first + dt.timedelta(minutes=n)) for n in ticks}
    assert keys <= set(JobRun.objects.filter(job=cron).values_list("idempotency_key", flat=True))
    # The lists: every admin and REST list answers 200.
    api = client_with("*")
    assert [p for p in ADMIN_LISTS if admin_client.get(
        reverse(f"admin:django_strait_{p}_changelist")).status_code != 200] == []  # fmt: skip
    assert admin_client.get(reverse("admin:django_strait_overview")).status_code == 200
    assert [p for p in API_LISTS if api.get(f"/api/strait/{p}").status_code != 200] == []


def write_the_five_rows(http_url: str, rep: int) -> dict:
    """Write issue 41's five rows with raw SQL; return the rows they are in."""
    wr = trigger_workflow("flow", {"n": "bad"})
    write(wr, "payload", deep_json())
    circuit = EndpointCircuit.objects.create(endpoint_url=f"{http_url}/unrelated-{rep}", failures=2)
    write(circuit, "opened_at", "infinity")
    ticked = make_job(f"bad-cron-{rep}", schedule="* * * * *")
    write(ticked, "schedule_last_tick", "-infinity")
    kept = make_job(f"bad-retention-{rep}", retention_days=7)
    write(kept, "retention_days", 2**31 - 1)
    queued = make_run(make_job(f"bad-due-{rep}"))
    write(queued, "available_at", "-infinity")
    return {"workflow_run": wr, "circuit": circuit, "cron": ticked, "kept": kept, "queued": queued}


def fix_the_rows(rows: dict) -> None:
    """Put readable values back (the next clean drain runs without the rows)."""
    write(rows["circuit"], "opened_at", None)
    write(rows["cron"], "schedule_last_tick", None)
    write(rows["kept"], "retention_days", 7)
    write(rows["queued"], "available_at", timezone.now())


def old_runs(kept_days: int) -> list[int]:
    """Completed runs of a job that keeps ``kept_days``, finished a day longer ago."""
    job = make_job("short-lived", retention_days=kept_days)
    runs = [make_run(job, status="completed") for _ in range(20)]
    ended = timezone.now() - dt.timedelta(days=kept_days + 1)
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(finished_at=ended)
    return [r.pk for r in runs]


def _minute(at: dt.datetime) -> dt.datetime:
    return at.astimezone(dt.UTC).replace(second=0, microsecond=0)
