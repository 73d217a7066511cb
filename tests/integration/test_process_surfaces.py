"""Process execution on every write path and view: API, admin, @job (docs/process-execution.md, docs/security.md)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from django_strait import job
from django_strait.api.auth import issue_key
from django_strait.models import Job, JobPresetRecommendation, RunAttempt
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def api() -> APIClient:
    cache.clear()
    _, key = issue_key("all", ["*"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


PROCESS_JOB = {"name": "crunch", "handler": "tests.testapp.jobs.noop", "execution": "process"}


def test_api__creates_a_process_job_with_a_preset(api):
    response = api.post("/api/strait/jobs/", {**PROCESS_JOB, "preset": "small-1x"}, format="json")

    assert response.status_code == 201, response.json()
    assert (response.json()["execution"], response.json()["preset"]) == ("process", "small-1x")
    assert Job.objects.get(name="crunch").preset == "small-1x"


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({**PROCESS_JOB, "execution": "fork"}, "execution", '"fork" is not a valid choice'),
        ({**PROCESS_JOB, "preset": "huge"}, "preset", "allowed: micro, small-1x, small-2x"),
        ({**PROCESS_JOB, "preset": "x" * 51}, "preset", "no more than 50 characters"),
        ({**PROCESS_JOB, "preset": 7}, "preset", "allowed: micro"),
        ({**PROCESS_JOB, "execution": "thread", "preset": "micro"}, "preset", "execution='proc"),
        (
            {"name": "hook", "endpoint_url": "http://127.0.0.1:9/x", "execution": "process"},
            "execution",
            "for Python jobs",
        ),
    ],
)
def test_api__a_bad_execution_or_preset_is_a_400_naming_the_field(api, body, field, fragment):
    response = api.post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert fragment in " ".join(details[field]), details
    assert not Job.objects.exists()


def test_api__run_detail_shows_each_attempts_preset(api):
    run = make_run(make_job(execution="process"), status="completed", attempts=2, preset="small-1x")
    RunAttempt.objects.filter(run=run, number=1).update(outcome="oom", preset="micro")
    RunAttempt.objects.filter(run=run, number=2).update(preset="small-1x")

    body = api.get(f"/api/strait/runs/{run.pk}/").json()

    assert body["preset"] == "small-1x"
    assert [(a["outcome"], a["preset"]) for a in body["attempts"]] == [
        ("oom", "micro"),
        ("succeeded", "small-1x"),
    ]


def test_admin__job_page_shows_the_recommended_preset_while_it_lasts(admin_client):
    crunch = make_job("crunch", execution="process")
    until = timezone.now() + dt.timedelta(hours=3)
    JobPresetRecommendation.objects.create(
        job=crunch, preset="small-2x", expires_at=until, updated_at=timezone.now()
    )
    page = admin_client.get(reverse("admin:django_strait_job_change", args=[crunch.pk]))
    assert "small-2x (after an out-of-memory kill; until" in page.content.decode()

    JobPresetRecommendation.objects.update(expires_at=timezone.now())
    page = admin_client.get(reverse("admin:django_strait_job_change", args=[crunch.pk]))
    assert "small-2x" not in page.content.decode()


def test_admin__run_page_shows_the_preset_of_each_attempt(admin_client):
    run = make_run(make_job(execution="process"), status="dead_letter", attempts=1)
    RunAttempt.objects.filter(run=run).update(outcome="oom", preset="small-2x")

    page = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))

    assert page.status_code == 200
    assert "small-2x" in page.content.decode()


def test_admin__refuses_a_preset_not_in_the_chain_naming_it(admin_client):
    crunch = make_job("crunch", execution="process")
    url = reverse("admin:django_strait_job_change", args=[crunch.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k != "headers"}
    data.update(preset="giant", headers="{}", fallback_endpoint_urls="[]")
    data["non_retryable_errors"] = "[]"

    page = admin_client.post(url, data)

    assert page.status_code == 200
    assert "&#x27;giant&#x27; is not a preset" in page.content.decode()
    assert Job.objects.get(pk=crunch.pk).preset == ""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"execution": "fork"}, "@job(execution='fork'): must be 'thread' or 'process'"),
        ({"preset": "micro"}, "@job(preset='micro') needs execution='process'"),
        ({"execution": "process", "preset": ""}, "@job(preset=''): must be the name"),
    ],
)
def test_job_decorator__refuses_bad_execution_options_naming_them(options, message):
    with pytest.raises(ValueError) as caught:
        job(name="bad-options", **options)(lambda payload: None)
    assert str(caught.value).startswith(message)


def test_job_decorator__an_unknown_preset_is_refused_when_its_row_is_written():
    from django_strait.services import registry, syncing

    handler = job(name="too-big", execution="process", preset="planet")(lambda payload: None)
    try:
        with pytest.raises(ValueError, match="not a preset; allowed: micro, small-1x, small-2x"):
            syncing.sync(handler)
    finally:
        registry._registry.pop("too-big", None)


def test_admin__a_job_form_posted_without_execution_keeps_the_jobs(admin_client):
    crunch = make_job("crunch", execution="process", preset="small-1x")
    url = reverse("admin:django_strait_job_change", args=[crunch.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k != "headers"}
    data.update(headers="{}", fallback_endpoint_urls="[]", non_retryable_errors="[]")
    data["webhook_events"] = json.dumps(form.initial["webhook_events"])  # a JSON field's text
    del data["execution"]

    page = admin_client.post(url, data)

    assert page.status_code == 302, page.context["adminform"].form.errors
    assert Job.objects.get(pk=crunch.pk).execution == "process"
