"""Level 4 and the admin API with keys limited to queues or scopes (docs/ojs.md, "Queues").

A key limited to queues reads, pauses and retries only its queues (403 naming the
queue it may not use, 404 for another queue's job by id), and its unique policies
meet duplicates only in its own queues; pause needs ``jobs:write``.
"""

from __future__ import annotations

import pytest
from django.test import Client

from django_strait.api.auth import issue_key
from django_strait.models import JobRun, QueueState
from tests.ojs.test_queue_scopes import client_for, enqueue, post

pytestmark = pytest.mark.django_db


def test_a_key_limited_to_queues_sees_and_pauses_only_its_queues() -> None:
    billing, every = client_for(["billing"]), client_for([])
    enqueue(every, "email")
    mine = enqueue(billing, "billing")
    theirs = enqueue(every, "email", "mail.send")
    for path in ("/ojs/v1/queues/email/stats", "/ojs/v1/admin/queues/email"):
        refused = billing.get(path)
        assert refused.status_code == 403 and "email" in refused.json()["error"]["message"], path
    for path in ("/ojs/v1/queues/email/pause", "/ojs/v1/admin/queues/email/pause"):
        assert post(billing, path, {}).status_code == 403, path
    assert not QueueState.objects.filter(name="email").exists()
    assert [q["name"] for q in billing.get("/ojs/v1/queues").json()["queues"]] == ["billing"]
    assert [q["name"] for q in billing.get("/ojs/v1/admin/queues").json()["items"]] == ["billing"]
    assert [j["id"] for j in billing.get("/ojs/v1/admin/jobs").json()["items"]] == [mine]
    assert billing.get(f"/ojs/v1/admin/jobs/{theirs}").status_code == 404
    assert billing.get("/ojs/v1/admin/stats").json()["jobs"]["available"] == 1
    stats = every.get("/ojs/v1/queues/email/stats").json()
    assert (stats["queue"]["name"], stats["queue"]["available"]) == ("email", 2)


def test_unique_policies_meet_duplicates_only_in_the_keys_queues() -> None:
    billing, every = client_for(["billing"]), client_for([])
    job = {"type": "u.scoped", "args": [1], "options": {"unique": {"keys": ["type", "args"]}}}
    other = post(every, "/ojs/v1/jobs", {**job, "options": {**job["options"], "queue": "email"}})
    assert other.status_code == 201
    # The email job has the same key, but the billing key cannot learn it exists.
    made = post(billing, "/ojs/v1/jobs", {**job, "options": {**job["options"], "queue": "billing"}})
    assert made.status_code == 201, made.content
    again = post(
        billing, "/ojs/v1/jobs", {**job, "options": {**job["options"], "queue": "billing"}}
    )
    assert again.status_code == 409
    assert again.json()["error"]["details"]["existing_job_id"] == made.json()["job"]["id"]


def test_pause_needs_jobs_write_and_bulk_retry_needs_confirm_and_dlq_replay() -> None:
    _, key = issue_key("reader", ["runs:read"])
    reader = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert post(reader, "/ojs/v1/queues/q/pause", {}).status_code == 403
    assert reader.get("/ojs/v1/queues/q/stats").status_code == 200
    assert post(reader, "/ojs/v1/admin/jobs/bulk/retry", {"confirm": True}).status_code == 403
    every = client_for([])
    refused = post(every, "/ojs/v1/admin/jobs/bulk/retry", {"filter": {}, "confirm": "yes"})
    assert refused.status_code == 400 and refused.json()["error"]["details"]["field"] == "confirm"
    run_id = enqueue(every, "q")
    JobRun.objects.filter(ojs_id=run_id).update(status="dead_letter")
    done = post(every, "/ojs/v1/admin/jobs/bulk/retry", {"filter": {"queue": "q"}, "confirm": True})
    assert done.json() == {
        "action": "retry",
        "matched": 1,
        "succeeded": 1,
        "failed": 0,
        "errors": [],
    }
    assert JobRun.objects.get(ojs_id=run_id).status == "queued"
