"""Completion webhooks in the admin and the REST API: list, filter, inspect, redeliver; bounds."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from django_strait import transitions, trigger
from django_strait.models import Job, JobRun, WebhookDelivery
from tests.integration.factories import client_with, make_job

pytestmark = pytest.mark.django_db

DELIVERIES = reverse("admin:django_strait_webhookdelivery_changelist")


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


def ended_run(status: str = "delivered") -> tuple[JobRun, WebhookDelivery]:
    """A canceled run with a webhook, its delivery in ``status``."""
    job = make_job(webhook_url="https://hooks.example.com/strait")
    run = transitions.cancel(trigger(job.name, {}, delay=3600).pk)
    delivery = WebhookDelivery.objects.get(run=run)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=status, attempt=10 if status == "failed" else 1, last_status_code=503,
        last_error="HTTP 503 from https://hooks.example.com/strait", last_response="busy",
    )  # fmt: skip
    delivery.refresh_from_db()
    return run, delivery


# The admin


def test_admin_deliveries__list_filters_by_status(admin_client):
    _, delivered = ended_run("delivered")
    _, failed = ended_run("failed")

    everything = admin_client.get(DELIVERIES)
    only_failed = admin_client.get(DELIVERIES, {"status__exact": "failed"})

    assert everything.status_code == 200
    assert list(only_failed.context["cl"].result_list) == [failed]
    assert {d.pk for d in everything.context["cl"].result_list} == {delivered.pk, failed.pk}


def test_admin_run_page__lists_the_runs_deliveries(admin_client):
    run, delivery = ended_run("failed")

    page = admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk]))

    assert page.status_code == 200
    assert str(delivery.delivery_id) in page.text and "run.canceled" in page.text
    assert "HTTP 503 from https://hooks.example.com/strait" in page.text


def test_admin_redeliver__needs_its_permission_then_makes_the_delivery_due(client):
    _, delivery = ended_run("failed")
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_webhookdelivery"))
    client.force_login(viewer)
    action = {"action": "redeliver_selected", ACTION_CHECKBOX_NAME: [delivery.pk], "index": 0}

    assert client.post(DELIVERIES, action).status_code == 403
    viewer.user_permissions.add(Permission.objects.get(codename="redeliver_webhookdelivery"))
    client.post(DELIVERIES, action)

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempt) == ("pending", 0)
    assert delivery.next_attempt_at <= timezone.now()


def test_admin_job_form__refuses_unknown_webhook_events_naming_the_allowed_ones(admin_client):
    job = make_job()
    url = reverse("admin:django_strait_job_change", args=[job.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(webhook_url="https://hooks.example.com/x", webhook_events='["run.exploded"]')
    data.update({"fallback_endpoint_urls": "[]", "headers": "{}", "non_retryable_errors": "[]"})

    response = admin_client.post(url, data)

    assert response.status_code == 200  # the form again, with the error
    errors = response.context["adminform"].form.errors
    assert "run.exploded" in str(errors["webhook_events"]) and "run.completed" in str(
        errors["webhook_events"]
    )


# The REST API


def test_api_run_deliveries__lists_them_oldest_first():
    run, delivery = ended_run("failed")
    api = client_with("runs:read")

    response = api.get(f"/api/strait/runs/{run.pk}/deliveries/")

    assert response.status_code == 200
    [got] = response.json()["results"]
    assert got["delivery_id"] == str(delivery.delivery_id)
    assert (got["event"], got["status"], got["attempt"], got["last_status_code"]) == (
        "run.canceled", "failed", 10, 503
    )  # fmt: skip
    assert api.get("/api/strait/runs/999999/deliveries/").status_code == 404


def test_api_redeliver__needs_runs_write_then_resets_the_budget():
    _, delivery = ended_run("failed")
    url = f"/api/strait/deliveries/{delivery.pk}/redeliver/"

    assert client_with("runs:read").post(url).status_code == 403
    response = client_with("runs:write").post(url)

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["attempt"]) == ("pending", 0)
    assert (
        client_with("runs:write").post("/api/strait/deliveries/999999/redeliver/").status_code
        == 404
    )


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("webhook_events", ["run.completed", "run.exploded"], "run.exploded"),
        ("webhook_events", "run.completed", "A list of events"),
        ("webhook_events", ["run.failed", "run.failed"], "at most once"),
        ("webhook_retry", {"max_attempts": 0}, "webhook_retry.max_attempts"),
        ("webhook_retry", {"strategy": "sometimes"}, "webhook_retry.strategy"),
        ("webhook_retry", {"bogus": 1}, "bogus"),
        ("webhook_url", "ftp://hooks.example.com/x", "webhook_url"),
        ("webhook_url", "https://" + "a" * 2100 + ".com/", "webhook_url"),
    ],
)
def test_api_job__refuses_bad_webhook_fields_naming_them(field, value, says):
    api = client_with("jobs:write")
    body = {"name": "hooked", "handler": "tests.testapp.jobs.noop", field: value}

    response = api.post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 400, response.json()
    assert says in str(response.json()), response.json()
    assert not Job.objects.filter(name="hooked").exists()


def test_api_job__writes_webhook_fields_and_reads_them_back():
    api = client_with("jobs:write", "jobs:read")
    body = {
        "name": "hooked", "handler": "tests.testapp.jobs.noop",
        "webhook_url": "https://hooks.example.com/x", "webhook_events": ["run.failed"],
        "webhook_retry": {"max_attempts": 3, "initial_delay": "5s"},
    }  # fmt: skip

    assert api.post("/api/strait/jobs/", body, format="json").status_code == 201
    got = api.get("/api/strait/jobs/hooked/").json()

    assert (got["webhook_url"], got["webhook_events"]) == (
        "https://hooks.example.com/x", ["run.failed"]
    )  # fmt: skip
    assert got["webhook_retry"] == {"max_attempts": 3, "initial_delay": "5s"}


def test_admin_workflow_run_page__lists_its_deliveries(admin_client):
    from django_strait import define_workflow, trigger_workflow

    define_workflow(
        "hooked", [{"name": "a", "job": "wf-step"}], webhook_url="https://hooks.example.com/w"
    )
    wr = trigger_workflow("hooked", {})
    transitions.discard(wr.step_runs.get().run_id)  # the step fails: so does the workflow
    delivery = WebhookDelivery.objects.get(workflow_run=wr)

    page = admin_client.get(reverse("admin:django_strait_workflowrun_change", args=[wr.pk]))

    assert page.status_code == 200
    assert str(delivery.delivery_id) in page.text and "workflow.failed" in page.text
