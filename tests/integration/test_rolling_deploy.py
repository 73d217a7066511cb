"""Rolling deploys: a run whose handler the claiming worker lacks waits for one that has it.

New code triggers a job before every worker runs that code. A worker of the
release before leaves the run (``handler.waiting``, 5 s at a time, no attempt
spent) for ``STRAIT["UNKNOWN_HANDLER_GRACE"]``; past it, the run fails as
``handler.unknown``, as it did at once before.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import textwrap
import time

import pytest
from django.utils import timezone

from django_strait import trigger
from django_strait.models import Job, JobRun, RunAttempt, RunHold
from django_strait.rules.handlers import handlers
from django_strait.services.breaker import CircuitBreaker
from django_strait.storage import backend
from django_strait.worker.catalog import Catalog
from django_strait.worker.gate import HANDLER_WAIT, Gate
from tests.conftest import ROOT, worker_command

pytestmark = pytest.mark.django_db(transaction=True)


def new_release_job(name: str = "rolled-out") -> Job:
    """A job whose handler is in no code this process has imported (the next release's)."""
    return Job.objects.create(name=name, handler=f"nextrelease.jobs.{name.replace('-', '_')}")


def test_a_worker_without_the_handler__leaves_the_run_queued_for_another(burst, caplog):
    job = new_release_job()
    run = trigger(job.name, {"n": 1})
    before = timezone.now()

    with caplog.at_level("WARNING", logger="django_strait.worker.gate"):
        burst()

    run.refresh_from_db()
    assert (run.status, run.attempt, run.error_type) == ("queued", 0, "handler.waiting")
    assert "waiting for a worker that has handler 'nextrelease.jobs.rolled_out'" in run.last_error
    assert "fails as handler.unknown if none has taken it by" in run.last_error
    assert before + HANDLER_WAIT <= run.available_at <= timezone.now() + HANDLER_WAIT
    assert not RunAttempt.objects.filter(run_id=run.pk).exists()
    [period] = RunHold.objects.filter(run_id=run.pk)
    assert period.reason == "handler.waiting"
    [line] = [r.getMessage() for r in caplog.records if getattr(r, "job", "") == job.name]
    assert "handler 'nextrelease.jobs.rolled_out' is not registered in this worker" in line
    assert "up to 300 s" in line


def test_the_admin__shows_a_waiting_run_and_why(burst, admin_client):
    run = trigger(new_release_job("shown").name, {})
    burst()

    listed = admin_client.get("/admin/django_strait/jobrun/?status=queued").content.decode()
    page = admin_client.get(f"/admin/django_strait/jobrun/{run.pk}/change/").content.decode()

    assert "handler.waiting" in listed
    assert "waiting for a worker that has handler &#x27;nextrelease.jobs.shown&#x27;" in page
    assert 'data-kind="hold"' in page  # a band on the run's timeline


def test_a_worker_with_the_handler__runs_it_once_it_is_due_again(burst):
    job = new_release_job("picked-up")
    run = trigger(job.name, {"n": 2})
    burst()  # the old release's worker: held
    handlers.put(job.handler, lambda payload: {"ran": payload["n"]})  # the new release's
    try:
        JobRun.objects.filter(pk=run.pk).update(available_at=timezone.now())  # 5 s later
        burst()
    finally:
        handlers._by_name.pop(job.handler)

    run.refresh_from_db()
    assert (run.status, run.attempt, run.result) == ("completed", 1, {"ran": 2})


def test_past_the_grace__the_run_fails_as_handler_unknown(burst, settings):
    settings.STRAIT = {**settings.STRAIT, "UNKNOWN_HANDLER_GRACE": "1s"}
    run = trigger(new_release_job("never-deployed").name, {})
    burst()
    run.refresh_from_db()
    assert run.status == "queued"
    assert run.available_at - run.updated_at <= dt.timedelta(seconds=1)  # the grace, not 5 s

    time.sleep(max(0.0, (run.available_at - timezone.now()).total_seconds()) + 0.05)
    burst()

    run.refresh_from_db()
    assert (run.status, run.error_type, run.attempt) == ("dead_letter", "handler.unknown", 1)
    assert "'nextrelease.jobs.never_deployed' is not a registered handler" in run.last_error


def test_the_grace__counts_from_the_first_hold_whichever_worker_made_it(burst, settings):
    settings.STRAIT = {**settings.STRAIT, "UNKNOWN_HANDLER_GRACE": "60s"}
    run = trigger(new_release_job("long-wait").name, {})
    burst(worker_id="old-1")
    began = RunHold.objects.get(run_id=run.pk).started_at
    # The wait has lasted 61 s by the time another old worker claims it.
    RunHold.objects.filter(run_id=run.pk).update(started_at=began - dt.timedelta(seconds=61))
    JobRun.objects.filter(pk=run.pk).update(available_at=timezone.now())

    burst(worker_id="old-2")

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "handler.unknown")


def test_the_gate__reads_nothing_more_when_every_handler_is_known(django_assert_num_queries):
    # The hot path: a batch of runs whose handlers this worker has costs the step no
    # statement (the hold periods are read only for runs it cannot run).
    storage = backend()
    catalog = Catalog(using=storage.alias)
    gate = Gate(storage, catalog, CircuitBreaker(storage))
    runs = [trigger("test-noop", {}) for _ in range(3)]
    claimed = _claim(storage, len(runs))
    catalog.ensure({r.job_id for r in claimed})

    with django_assert_num_queries(0):
        assert gate.invalid_holds(claimed, timezone.now()) == []


def _claim(storage, limit: int):
    with storage.claim_transaction():
        return storage.claim("w", queues=(), limit=limit, now=timezone.now(), floors=None)


@pytest.mark.slow
def test_a_rolling_deploy__an_old_worker_holds_the_new_job_and_a_new_worker_runs_it(
    tmp_path, worker_env
):
    # Two releases as two worker processes on one database: the new one has an app
    # the old one lacks. The old worker claims first and leaves the run; the new one,
    # started after, runs it within a wait (5 s) of the hold.
    (tmp_path / "newapp").mkdir()
    (tmp_path / "newapp" / "__init__.py").write_text("")
    (tmp_path / "newapp" / "jobs.py").write_text(
        textwrap.dedent("""
        from django_strait import job

        @job(name="shiny-new")
        def shiny_new(payload):
            return {"new": payload["n"]}
        """)
    )
    (tmp_path / "new_release.py").write_text(
        "from tests.settings import *\nINSTALLED_APPS = [*INSTALLED_APPS, 'newapp']\n"
    )
    new = {
        **worker_env,
        "PYTHONPATH": f"{tmp_path}:{ROOT}",
        "DJANGO_SETTINGS_MODULE": "new_release",
    }
    Job.objects.create(name="shiny-new", handler="newapp.jobs.shiny_new")
    run = trigger("shiny-new", {"n": 3})

    old = subprocess.run(
        worker_command("--burst", "--worker-id", "old-release"),
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert old.returncode == 0, old.stderr
    assert "handler 'newapp.jobs.shiny_new' is not registered in this worker" in old.stderr
    assert "1 run left waiting: 1 held (handler.waiting)" in old.stdout, old.stdout
    run.refresh_from_db()
    assert (run.status, run.error_type) == ("queued", "handler.waiting")

    worker = subprocess.Popen(
        worker_command("--worker-id", "new-release"), cwd=ROOT, env=new,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.status == "completed":
                break
            time.sleep(0.2)
    finally:
        worker.terminate()
        output = worker.communicate(timeout=60)[0]
    assert (run.status, run.result, run.attempt) == ("completed", {"new": 3}, 1), output
    assert RunAttempt.objects.get(run_id=run.pk).worker == "new-release"


def test_setting__is_read_and_checked(settings):
    from django_strait.conf import strait_settings

    assert strait_settings.UNKNOWN_HANDLER_GRACE == 300.0
    settings.STRAIT = {**settings.STRAIT, "UNKNOWN_HANDLER_GRACE": "-1s"}
    assert any("UNKNOWN_HANDLER_GRACE" in str(e) for e in strait_settings.errors())
