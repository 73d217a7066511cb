"""OJS workflows (level 3) beyond the suite's cases: the DAG behind them, callbacks, bounds."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

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


def chain(client: Client, queue: str = "cq", n: int = 3, **extra) -> dict:
    steps = [{"type": f"c.s{i}", "args": [i], "options": {"queue": queue}} for i in range(n)]
    status, body = post(client, "/ojs/v1/workflows", {"type": "chain", "steps": steps, **extra})
    assert status == 201, body
    return body["workflow"]


def test_chain__a_native_workflow_run_the_admin_draws(client, admin_client) -> None:
    made = chain(client)
    assert [s["state"] for s in made["steps"]] == ["available", "pending", "pending"]
    assert made["steps"][0]["job_id"] and made["steps"][1]["depends_on"] == ["step-0"]
    wr = WorkflowRun.objects.get()
    assert wr.workflow.name == f"ojs-{made['id']}" and wr.status == "running"
    steps = list(wr.step_runs.order_by("id").values_list("step__name", "status"))
    assert steps == [("step-0", "started"), ("step-1", "waiting"), ("step-2", "waiting")]
    first = fetch(client, "cq")[0]
    assert first["id"] == made["steps"][0]["job_id"] and "parent_results" not in first
    post(client, "/ojs/v1/workers/ack", {"job_id": first["id"], "result": {"r": 1}})
    second = fetch(client, "cq")[0]
    assert second["parent_results"] == [{"r": 1}]
    page = admin_client.get(reverse("admin:django_strait_workflowrun_change", args=[wr.pk]))
    assert page.status_code == 200
    assert str(page.context["strait_dag"]).count('class="strait-step"') == 3


def test_cancel__cancels_waiting_and_queued_steps_then_409(client) -> None:
    made = chain(client)
    r = client.delete(f"/ojs/v1/workflows/{made['id']}")
    assert r.status_code == 200 and r.json()["workflow"]["state"] == "cancelled"
    assert fetch(client, "cq") == []
    again = client.delete(f"/ojs/v1/workflows/{made['id']}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


def test_group__failed_only_once_every_job_ended(client) -> None:
    jobs = [{"type": "g.j", "args": [i], "options": {"queue": "gq", "retry": {"max_attempts": 1}}}
            for i in range(2)]  # fmt: skip
    made = post(client, "/ojs/v1/workflows", {"type": "group", "jobs": jobs})[1]["workflow"]
    a, b = fetch(client, "gq")[0], fetch(client, "gq")[0]
    post(client, "/ojs/v1/workers/nack", {"job_id": a["id"], "error": {"message": "no"}})
    state = client.get(f"/ojs/v1/workflows/{made['id']}").json()["workflow"]
    assert state["state"] == "running" and state["jobs_failed"] == 1
    post(client, "/ojs/v1/workers/ack", {"job_id": b["id"], "result": None})
    state = client.get(f"/ojs/v1/workflows/{made['id']}").json()["workflow"]
    assert (state["state"], state["jobs_completed"], state["jobs_failed"]) == ("failed", 1, 1)
    assert state["error"]["type"] == "workflow.step_failed" and "job-0" in state["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "dag", "steps": []}, "type"),
        ({"type": "chain", "steps": [], "x": 1}, "x"),
        ({"type": "chain", "steps": []}, "steps"),
        ({"type": "chain", "jobs": [{"type": "a.b", "args": []}]}, "jobs"),
        ({"type": "group", "jobs": [{"type": "a.b", "args": []}] * 101}, "jobs"),
        ({"type": "group", "jobs": [{"type": "A", "args": []}]}, "jobs[0].type"),
        ({"type": "group", "jobs": [{"type": "a.b", "args": 1}]}, "jobs[0].args"),
        ({"type": "group", "name": "x" * 201, "jobs": [{"type": "a.b", "args": []}]}, "name"),
        ({"type": "group", "jobs": [{"type": "a.b", "args": [], "jobs": []}]}, "jobs[0]"),
        (
            {
                "type": "group",
                "jobs": [
                    {"type": "a.b", "args": [], "options": {"scheduled_at": "2099-01-01T00:00:00Z"}}
                ],
            },
            "jobs[0].options.scheduled_at",
        ),  # fmt: skip
        ({"type": "group", "jobs": [{"type": "a.b", "args": []}], "callbacks": {}}, "callbacks"),
        ({"type": "batch", "jobs": [{"type": "a.b", "args": []}]}, "callbacks"),
        (
            {
                "type": "batch",
                "jobs": [{"type": "a.b", "args": []}],
                "callbacks": {"on_whatever": {"type": "a.c", "args": []}},
            },
            "callbacks.on_whatever",
        ),  # fmt: skip
        (
            {
                "type": "batch",
                "jobs": [{"type": "a.b", "args": []}],
                "callbacks": {"on_success": {"type": "a.c"}},
            },
            "callbacks.on_success.args",
        ),  # fmt: skip
    ],
)
def test_create__refuses_a_bad_field_naming_it(client, body, field) -> None:
    status, answer = post(client, "/ojs/v1/workflows", body)
    assert status == 400, answer
    assert answer["error"]["details"]["field"] == field, answer
    assert WorkflowRun.objects.count() == 0


def test_queue_scoped_key__403_naming_the_field_and_404_for_others(settings) -> None:
    from django_strait.api.auth import issue_key

    settings.STRAIT = {**getattr(settings, "STRAIT", {}), "OJS_REQUIRE_AUTH": True}
    _, key = issue_key("billing", ["*"], queues=["billing"])
    _, other = issue_key("all", ["*"])
    billing = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    everyone = Client(HTTP_AUTHORIZATION=f"Bearer {other}")
    jobs = [{"type": "q.a", "args": [], "options": {"queue": "billing"}},
            {"type": "q.b", "args": [], "options": {"queue": "email"}}]  # fmt: skip
    status, answer = post(billing, "/ojs/v1/workflows", {"type": "group", "jobs": jobs})
    assert status == 403 and "jobs[1].options.queue" in answer["error"]["message"], answer
    made = post(everyone, "/ojs/v1/workflows", {"type": "group", "jobs": jobs})[1]["workflow"]
    assert billing.get(f"/ojs/v1/workflows/{made['id']}").status_code == 404
    assert billing.delete(f"/ojs/v1/workflows/{made['id']}").status_code == 404
    assert everyone.get(f"/ojs/v1/workflows/{made['id']}").status_code == 200
    assert Client().get(f"/ojs/v1/workflows/{made['id']}").status_code == 401


def test_create__a_job_id_given_twice_or_taken_is_409(client) -> None:
    ident = "01900000-0000-7000-8000-0000000000aa"
    jobs = [{"id": ident, "type": "d.a", "args": []}, {"id": ident, "type": "d.b", "args": []}]
    status, answer = post(client, "/ojs/v1/workflows", {"type": "group", "jobs": jobs})
    assert status == 409 and answer["error"]["code"] == "duplicate", answer
    made = post(client, "/ojs/v1/workflows", {"type": "group", "jobs": jobs[:1]})[1]["workflow"]
    assert made["steps"][0]["job_id"] == ident
    status, answer = post(client, "/ojs/v1/workflows", {"type": "chain", "steps": jobs[1:]})
    assert status == 409 and answer["error"]["code"] == "duplicate", answer
    assert WorkflowRun.objects.count() == 1
