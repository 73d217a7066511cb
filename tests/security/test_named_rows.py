"""Issue 41's bad rows, one at a time: each is set aside with an error that names its table,
id and field, the others go on, and a person can open it in the admin, fix it or delete it.

(All together, with real workers and their pace: test_poison_pace.py. Every table and
kind of bad value: test_poison_rows.py.)
"""

from __future__ import annotations

import datetime as dt
import logging
from decimal import Decimal

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from django_strait.duties.pruner import Pruner
from django_strait.duties.sampler import QueueSampler
from django_strait.duties.scheduler import Scheduler
from django_strait.models import EndpointCircuit, Job, JobRun, Project, QueueSample
from django_strait.storage import backend
from tests.integration.factories import make_job, make_run
from tests.security.poison import deep_json, write

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

NOW = timezone.now()


@pytest.fixture(autouse=True)
def on_postgres():
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("'infinity' and NaN are PostgreSQL values")


def test_scheduler__a_job_whose_last_tick_cannot_be_read_is_set_aside_and_cron_fires(caplog):
    bad, good = make_job("bad", schedule="* * * * *"), make_job("good", schedule="* * * * *")
    Job.objects.filter(pk__in=[bad.pk, good.pk]).update(created_at=NOW - dt.timedelta(minutes=5))
    write(bad, "schedule_last_tick", "-infinity")

    with caplog.at_level(logging.ERROR):
        result = Scheduler().run_once(NOW)

    assert (result.counts["fired"], result.counts["errors"]) == (1, 1)
    assert JobRun.objects.filter(job=good).count() == 1
    assert not JobRun.objects.filter(job=bad).exists()
    assert (
        f"django_strait_job id {bad.pk}, field schedule_last_tick: cannot be read "
        "(DataError: timestamp too small (before year 1): '-infinity')"
    ) in caplog.text


def test_pruner__a_retention_out_of_bounds_keeps_its_jobs_runs_and_the_others_are_pruned(caplog):
    bad, good = make_job("bad", retention_days=7), make_job("good", retention_days=7)
    old = [make_run(job, status="completed") for job in (bad, good)]
    JobRun.objects.filter(pk__in=[r.pk for r in old]).update(finished_at=NOW - dt.timedelta(days=8))
    write(bad, "retention_days", 2**31 - 1)

    with caplog.at_level(logging.ERROR):
        result = Pruner().run_once(NOW)

    assert result.counts["deleted"] == 1
    assert list(JobRun.objects.values_list("job__name", flat=True)) == ["bad"]
    assert (
        f"django_strait_job id {bad.pk}, field retention_days: must be a number from 1 to "
        "3,650; got 2147483647"
    ) in caplog.text


@pytest.mark.parametrize(("column", "value"), [("available_at", "-infinity"), ("payload", "deep")])
def test_pruner__a_run_past_retention_that_cannot_be_read_is_pruned_with_the_others(column, value):
    job = make_job("old")
    runs = [make_run(job, status="completed") for _ in range(3)]
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(
        finished_at=NOW - dt.timedelta(days=40)
    )
    write(runs[1], column, deep_json() if value == "deep" else value)

    result = Pruner().run_once(NOW)

    assert (result.counts["deleted"], JobRun.objects.count()) == (3, 0)


def test_queue_sampler__a_run_due_at_minus_infinity_is_counted_and_the_overview_answers(
    admin_client,
):
    make_job("q", queue="mail")
    runs = [make_run(Job.objects.get(name="q"), available_at=NOW - dt.timedelta(seconds=30))]
    runs.append(make_run(Job.objects.get(name="q")))
    write(runs[1], "available_at", "-infinity")

    result = QueueSampler().run_once(NOW)

    assert result.counts["sampled"] >= 1
    sample = QueueSample.objects.get(queue="mail")
    assert (sample.depth, sample.due) == (2, 2) and 29 <= sample.lag_seconds <= 60
    assert admin_client.get(reverse("admin:django_strait_overview")).status_code == 200
    runs_page = admin_client.get(reverse("admin:django_strait_jobrun_changelist"))
    assert runs_page.status_code == 200
    assert (
        "available_at cannot be read (DataError: timestamp too small" in runs_page.content.decode()
    )


def test_circuits__one_that_cannot_be_read_is_left_out_and_rewritten_by_its_next_failure(caplog):
    bad = EndpointCircuit.objects.create(endpoint_url="http://127.0.0.1:9/bad", failures=2)
    EndpointCircuit.objects.create(endpoint_url="http://127.0.0.1:9/ok", failures=1)
    write(bad, "opened_at", "infinity")
    storage = backend()

    with caplog.at_level(logging.ERROR):
        active = storage.load_active_circuits()
    written, _ = storage.apply_circuit_results(
        {bad.endpoint_url: ["failure"]}, now=NOW, threshold=5
    )

    assert list(active) == ["http://127.0.0.1:9/ok"]
    assert f"django_strait_endpointcircuit id {bad.pk}, field opened_at: cannot be read" in (
        caplog.text
    )
    assert [(c.state, c.failures) for c in written] == [("closed", 1)]
    assert EndpointCircuit.objects.get(pk=bad.pk).opened_at is None  # readable again


def test_admin__a_row_that_cannot_be_read_opens_says_which_field_and_can_be_fixed(admin_client):
    project = Project.objects.create(name="p", daily_budget=Decimal(10))
    write(project, "daily_budget", "NaN")
    page = reverse("admin:django_strait_project_change", args=[project.pk])

    opened = admin_client.get(page)
    saved = admin_client.post(page, {"name": "p", "daily_budget": "100", "soft_limit_ratio": "0.8"})

    assert opened.status_code == 200
    [message] = [str(m) for m in get_messages(opened.wsgi_request)]
    assert "This row cannot be read whole: daily_budget is NaN, not a finite number" in message
    assert saved.status_code == 302
    assert Project.objects.get(pk=project.pk).daily_budget == Decimal(100)


def test_admin__saving_resets_a_field_the_form_does_not_hold(admin_client):
    job = make_job("ticked", schedule="* * * * *")
    write(job, "schedule_last_tick", "infinity")
    page = reverse("admin:django_strait_job_change", args=[job.pk])
    form = admin_client.get(page).context["adminform"].form
    data = {
        name: value
        for name in form.fields
        if (value := form[name].value()) is not None and value is not False
    }

    saved = admin_client.post(page, data)

    assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert Job.objects.get(pk=job.pk).schedule_last_tick is None  # readable, and ticks anew


def test_admin__a_row_that_cannot_be_read_can_be_deleted(admin_client):
    job = make_job("unreadable")
    write(job, "headers", deep_json())
    delete = reverse("admin:django_strait_job_delete", args=[job.pk])

    assert admin_client.get(delete).status_code == 200
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()
