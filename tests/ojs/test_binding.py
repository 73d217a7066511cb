"""What the conformance suite does not cover: auth and scopes, the content type setting,
the SDKs' heartbeat and cron forms, bad input, and OJS runs on the REST API."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from django_strait import trigger
from django_strait.api.auth import issue_key
from django_strait.duties.scheduler import Scheduler
from django_strait.models import Execution, Job, JobRun
from tests.integration.factories import client_with, make_job

pytestmark = pytest.mark.django_db

OJS = "application/openjobspec+json"


def post(client: Client, path: str, body: Any, **headers: str) -> Any:
    return client.post(path, data=json.dumps(body), content_type=OJS, **headers)


@pytest.fixture
def open_ojs(settings):
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": False}
    return Client()


def enqueue(client: Client, **body: Any) -> dict[str, Any]:
    response = post(client, "/ojs/v1/jobs", {"type": "mail.send", "args": [1], **body})
    assert response.status_code == 201, response.content
    return response.json()["job"]


def test_auth__required_by_default_with_the_ojs_error_shape():
    response = post(Client(), "/ojs/v1/jobs", {"type": "mail.send", "args": []})

    assert response.status_code == 401
    assert response["Content-Type"] == OJS and response["OJS-Version"] == "1.0"
    assert response.json()["error"]["code"] == "unauthorized"


def test_auth__a_bearer_key_is_allowed_by_its_scopes_only():
    _, key = issue_key("svc", ["jobs:trigger"])
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {key}"}

    made = post(Client(), "/ojs/v1/jobs", {"type": "mail.send", "args": []}, **bearer)
    fetched = post(Client(), "/ojs/v1/workers/fetch", {"queues": ["default"]}, **bearer)

    assert made.status_code == 201
    assert fetched.status_code == 403
    assert "runs:write" in fetched.json()["error"]["message"]


def test_content_type__setting_switches_every_answer(open_ojs, settings):
    settings.STRAIT = {**settings.STRAIT, "OJS_CONTENT_TYPE": "application/json"}

    response = open_ojs.get("/ojs/v1/health")

    assert response["Content-Type"] == "application/json"


def test_request_id__is_echoed_in_errors(open_ojs):
    response = open_ojs.get("/ojs/v1/jobs/nope", HTTP_X_REQUEST_ID="abc-123")

    assert response.status_code == 404
    assert response.json()["error"]["request_id"] == "abc-123"
    assert response["X-Request-ID"] == "abc-123"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "a.b", "args": ["\u0000"]}, "args"),
        (
            {"type": "a.b", "args": [], "options": {"visibility_timeout_ms": 0}},
            "visibility_timeout_ms",
        ),
        ({"type": "a.b", "args": [], "options": {"scheduled_at": "tomorrow"}}, "scheduled_at"),
        (
            {"type": "a.b", "args": [], "options": {"visibility_timeout_ms": 10**40}},
            "visibility_timeout_ms",
        ),
        ({"type": "a.b", "args": [], "options": {"priority": 10**40}}, "priority"),
        ({"type": "a.b", "args": ["\ud800"]}, "args"),
        (
            {"type": "a.b", "args": [], "options": {"retry": {"backoff_strategy": "random"}}},
            "retry",
        ),
    ],
)
def test_enqueue__bad_input_is_a_4xx_naming_the_field(open_ojs, body, field):
    response = post(open_ojs, "/ojs/v1/jobs", body)

    assert 400 <= response.status_code < 500, response.content
    assert field in response.json()["error"]["message"]
    assert not JobRun.objects.exists()


def test_enqueue__deep_nesting_is_invalid_payload(open_ojs):
    deep = "[" * 500 + "]" * 500
    text = '{"type": "a.b", "args": ' + deep + "}"

    response = open_ojs.post("/ojs/v1/jobs", data=text, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_payload"


def test_enqueue__a_type_naming_a_project_job_is_refused(open_ojs):
    make_job("mail.send")

    response = post(open_ojs, "/ojs/v1/jobs", {"type": "mail.send", "args": []})

    assert response.status_code == 409
    assert not JobRun.objects.exists()


def test_batch__is_all_or_nothing(open_ojs):
    good = {"type": "a.b", "args": []}
    response = post(open_ojs, "/ojs/v1/jobs/batch", {"jobs": [good, {"type": "A", "args": []}]})

    assert response.status_code == 400
    assert "jobs[1].type" in response.json()["error"]["message"]
    assert not JobRun.objects.exists()


def test_enqueue__makes_an_external_job_with_ojs_defaults(open_ojs):
    job = enqueue(open_ojs)

    row = Job.objects.get(name="mail.send")
    assert row.execution == Execution.EXTERNAL
    assert (job["max_attempts"], JobRun.objects.get().ojs_id.version) == (3, 7)


def test_heartbeat__the_js_and_go_form_extends_the_deadline(open_ojs):
    job = enqueue(open_ojs)
    fetch = {"queues": ["default"], "worker_id": "w", "visibility_timeout_ms": 1000}
    post(open_ojs, "/ojs/v1/workers/fetch", fetch)
    before = JobRun.objects.get().visible_until

    response = post(
        open_ojs,
        "/ojs/v1/workers/heartbeat",
        {
            "worker_id": "w",
            "active_jobs": 1,
            "active_job_ids": [job["id"]],
            "visibility_timeout_ms": 60000,
        },
    )

    assert response.json()["state"] == "running"
    assert JobRun.objects.get().visible_until > before + dt.timedelta(seconds=50)


def test_timeout_ms__caps_the_deadline_a_heartbeat_would_extend(open_ojs):
    job = enqueue(open_ojs, options={"timeout_ms": 2000})
    post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"], "visibility_timeout_ms": 60000})
    post(
        open_ojs,
        "/ojs/v1/workers/heartbeat",
        {"active_jobs": [job["id"]], "visibility_timeout_ms": 60000},
    )

    run = JobRun.objects.get()
    assert run.visible_until <= run.started_at + dt.timedelta(seconds=2)


def test_ack__after_cancel_of_an_active_job_is_a_conflict(open_ojs):
    job = enqueue(open_ojs)
    post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"]})
    assert open_ojs.delete(f"/ojs/v1/jobs/{job['id']}").json()["job"]["state"] == "cancelled"

    response = post(open_ojs, "/ojs/v1/workers/ack", {"job_id": job["id"], "result": {"x": 1}})

    assert response.status_code == 409
    assert JobRun.objects.get().status == "canceled"


def test_ack__result_is_stored_as_json(open_ojs):
    job = enqueue(open_ojs)
    post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"]})

    post(open_ojs, "/ojs/v1/workers/ack", {"job_id": job["id"], "result": {"n": [1, 2]}})

    assert JobRun.objects.get().result == {"n": [1, 2]}


def test_cron__the_sdk_form_fires_through_the_scheduler_with_the_template_args(open_ojs):
    response = post(
        open_ojs,
        "/ojs/v1/cron",
        {"name": "nightly", "cron": "* * * * *", "type": "report.build", "args": [7],
         "options": {"queue": "reports"}},
    )  # fmt: skip
    assert response.status_code == 201 and response.json()["cron_job"]["type"] == "report.build"
    Job.objects.filter(name="nightly").update(created_at=timezone.now() - dt.timedelta(minutes=5))

    Scheduler(interval=1.0).run_once(timezone.now())
    fetched = post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["reports"]}).json()["jobs"]

    assert [(j["type"], j["args"]) for j in fetched] == [("report.build", [7])]
    assert open_ojs.delete("/ojs/v1/cron/nightly").status_code == 200
    assert Job.objects.get(name="nightly").schedule == ""


def test_rest_api__shows_an_ojs_run_with_its_worker_and_errors(open_ojs):
    job = enqueue(open_ojs, options={"retry": {"max_attempts": 2}})
    post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"], "worker_id": "go-1"})
    post(
        open_ojs,
        "/ojs/v1/workers/nack",
        {"job_id": job["id"], "error": {"code": "boom", "message": "no"}},
    )
    run = JobRun.objects.get()

    body = client_with("runs:read").get(f"/api/strait/runs/{run.pk}/").json()

    assert (body["status"], body["error_type"], body["attempt"]) == ("queued", "boom", 1)
    assert [a["worker"] for a in body["attempts"]] == ["ojs:go-1"]


def test_python_trigger__of_an_external_job_is_fetched_with_a_new_id(open_ojs):
    Job.objects.create(name="ext.job", execution=Execution.EXTERNAL, ojs={"type": "ext.job"})
    trigger("ext.job", {"args": [5]})

    [job] = post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"]}).json()["jobs"]

    assert job["args"] == [5] and job["id"] == str(JobRun.objects.get().ojs_id)


def test_fetch__discards_expired_jobs_and_fills_the_count_with_the_rest(open_ojs):
    past = (timezone.now() - dt.timedelta(seconds=1)).isoformat()
    stale = [enqueue(open_ojs, options={"expires_at": past}) for _ in range(3)]
    fresh = enqueue(open_ojs, options={"expires_at": "+PT1H"})

    fetched = post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"], "count": 2}).json()

    assert [j["id"] for j in fetched["jobs"]] == [fresh["id"]]
    states = {open_ojs.get(f"/ojs/v1/jobs/{j['id']}").json()["job"]["state"] for j in stale}
    assert states == {"discarded"}
    assert JobRun.objects.filter(status="discarded", attempt=0).count() == 3


def test_heartbeat__a_worker_keeps_only_the_jobs_it_fetched(open_ojs):
    job = enqueue(open_ojs)
    post(open_ojs, "/ojs/v1/workers/fetch", {"queues": ["default"], "worker_id": "a"})
    before = JobRun.objects.get().visible_until

    other = post(
        open_ojs, "/ojs/v1/workers/heartbeat", {"worker_id": "b", "active_jobs": [job["id"]]}
    )
    mine = post(
        open_ojs, "/ojs/v1/workers/heartbeat", {"worker_id": "a", "active_jobs": [job["id"]]}
    )

    assert other.json()["jobs_extended"] == [] and mine.json()["jobs_extended"] == [job["id"]]
    assert JobRun.objects.get().visible_until > before


def test_job_detail__a_run_with_an_unreadable_payload_answers_naming_the_field(open_ojs):
    """An operator (or a worker) reading a bad run gets what can be read, not a 500."""
    from django.db import connection

    from tests.conftest import unreadable_json
    from tests.security.poison import write

    job = enqueue(open_ojs, args=[1, 2])
    run = JobRun.objects.get(ojs_id=job["id"])
    text, error = unreadable_json(connection.vendor)
    write(run, "payload", text)

    response = open_ojs.get(f"/ojs/v1/jobs/{job['id']}")

    assert response.status_code == 200, response.content
    body = response.json()["job"]
    assert (body["id"], body["state"], body["args"]) == (job["id"], "available", [])
    assert list(body["unreadable"]) == ["payload"]
    assert "payload: cannot be read (" + error in body["unreadable"]["payload"]
