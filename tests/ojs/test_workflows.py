"""OJS workflows (level 3) beyond the suite's cases: the DAG behind them, callbacks, bounds."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from django_strait.models import WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)
CT = "application/openjobspec+json"


@pytest.fixture
def client(settings) -> Client:
    settings.STRAIT = {**getattr(settings, "STRAIT", {}), "OJS_REQUIRE_AUTH": False}
    return Client()


def post(client: Client, path: str, body) -> tuple[int, dict]:
    r = client.post(path, json.dumps(body), content_type=CT)
    return r.status_code, json.loads(r.content or b"{}")


def fetch(client: Client, queue: str) -> list[dict]:
    return post(client, "/ojs/v1/workers/fetch", {"queues": [queue], "worker_id": "w1"})[1]["jobs"]


def test_batch_with_a_failed_job_fires_on_complete_and_on_failure(client) -> None:
    status, body = post(client, "/ojs/v1/workflows", {
        "type": "batch", "name": "b",
        "jobs": [
            {"type": "b.ok", "args": [], "options": {"queue": "bq"}},
            {"type": "b.bad", "args": [], "options": {"queue": "bq", "retry": {"max_attempts": 1}}},
        ],
        "callbacks": {
            "on_complete": {"type": "b.done", "args": [1], "options": {"queue": "cb"}},
            "on_success": {"type": "b.yes", "args": [], "options": {"queue": "cb-yes"}},
            "on_failure": {"type": "b.no", "args": [], "options": {"queue": "cb-no"}},
        },
    })  # fmt: skip
    assert status == 201, body
    first, second = fetch(client, "bq")[0], fetch(client, "bq")[0]
    assert (
        post(client, "/ojs/v1/workers/ack", {"job_id": first["id"], "result": {"n": 1}})[0] == 200
    )
    s, nacked = post(
        client, "/ojs/v1/workers/nack", {"job_id": second["id"], "error": {"message": "x"}}
    )
    assert s == 200 and nacked["state"] == "discarded", nacked
    assert [j["type"] for j in fetch(client, "cb")] == ["b.done"]
    assert [j["type"] for j in fetch(client, "cb-no")] == ["b.no"]
    assert fetch(client, "cb-yes") == []
    wr = WorkflowRun.objects.get()
    assert wr.workflow.name == f"ojs-{body['workflow']['id']}"
