"""API keys limited to queues on the OJS endpoints: a billing worker's key and an email
worker's key see disjoint work (docs/ojs.md, "Queue-scoped keys").

Naming a queue outside the key's to fetch from or enqueue into is 403 (the key's
limit, named); a job of another queue is 404 wherever it is named by id (as if it
did not exist: the key cannot even learn the id is taken); lists leave it out.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_strait.api.auth import issue_key
from django_strait.models import ApiKey, JobRun

pytestmark = pytest.mark.django_db

OJS = "application/openjobspec+json"
EVERY_OJS_SCOPE = ["jobs:trigger", "jobs:read", "jobs:write", "runs:read", "runs:write",
                   "dlq:read", "dlq:replay"]  # fmt: skip


def client_for(queues: list[str]) -> Client:
    _, key = issue_key(f"key-{'-'.join(queues) or 'all'}", EVERY_OJS_SCOPE, queues=queues)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def post(client: Client, path: str, body: Any) -> Any:
    return client.post(path, data=json.dumps(body), content_type=OJS)


def enqueue(client: Client, queue: str, kind: str = "work.do") -> str:
    made = post(client, "/ojs/v1/jobs", {"type": kind, "args": [], "options": {"queue": queue}})
    assert made.status_code == 201, made.content
    return made.json()["job"]["id"]


def fetch(client: Client, queues: list[str], worker: str) -> Any:
    return post(client, "/ojs/v1/workers/fetch",
                {"queues": queues, "count": 10, "worker_id": worker})  # fmt: skip


@pytest.fixture
def billing() -> Client:
    return client_for(["billing"])


@pytest.fixture
def email() -> Client:
    return client_for(["email"])


def test_two_workers_keys__fetch_disjoint_work(billing, email):
    invoices = {enqueue(billing, "billing") for _ in range(3)}
    mails = {enqueue(email, "email") for _ in range(3)}

    got_billing = {j["id"] for j in fetch(billing, ["billing"], "b").json()["jobs"]}
    got_email = {j["id"] for j in fetch(email, ["email"], "e").json()["jobs"]}

    assert (got_billing, got_email) == (invoices, mails)


@pytest.mark.parametrize("queues", [["email"], ["billing", "email"]])
def test_fetch__from_a_queue_outside_the_key_is_a_403_naming_it(billing, email, queues):
    enqueue(email, "email")

    response = fetch(billing, queues, "b")

    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden"
    assert error["message"].startswith(f"queues[{queues.index('email')}]: ")
    assert "'billing'" in error["message"] and "'email' is not one of them" in error["message"]
    assert JobRun.objects.get().status == "queued"


def test_enqueue__into_a_queue_outside_the_key_is_a_403_and_nothing_is_queued(billing):
    response = post(billing, "/ojs/v1/jobs", {"type": "work.do", "args": [],
                                               "options": {"queue": "email"}})  # fmt: skip
    default = post(billing, "/ojs/v1/jobs", {"type": "work.do", "args": []})
    batch = post(billing, "/ojs/v1/jobs/batch", {"jobs": [
        {"type": "work.do", "args": [], "options": {"queue": "billing"}},
        {"type": "work.do", "args": [], "options": {"queue": "email"}}]})  # fmt: skip

    assert response.status_code == default.status_code == batch.status_code == 403
    assert response.json()["error"]["message"].startswith("options.queue: ")
    assert batch.json()["error"]["message"].startswith("jobs[1].options.queue: ")
    assert not JobRun.objects.exists()


def test_another_queue_s_job__is_404_to_ack_nack_read_cancel_and_heartbeat(billing, email):
    mail = enqueue(email, "email")
    fetch(email, ["email"], "e")
    before = JobRun.objects.values().get()

    answers = [
        post(billing, "/ojs/v1/workers/ack", {"job_id": mail, "result": 1}),
        post(billing, "/ojs/v1/workers/nack", {"job_id": mail, "error": {"message": "x"}}),
        billing.get(f"/ojs/v1/jobs/{mail}"),
        billing.delete(f"/ojs/v1/jobs/{mail}"),
    ]
    beat = post(billing, "/ojs/v1/workers/heartbeat", {"worker_id": "e", "active_jobs": [mail]})

    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert all(a.json()["error"]["code"] == "not_found" for a in answers)
    assert beat.json()["jobs_extended"] == []
    assert JobRun.objects.values().get() == before
    assert post(email, "/ojs/v1/workers/ack", {"job_id": mail, "worker_id": "e"}).status_code == 200


def test_events_and_dead_letters__show_only_the_key_s_queues(billing, email, settings):
    dead = {"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}
    for client, queue in ((billing, "billing"), (email, "email")):
        made = post(client, "/ojs/v1/jobs", {"type": "work.do", "args": [],
                                              "options": {"queue": queue, **dead}})  # fmt: skip
        job_id = made.json()["job"]["id"]
        fetch(client, [queue], "w")
        post(client, "/ojs/v1/workers/nack", {"job_id": job_id, "error": {"message": "no"}})
    mail = JobRun.objects.get(queue="email").ojs_id

    events = billing.get("/ojs/v1/events").json()["events"]
    listed = billing.get("/ojs/v1/dead-letter").json()["jobs"]
    stats = billing.get("/ojs/v1/admin/dead-letter/stats").json()

    assert {e["data"]["queue"] for e in events} == {"billing"}
    assert [j["queue"] for j in listed] == ["billing"] and stats["by_queue"] == {"billing": 1}
    assert billing.get(f"/ojs/v1/dead-letter/{mail}").status_code == 404
    assert post(billing, f"/ojs/v1/dead-letter/{mail}/retry", {}).status_code == 404
    assert billing.delete(f"/ojs/v1/dead-letter/{mail}").status_code == 404
    assert JobRun.objects.get(ojs_id=mail).status == "dead_letter"


def test_cron__registrations_of_another_queue_are_refused_hidden_and_404(billing, email):
    template = {"type": "mail.digest", "args": [], "options": {"queue": "email"}}
    mine = post(email, "/ojs/v1/cron", {"name": "digest", "expression": "@daily",
                                         "job_template": template})  # fmt: skip
    refused = post(billing, "/ojs/v1/cron", {"name": "digest2", "expression": "@daily",
                                              "job_template": template})  # fmt: skip
    taken = post(billing, "/ojs/v1/cron", {"name": "digest", "expression": "@daily",
                                            "job_template": {**template, "options": {"queue": "billing"}}})  # fmt: skip

    assert mine.status_code == 201
    assert refused.status_code == 403
    assert refused.json()["error"]["message"].startswith("job_template.options.queue: ")
    assert taken.status_code == 403
    assert billing.get("/ojs/v1/cron").json()["crons"] == []
    assert billing.get("/ojs/v1/cron/digest").status_code == 404
    assert billing.delete("/ojs/v1/cron/digest").status_code == 404
    assert [c["name"] for c in email.get("/ojs/v1/cron").json()["crons"]] == ["digest"]


def test_a_key_without_queues__works_on_every_queue_as_before(billing, email):
    everything = client_for([])
    ids = {enqueue(billing, "billing"), enqueue(email, "email")}

    got = {j["id"] for j in fetch(everything, ["billing", "email"], "any").json()["jobs"]}

    assert got == ids


def test_a_key_whose_stored_queues_are_unreadable__may_use_no_queue(billing):
    enqueue(billing, "billing")
    ApiKey.objects.update(queues={"billing": True})

    response = fetch(billing, ["billing"], "b")

    assert response.status_code == 403
    assert JobRun.objects.get().status == "queued"
