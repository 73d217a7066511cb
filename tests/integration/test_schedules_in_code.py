"""Schedules declared in code (``@job(schedule=...)``): synced at a worker's start, owned by code."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from django_strait import job
from django_strait.duties.scheduler import Scheduler
from django_strait.models import Job, JobRun
from django_strait.services import registry, syncing

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "code-scheduled"


def nightly(payload):
    return {"scheduled_for": payload["scheduled_for"]}


@pytest.fixture
def declare() -> Iterator:
    """``declare(**options)``: (re)declare ``nightly`` as the job NAME; forgotten afterwards."""
    yield lambda **options: job(name=NAME, **options)(nightly)
    registry._registry.pop(NAME, None)


def row() -> Job:
    return Job.objects.get(name=NAME)


def next_minute(at: dt.datetime) -> dt.datetime:
    return at.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)


def test_a_worker_start__writes_the_declared_schedule_and_the_scheduler_fires_it(declare, burst):
    declare(schedule="* * * * *", timezone="Europe/Paris", schedule_overlap="skip")
    assert not Job.objects.filter(name=NAME).exists()  # nothing triggered it

    burst()

    job_row = row()
    assert (job_row.schedule, job_row.timezone, job_row.schedule_missed) == (
        "* * * * *", "Europe/Paris", "run_once"
    )  # fmt: skip
    assert (job_row.schedule_overlap, job_row.schedule_in_code) == ("skip", True)
    tick = next_minute(job_row.created_at)
    assert Scheduler().run_once(tick + dt.timedelta(seconds=1)).counts["fired"] == 1
    run = JobRun.objects.get(job=job_row)
    assert run.payload == {"scheduled_for": tick.isoformat()}
    burst()
    assert JobRun.objects.get(pk=run.pk).result == {"scheduled_for": tick.isoformat()}


def test_code_wins__an_edited_schedule_is_written_back_at_the_next_sync(declare):
    declare(schedule="*/5 * * * *")
    syncing.sync_schedules()
    Job.objects.filter(name=NAME).update(schedule="0 3 * * *", timezone="Asia/Tokyo")

    syncing.sync_schedules()

    assert (row().schedule, row().timezone) == ("*/5 * * * *", "UTC")


def test_a_schedule_no_longer_declared__is_removed_from_the_row(declare):
    declare(schedule="*/5 * * * *")
    syncing.sync_schedules()
    declare()  # the same job, its schedule taken out of the code

    syncing.sync_schedules()

    assert (row().schedule, row().schedule_in_code) == ("", False)


def test_a_schedule_set_in_the_admin__stays_when_code_declares_none(declare):
    declare(queue="reports")
    syncing.sync_all()
    Job.objects.filter(name=NAME).update(schedule="0 3 * * *")

    syncing.sync_schedules()
    syncing.sync_all()

    assert (row().schedule, row().schedule_in_code, row().queue) == ("0 3 * * *", False, "reports")


def test_pausing__a_code_scheduled_job_stays_paused_through_syncs(declare):
    declare(schedule="* * * * *")
    syncing.sync_schedules()
    Job.objects.filter(name=NAME).update(enabled=False)  # "enabled" is the admin's

    syncing.sync_schedules()

    assert row().enabled is False


def test_the_admin__shows_what_code_declares_read_only_and_a_post_cannot_change_it(
    declare, admin_client
):
    declare(schedule="*/5 * * * *", queue="reports")
    syncing.sync_schedules()
    url = f"/admin/django_strait/job/{row().pk}/change/"

    page = admin_client.get(url).content.decode()

    assert (
        "*/5 * * * * (declared in code by tests.integration.test_schedules_in_code.nightly" in page
    )
    assert 'id="strait-declared-in-code"' in page and 'name="schedule"' not in page
    assert 'name="queue"' not in page and 'name="description"' in page
    form = {"name": NAME, "description": "edited", "schedule": "0 3 * * *", "queue": "x"}
    admin_client.post(url, form)
    assert (row().schedule, row().queue) == ("*/5 * * * *", "reports")


def test_the_api__refuses_to_change_what_code_declares_naming_the_field(declare, admin_user):
    from rest_framework.test import APIClient

    declare(schedule="*/5 * * * *")
    syncing.sync_schedules()
    api = APIClient()
    api.force_authenticate(admin_user)

    refused = api.patch(f"/api/strait/jobs/{NAME}/", {"schedule": "0 3 * * *"}, format="json")
    allowed = api.patch(f"/api/strait/jobs/{NAME}/", {"enabled": False}, format="json")

    assert refused.status_code == 400, refused.content
    assert "declared in code by tests.integration" in str(refused.json())
    assert "schedule" in str(refused.json())
    assert allowed.status_code == 200 and row().enabled is False
