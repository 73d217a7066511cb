"""The OJS binding over several aliases ("default" and "jobs2", the ``two_aliases`` fixture).

A job enqueued on a queue of "jobs2" lives there; info, cancel, ack, nack and
heartbeat find it by its OJS id on whichever alias holds it; a fetch claims from
the alias of each queue asked; an id another alias's run holds is a duplicate.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_strait.models import JobRun
from django_strait.ojs.ids import uuid7

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)

OJS = "application/openjobspec+json"


@pytest.fixture
def ojs(two_aliases, settings) -> Client:
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": False}
    return Client()


def post(client: Client, path: str, body: Any) -> Any:
    return client.post(path, data=json.dumps(body), content_type=OJS)


def enqueue(client: Client, queue: str, **body: Any) -> dict[str, Any]:
    response = post(client, "/ojs/v1/jobs", {"type": "mail.send", "args": [1],
                                             "options": {"queue": queue}, **body})  # fmt: skip
    assert response.status_code == 201, response.content
    return response.json()["job"]


def run_of(job: dict[str, Any]) -> JobRun:
    for where in ("default", "jobs2"):
        found = JobRun.objects.using(where).filter(ojs_id=job["id"]).first()
        if found is not None:
            return found
    raise AssertionError(f"no run holds {job['id']}")


def test_a_job_on_a_queue_of_the_second_alias__lives_there_and_is_read_by_its_id(ojs):
    job = enqueue(ojs, "two")
    assert run_of(job)._state.db == "jobs2" and run_of(job).pk > 2**48

    response = ojs.get(f"/ojs/v1/jobs/{job['id']}")

    assert response.status_code == 200, response.content
    assert (response.json()["job"]["id"], response.json()["job"]["queue"]) == (job["id"], "two")


def test_fetch_heartbeat_ack__serve_the_second_alias(ojs):
    job = enqueue(ojs, "two")
    here = enqueue(ojs, "default")

    fetched = post(ojs, "/ojs/v1/workers/fetch",
                   {"queues": ["default", "two"], "count": 5, "worker_id": "w1"})  # fmt: skip
    assert fetched.status_code == 200, fetched.content
    assert {j["id"] for j in fetched.json()["jobs"]} == {job["id"], here["id"]}

    beat = post(ojs, "/ojs/v1/workers/heartbeat",
                {"worker_id": "w1", "active_jobs": [job["id"], here["id"]]})  # fmt: skip
    assert beat.status_code == 200, beat.content
    assert set(beat.json()["jobs_extended"]) == {job["id"], here["id"]}

    acked = post(ojs, "/ojs/v1/workers/ack", {"job_id": job["id"], "result": {"ok": 1}})
    assert acked.status_code == 200, acked.content
    assert acked.json()["state"] == "completed"
    run = run_of(job)
    assert (run._state.db, run.status, run.result) == ("jobs2", "completed", {"ok": 1})
    assert run_of(here).status == "executing"


def test_nack_and_cancel__find_the_run_on_its_alias(ojs):
    job, other = enqueue(ojs, "two"), enqueue(ojs, "two")
    post(ojs, "/ojs/v1/workers/fetch", {"queues": ["two"], "count": 1, "worker_id": "w1"})

    nacked = post(ojs, "/ojs/v1/workers/nack",
                  {"job_id": job["id"], "error": {"message": "no", "retryable": False}})  # fmt: skip
    assert nacked.status_code == 200, nacked.content
    assert (run_of(job)._state.db, run_of(job).status) == ("jobs2", "discarded")

    canceled = ojs.delete(f"/ojs/v1/jobs/{other['id']}")
    assert canceled.status_code == 200, canceled.content
    assert run_of(other).status == "canceled"


def test_an_id_held_on_another_alias__is_a_duplicate(ojs):
    job = enqueue(ojs, "default")
    response = post(ojs, "/ojs/v1/jobs", {"id": job["id"], "type": "mail.send", "args": [],
                                          "options": {"queue": "two"}})  # fmt: skip
    assert response.status_code == 409, response.content
    assert not JobRun.objects.using("jobs2").exists()


def test_a_batch__is_on_one_alias_or_refused(ojs):
    jobs = [{"type": "mail.send", "args": [i], "options": {"queue": "two"}} for i in range(2)]
    made = post(ojs, "/ojs/v1/jobs/batch", {"jobs": jobs})
    assert made.status_code == 201, made.content
    assert JobRun.objects.using("jobs2").count() == 2

    mixed = [*jobs, {"type": "mail.send", "args": [3], "options": {"queue": "default"}}]
    refused = post(ojs, "/ojs/v1/jobs/batch", {"jobs": mixed})
    assert refused.status_code == 400, refused.content
    assert "jobs[2].options.queue" in refused.content.decode()
    assert JobRun.objects.using("default").count() == 0
    assert JobRun.objects.using("jobs2").count() == 2

    held = post(ojs, "/ojs/v1/jobs/batch", {"jobs": [
        {"id": str(run_of({"id": made.json()["jobs"][0]["id"]}).ojs_id), "type": "mail.send",
         "args": [], "options": {"queue": "default"}},
        {"id": str(uuid7()), "type": "mail.send", "args": [], "options": {"queue": "default"}},
    ]})  # fmt: skip
    assert held.status_code == 409, held.content
    assert JobRun.objects.using("default").count() == 0


def test_progress__is_kept_on_the_runs_alias(ojs):
    job = enqueue(ojs, "two")
    post(ojs, "/ojs/v1/workers/fetch", {"queues": ["two"], "worker_id": "w1"})
    path = f"/ojs/v1/jobs/{job['id']}/progress"

    kept = ojs.put(path, data=json.dumps({"progress": 0.5, "worker_id": "w1"}), content_type=OJS)

    assert kept.status_code == 200, kept.content
    assert kept.json()["accepted"] is True and kept.json()["progress"] == 0.5
    assert ojs.get(path).json()["progress"] == 0.5


# -- lists, counts and queue operations over every alias ---------------------------------

DEAD = {"retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"}}


def dead_letter_on(client: Client, queue: str) -> dict[str, Any]:
    """A job on ``queue`` fetched and failed once: dead-lettered on its queue's alias."""
    job = enqueue(client, queue, options={"queue": queue, **DEAD})
    fetched = post(client, "/ojs/v1/workers/fetch",
                   {"queues": [queue], "count": 1, "worker_id": "w1"})  # fmt: skip
    assert [j["id"] for j in fetched.json()["jobs"]] == [job["id"]]
    nacked = post(client, "/ojs/v1/workers/nack",
                  {"job_id": job["id"], "error": {"message": "no"}})  # fmt: skip
    assert nacked.status_code == 200, nacked.content
    assert run_of(job).status == "dead_letter"
    return job


def test_the_dead_letter_queue__lists_and_counts_every_alias(ojs):
    here, there = dead_letter_on(ojs, "default"), dead_letter_on(ojs, "two")

    listed = ojs.get("/ojs/v1/dead-letter").json()
    assert {j["id"] for j in listed["jobs"]} == {here["id"], there["id"]}
    assert listed["pagination"]["total"] == 2
    one_a_page = [
        ojs.get("/ojs/v1/dead-letter", {"per_page": 1, "page": n}).json() for n in (1, 2, 3)
    ]
    assert [p["pagination"]["page"] for p in one_a_page] == [1, 2, 2]  # past the last: the last
    assert {p["jobs"][0]["id"] for p in one_a_page} == {here["id"], there["id"]}
    stats = ojs.get("/ojs/v1/admin/dead-letter/stats").json()
    assert (stats["total"], stats["by_queue"]) == (2, {"default": 1, "two": 1})

    retried = post(ojs, f"/ojs/v1/dead-letter/{there['id']}/retry", {})
    assert retried.status_code == 200, retried.content
    assert (run_of(there)._state.db, run_of(there).status) == ("jobs2", "queued")


def test_queues__listed_counted_and_paused_on_their_own_alias(ojs):
    enqueue(ojs, "two")
    enqueue(ojs, "two")
    enqueue(ojs, "default")

    names = [q["name"] for q in ojs.get("/ojs/v1/queues").json()["queues"]]
    assert {"default", "two"} <= set(names)
    stats = ojs.get("/ojs/v1/queues/two/stats").json()
    assert stats["stats"]["available"] == 2

    paused = post(ojs, "/ojs/v1/queues/two/pause", {})
    assert paused.status_code == 200, paused.content
    # The pause is where queue "two"'s workers and fetches read it: on jobs2.
    from django_strait.models import QueueState

    assert QueueState.objects.using("jobs2").get(name="two").paused_at is not None
    assert not QueueState.objects.using("default").filter(name="two").exists()
    fetched = post(ojs, "/ojs/v1/workers/fetch",
                   {"queues": ["two"], "count": 5, "worker_id": "w1"})  # fmt: skip
    assert fetched.json()["jobs"] == []
    assert ojs.get("/ojs/v1/queues/two/stats").json()["status"] == "paused"
    listed = {q["name"]: q for q in ojs.get("/ojs/v1/admin/queues").json()["items"]}
    assert listed["two"]["paused"] is True and listed["two"]["counts"]["available"] == 2

    post(ojs, "/ojs/v1/admin/queues/two/resume", {})
    fetched = post(ojs, "/ojs/v1/workers/fetch",
                   {"queues": ["two"], "count": 5, "worker_id": "w1"})  # fmt: skip
    assert len(fetched.json()["jobs"]) == 2


def test_the_admin_api__lists_counts_and_retries_every_alias(ojs):
    here, there = dead_letter_on(ojs, "default"), dead_letter_on(ojs, "two")
    waiting = enqueue(ojs, "two")

    jobs = ojs.get("/ojs/v1/admin/jobs").json()
    assert {j["id"] for j in jobs["items"]} == {here["id"], there["id"], waiting["id"]}
    assert jobs["pagination"]["total"] == 3
    stats = ojs.get("/ojs/v1/admin/stats").json()
    assert stats["jobs"]["available"] == 1 and stats["jobs"]["discarded"] == 2

    retried = post(ojs, "/ojs/v1/admin/jobs/bulk/retry", {"confirm": True})
    assert retried.status_code == 200, retried.content
    assert (retried.json()["matched"], retried.json()["succeeded"]) == (2, 2)
    assert {run_of(j)._state.db: run_of(j).status for j in (here, there)} == {
        "default": "queued",
        "jobs2": "queued",
    }


def test_events__of_every_alias(ojs):
    here, there = enqueue(ojs, "default"), enqueue(ojs, "two")
    listed = ojs.get("/ojs/v1/events", {"types": "job.enqueued"}).json()
    subjects = {e["subject"] for e in listed["events"]}
    assert {here["id"], there["id"]} <= subjects


def test_a_cron__lives_on_its_queue_s_alias(ojs):
    body = {"name": "nightly-two", "expression": "0 3 * * *",
            "job_template": {"type": "report.build", "args": [], "options": {"queue": "two"}}}  # fmt: skip
    made = post(ojs, "/ojs/v1/cron", body)
    assert made.status_code == 201, made.content
    from django_strait.models import Job

    assert Job.objects.using("jobs2").get(name="nightly-two").schedule == "0 3 * * *"
    assert not Job.objects.using("default").filter(name="nightly-two").exists()
    assert "nightly-two" in {c["name"] for c in ojs.get("/ojs/v1/cron").json()["crons"]}
    assert ojs.get("/ojs/v1/cron/nightly-two").status_code == 200

    moved = post(ojs, "/ojs/v1/cron", {**body, "job_template": {
        **body["job_template"], "options": {"queue": "default"}}})  # fmt: skip
    assert moved.status_code == 409, moved.content
    assert "register this one under another name" in moved.content.decode()

    assert ojs.delete("/ojs/v1/cron/nightly-two").status_code == 200
    assert Job.objects.using("jobs2").get(name="nightly-two").enabled is False


# -- OJS workflows live on their jobs' alias ---------------------------------------------


def test_a_chain_on_the_second_alias__runs_there_with_its_parents_results(ojs):
    steps = [{"type": f"c.s{i}", "args": [i], "options": {"queue": "two"}} for i in range(2)]
    made = post(ojs, "/ojs/v1/workflows", {"type": "chain", "steps": steps})
    assert made.status_code == 201, made.content
    flow = made.json()["workflow"]
    from django_strait.models import WorkflowRun

    assert WorkflowRun.objects.using("jobs2").get().workflow.name == f"ojs-{flow['id']}"
    assert not WorkflowRun.objects.using("default").exists()

    def fetch_one() -> dict[str, Any]:
        got = post(ojs, "/ojs/v1/workers/fetch", {"queues": ["two"], "worker_id": "w1"})
        [job] = got.json()["jobs"]
        return job

    first = fetch_one()
    post(ojs, "/ojs/v1/workers/ack", {"job_id": first["id"], "result": {"r": 1}})
    second = fetch_one()
    assert second["parent_results"] == [{"r": 1}]
    post(ojs, "/ojs/v1/workers/ack", {"job_id": second["id"], "result": {"r": 2}})

    read = ojs.get(f"/ojs/v1/workflows/{flow['id']}").json()["workflow"]
    assert read["state"] == "completed" and [s["state"] for s in read["steps"]] == [
        "completed",
        "completed",
    ]


def test_a_batch_on_the_second_alias__fires_its_callback_on_its_own_queue(ojs):
    made = post(ojs, "/ojs/v1/workflows", {
        "type": "batch", "name": "b",
        "jobs": [{"type": "b.ok", "args": [], "options": {"queue": "two"}}],
        "callbacks": {"on_complete": {"type": "b.done", "args": [], "options": {"queue": "default"}}},
    })  # fmt: skip
    assert made.status_code == 201, made.content
    flow = made.json()["workflow"]
    got = post(ojs, "/ojs/v1/workers/fetch", {"queues": ["two"], "worker_id": "w1"})
    [job] = got.json()["jobs"]
    post(ojs, "/ojs/v1/workers/ack", {"job_id": job["id"], "result": {}})

    fired = post(ojs, "/ojs/v1/workers/fetch", {"queues": ["default"], "worker_id": "w1"})
    assert [j["type"] for j in fired.json()["jobs"]] == ["b.done"]
    read = ojs.get(f"/ojs/v1/workflows/{flow['id']}").json()["workflow"]
    assert read["callbacks"]["on_complete"]["state"] == "active"


def test_a_workflow_on_the_second_alias__is_cancelled_there(ojs):
    steps = [{"type": f"c.s{i}", "args": [], "options": {"queue": "two"}} for i in range(2)]
    flow = post(ojs, "/ojs/v1/workflows", {"type": "chain", "steps": steps}).json()["workflow"]

    canceled = ojs.delete(f"/ojs/v1/workflows/{flow['id']}")

    assert canceled.status_code == 200, canceled.content
    assert canceled.json()["workflow"]["state"] == "cancelled"
    from django_strait.models import WorkflowRun

    assert WorkflowRun.objects.using("jobs2").get().status == "canceled"
    assert run_of({"id": flow["steps"][0]["job_id"]}).status == "canceled"


def test_a_workflow_over_two_databases__is_refused_naming_the_job(ojs):
    steps = [{"type": "c.a", "args": [], "options": {"queue": "two"}},
             {"type": "c.b", "args": [], "options": {"queue": "default"}}]  # fmt: skip
    refused = post(ojs, "/ojs/v1/workflows", {"type": "chain", "steps": steps})
    assert refused.status_code == 400, refused.content
    assert "steps[1].options.queue" in refused.content.decode()
    from django_strait.models import WorkflowRun

    assert not WorkflowRun.objects.using("default").exists()
    assert not WorkflowRun.objects.using("jobs2").exists()
