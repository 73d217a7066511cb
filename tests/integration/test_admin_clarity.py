"""What an operator reads on the admin's pages says what is true (issue 15's clarity fixes)."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from django_strait.duties import registry
from django_strait.models import EndpointCircuit, EndpointHealth, Job
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/orders"


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def test_an_endpoint_answering_only_404_says_why_it_still_reads_healthy(admin_client):
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=0.0, failure_rate=0.0,
                                  latency_p95_ms=40.0, samples=69)  # fmt: skip
    make_job("orders", endpoint_url=URL)

    for page in ("endpointhealth", "job"):
        body = text(admin_client.get(reverse(f"admin:django_strait_{page}_changelist")))
        assert "mostly 4xx" in body, page
        assert "only 0% of its answers were 2xx" in body and "not lower its health" in body


@pytest.mark.parametrize(("success", "failure"), [(0.98, 0.01), (0.45, 0.4)])
def test_an_endpoint_whose_answers_are_mostly_2xx_or_failures_gets_no_note(
    admin_client, success, failure
):
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=success, failure_rate=failure,
                                  latency_p95_ms=40.0, samples=500)  # fmt: skip
    body = text(admin_client.get(reverse("admin:django_strait_endpointhealth_changelist")))
    assert "mostly 4xx" not in body


def reset(admin_client, action: str):
    circuit = EndpointCircuit.objects.create(endpoint_url=URL, state="open", failures=9,
                                             opened_at=timezone.now())  # fmt: skip
    return admin_client.post(
        reverse("admin:django_strait_endpointcircuit_changelist"),
        {"action": action, "_selected_action": [circuit.pk]},
        follow=True,
    )


def test_resetting_the_circuit_of_an_unhealthy_endpoint_says_health_still_holds_its_runs(
    admin_client,
):
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=0.1, failure_rate=0.9,
                                  latency_p95_ms=9000.0, samples=50)  # fmt: skip
    said = messages_of(reset(admin_client, "reset_circuits"))
    assert said[0] == ("success", "Reset 1 circuit(s).")
    level, warning = said[1]
    assert level == "warning" and f"Still unhealthy: {URL} (" in warning
    assert "stay held by health" in warning and "Reset health of selected endpoints too" in warning
    assert EndpointCircuit.objects.get().state == "closed"


def test_reset_health_too_forgets_the_score_and_closes_the_circuit(admin_client):
    EndpointHealth.objects.create(endpoint_url=URL, success_rate=0.1, failure_rate=0.9,
                                  latency_p95_ms=9000.0, samples=50)  # fmt: skip
    said = messages_of(reset(admin_client, "reset_health"))
    assert said == [("success", "Forgot the health score of 1 endpoint(s) and reset 1 "
                     "circuit(s): their runs are claimed again, and new answers score them "
                     "afresh.")]  # fmt: skip
    assert not EndpointHealth.objects.exists()
    assert EndpointCircuit.objects.get().state == "closed"


def test_resetting_a_healthy_endpoints_circuit_warns_of_nothing(admin_client):
    assert messages_of(reset(admin_client, "reset_circuits")) == [
        ("success", "Reset 1 circuit(s).")
    ]


def test_an_unfiltered_run_list_offers_no_show_all_of_itself(admin_client):
    job = make_job("mailer")
    for _ in range(3):
        make_run(job)
    runs = reverse("admin:django_strait_jobrun_changelist")
    assert "Show all" not in text(admin_client.get(runs))
    assert "Show all" in text(admin_client.get(runs, {"status__exact": "queued"}))


def test_a_jobs_retry_delays_read_empty_not_null_when_unset(admin_client):
    job = make_job("mailer")
    body = admin_client.get(reverse("admin:django_strait_job_change", args=[job.pk])).content
    field = re.search(rb'<textarea name="retry_delays_secs"[^>]*>([^<]*)</textarea>', body)
    assert field is not None and field.group(1).strip() == b""
    Job.objects.filter(pk=job.pk).update(retry_delays_secs=[1, 5])
    body = admin_client.get(reverse("admin:django_strait_job_change", args=[job.pk])).content
    assert b"[1, 5]" in body


def test_the_workers_list_offers_no_delete(admin_client):
    registry.register("worker-a", queues=["mail"], concurrency=4, using="default")
    body = text(admin_client.get(reverse("admin:django_strait_workerprocess_changelist")))
    assert "worker-a" in body and "delete_selected" not in body


def test_a_runs_page_is_titled_with_its_jobs_name(admin_client):
    run = make_run(make_job("partner-webhook"), status="completed")
    body = text(admin_client.get(reverse("admin:django_strait_jobrun_change", args=[run.pk])))
    assert f"<h1>run {run.pk} of partner-webhook (completed)</h1>" in body
    assert f"<title>run {run.pk} of partner-webhook (completed) |" in body
