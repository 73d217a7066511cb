"""API keys limited to queues on the REST API: they read, trigger, replay, cancel and discard
only runs of their queues (docs/api.md, "Keys limited to queues").

A row of another queue is 404 wherever it is named by id, and left out of every
list; putting runs into another queue is 403 naming ``queue``; workflows, which
span queues, are 403. A key without queues works on every queue as before.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from django_strait import define_workflow
from django_strait.api.auth import issue_key
from django_strait.models import Job, JobRun, WebhookDelivery
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

API = "/api/strait"


def client_for(queues: list[str]) -> APIClient:
    _, key = issue_key(f"key-{'-'.join(queues) or 'all'}", ["*"], queues=queues)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


@pytest.fixture
def billing() -> APIClient:
    return client_for(["billing"])


@pytest.fixture
def rows() -> dict[str, JobRun]:
    invoice = make_job("invoice", queue="billing")
    mail = make_job("mail", queue="email")
    return {
        "invoice": make_run(invoice, status="queued"),
        "mail": make_run(mail, status="queued"),
        "dead_invoice": make_run(invoice, status="dead_letter"),
        "dead_mail": make_run(mail, status="dead_letter"),
    }


def ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_lists__show_only_the_key_s_queues(billing, rows):
    assert ids(billing.get(f"{API}/runs/")) == {rows["invoice"].pk, rows["dead_invoice"].pk}
    assert ids(billing.get(f"{API}/runs/?queue=email")) == set()
    assert ids(billing.get(f"{API}/dead-letters/")) == {rows["dead_invoice"].pk}
    jobs = billing.get(f"{API}/jobs/").json()["results"]
    assert [j["name"] for j in jobs] == ["invoice"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "runs/{mail}/"), ("post", "runs/{mail}/cancel/"), ("post", "runs/{dead_mail}/replay/"),
     ("get", "runs/{mail}/deliveries/"), ("post", "dead-letters/{dead_mail}/replay/"),
     ("post", "dead-letters/{dead_mail}/discard/"), ("get", "jobs/mail/"),
     ("patch", "jobs/mail/"), ("post", "jobs/mail/pause/")],
)  # fmt: skip
def test_a_row_of_another_queue__is_404(billing, rows, method, path):
    before = list(JobRun.objects.order_by("pk").values())
    url = f"{API}/" + path.format(**{k: r.pk for k, r in rows.items()})

    response = getattr(billing, method)(url, {}, format="json")

    assert response.status_code == 404, response.content
    assert list(JobRun.objects.order_by("pk").values()) == before
    assert Job.objects.get(name="mail").enabled


def test_bulk_replay__replays_only_the_key_s_dead_letters(billing, rows):
    response = billing.post(f"{API}/dead-letters/replay/", {"all": True}, format="json")

    assert response.json() == {"replayed": 1}
    assert JobRun.objects.get(pk=rows["dead_mail"].pk).status == "dead_letter"
    assert JobRun.objects.get(pk=rows["dead_invoice"].pk).status == "queued"


@pytest.mark.parametrize(
    ("path", "body"),
    [("jobs/invoice/trigger/", {"queue": "email"}), ("jobs/mail/trigger/", {}),
     ("jobs/invoice/bulk-trigger/", {"payloads": [{}], "queue": "email"}),
     ("jobs/", {"name": "newsletter", "handler": "tests.testapp.jobs.noop", "queue": "email"}),
     ("jobs/", {"name": "newsletter", "handler": "tests.testapp.jobs.noop"})],
)  # fmt: skip
def test_putting_runs_into_another_queue__is_403_naming_queue(billing, rows, path, body):
    before = JobRun.objects.count()

    response = billing.post(f"{API}/{path}", body, format="json")

    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "permission_denied" and list(error["details"]) == ["queue"]
    assert "'billing'" in error["message"]
    assert JobRun.objects.count() == before and not Job.objects.filter(name="newsletter").exists()


def test_moving_a_job_to_another_queue__is_403(billing, rows):
    response = billing.patch(f"{API}/jobs/invoice/", {"queue": "email"}, format="json")

    assert response.status_code == 403
    assert Job.objects.get(name="invoice").queue == "billing"


def test_triggering_into_the_key_s_queue__works(billing, rows):
    response = billing.post(f"{API}/jobs/invoice/trigger/", {"payload": {"n": 1}}, format="json")
    into = billing.post(f"{API}/jobs/mail/trigger/", {"queue": "billing"}, format="json")

    assert response.status_code == into.status_code == 202
    assert JobRun.objects.get(pk=into.json()["id"]).queue == "billing"


def test_workflows__are_403_to_a_key_limited_to_queues(billing, rows):
    define_workflow("close-month", steps=[{"name": "a", "job": "invoice"}])

    answers = [billing.post(f"{API}/workflows/close-month/trigger/", {}, format="json"),
               billing.get(f"{API}/workflow-runs/")]  # fmt: skip

    assert [a.status_code for a in answers] == [403, 403]


def test_redelivering_another_queue_s_webhook__is_404(billing, rows):
    delivery = WebhookDelivery.objects.create(run=rows["mail"], event="run.completed",
                                              url="https://hooks.example.com/x")  # fmt: skip

    response = billing.post(f"{API}/deliveries/{delivery.pk}/redeliver/")

    assert response.status_code == 404


def test_a_key_without_queues__works_on_every_queue(rows):
    everything = client_for([])

    assert ids(everything.get(f"{API}/runs/")) == {r.pk for r in rows.values()}
    assert everything.post(f"{API}/jobs/mail/trigger/", {}, format="json").status_code == 202
