"""The REST API over several aliases: actions by id go to the row's alias, lists cover all.

"default" and "jobs2" (the ``two_aliases`` fixture): a run's id says its alias,
so a read or an action by id goes there; a list reads every alias, merged by
its order (newest id first; jobs by name), one cursor for them all, and
``?database=`` narrows it to one alias. Each run and job says its ``database``.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from django.core.cache import cache

from django_strait import define_workflow, trigger_workflow
from django_strait.models import Job, JobRun, WebhookDelivery, WorkflowRun
from tests.integration.factories import client_with, make_job, make_run

pytestmark = pytest.mark.django_db(databases=["default", "jobs2"], transaction=True)


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def api(two_aliases):
    return client_with("runs:read", "runs:write", "dlq:read", "dlq:replay", "jobs:read",
                       "jobs:write", "jobs:trigger")  # fmt: skip


@pytest.fixture
def both(two_aliases):
    """A job and a dead-lettered run on each alias: (here, there)."""
    here = make_run(make_job(queue="default"), status="dead_letter")
    there = make_run(make_job(queue="two", using="jobs2"), status="dead_letter")
    return here, there


def ok(response) -> dict:
    assert response.status_code == 200, response.content
    return response.json()


def ids(response) -> list[int]:
    return [r["id"] for r in ok(response)["results"]]


def row(run: JobRun) -> JobRun:
    return JobRun.objects.using(run._state.db).get(pk=run.pk)


# Reads and actions by id


def test_a_run_on_the_second_alias__is_read_by_its_id_and_says_where(api, both):
    here, there = both
    body = ok(api.get(f"/api/strait/runs/{there.pk}/"))
    assert (body["id"], body["database"], body["job"]) == (there.pk, "jobs2", there.job.name)
    assert len(body["attempts"]) == 1  # its attempts, read on its alias too
    assert ok(api.get(f"/api/strait/runs/{here.pk}/"))["database"] == "default"


def test_an_id_of_no_alias__is_a_404(api, both):
    response = api.get(f"/api/strait/runs/{2 * 2**48 + 1}/")
    assert response.status_code == 404
    assert str(2 * 2**48 + 1) in response.json()["error"]["message"]


def test_cancel__moves_the_run_on_its_own_alias(api, two_aliases):
    run = make_run(make_job(queue="two", using="jobs2"))
    body = ok(api.post(f"/api/strait/runs/{run.pk}/cancel/"))
    assert (body["status"], body["database"]) == ("canceled", "jobs2")
    assert row(run).status == "canceled"


def test_replay_and_discard__move_dead_letters_on_their_alias(api, two_aliases):
    job = make_job(queue="two", using="jobs2")
    first, second, third = (make_run(job, status="dead_letter") for _ in range(3))

    assert ok(api.post(f"/api/strait/runs/{first.pk}/replay/", {}, format="json"))["status"] == (
        "queued"
    )
    url = f"/api/strait/dead-letters/{second.pk}/replay/"
    assert ok(api.post(url, {"payload": {"n": 2}}, format="json"))["payload"] == {"n": 2}
    url = f"/api/strait/dead-letters/{third.pk}/discard/"
    assert ok(api.post(url, {"reason": "no"}, format="json"))["status"] == "discarded"

    assert [row(r).status for r in (first, second, third)] == ["queued", "queued", "discarded"]
    assert row(first).replay_count == 1


def test_a_runs_deliveries__are_read_on_its_alias(api, two_aliases):
    run = make_run(make_job(queue="two", using="jobs2"), status="completed")
    delivery = WebhookDelivery.objects.using("jobs2").create(
        run=run, event="run.completed", url="http://127.0.0.1:9/hook", status="failed"
    )
    body = ok(api.get(f"/api/strait/runs/{run.pk}/deliveries/"))
    assert [d["id"] for d in body["results"]] == [delivery.pk]

    again = ok(api.post(f"/api/strait/deliveries/{delivery.pk}/redeliver/"))
    assert (again["id"], again["status"]) == (delivery.pk, "pending")
    assert WebhookDelivery.objects.using("jobs2").get(pk=delivery.pk).status == "pending"


# Lists


def test_the_run_list__merges_every_alias_newest_id_first_and_pages_across(api, two_aliases):
    far = make_job(queue="two", using="jobs2")
    near = make_job(queue="default")
    made = [make_run(near), make_run(far), make_run(near), make_run(far), make_run(near)]
    expected = sorted((r.pk for r in made), reverse=True)

    seen, url = [], "/api/strait/runs/?limit=2&status=queued"
    while url:
        response = api.get(url)
        seen += ids(response)
        url = response.json()["next"]
        if url:
            assert parse_qs(urlparse(url).query)["status"] == ["queued"]
    assert seen == expected
    results = ok(api.get("/api/strait/runs/"))["results"]
    assert {r["id"]: r["database"] for r in results} == {
        r.pk: r._state.db for r in made
    }  # fmt: skip


def test_the_database_parameter__lists_one_alias(api, both):
    here, there = both
    assert ids(api.get("/api/strait/runs/?database=jobs2")) == [there.pk]
    assert ids(api.get("/api/strait/runs/?database=default")) == [here.pk]
    assert ids(api.get("/api/strait/dead-letters/?database=jobs2")) == [there.pk]


@pytest.mark.parametrize("path", ["runs/", "dead-letters/", "jobs/", "workflow-runs/"])
def test_an_unknown_database__is_a_400_naming_the_field_and_the_aliases(api, both, path):
    response = api.get(f"/api/strait/{path}?database=jobs9")
    assert response.status_code == 400
    error = response.json()["error"]
    assert "database" in error["details"]
    assert "'jobs9'" in error["details"]["database"][0]
    assert "allowed: default, jobs2" in error["details"]["database"][0]


def test_the_job_filter__finds_a_job_on_any_alias(api, both):
    here, there = both
    assert ids(api.get(f"/api/strait/runs/?job={there.job.name}")) == [there.pk]
    both_names = f"{here.job.name},{there.job.name}"
    assert ids(api.get(f"/api/strait/dead-letters/?job={both_names}")) == [there.pk, here.pk]
    response = api.get("/api/strait/runs/?job=nobody")
    assert response.status_code == 400 and "job" in response.json()["error"]["details"]


def test_dead_letters__list_and_bulk_replay_cover_every_alias(api, both):
    here, there = both
    assert ids(api.get("/api/strait/dead-letters/")) == [there.pk, here.pk]
    body = ok(api.post("/api/strait/dead-letters/replay/", {"queue": ["default", "two"]},
                       format="json"))  # fmt: skip
    assert body == {"replayed": 2}
    assert [row(r).status for r in both] == ["queued", "queued"]


def test_bulk_replay__with_the_database_parameter_replays_that_alias_only(api, both):
    here, there = both
    url = "/api/strait/dead-letters/replay/?database=jobs2"
    assert ok(api.post(url, {"queue": ["default", "two"]}, format="json")) == {"replayed": 1}
    assert [row(r).status for r in both] == ["dead_letter", "queued"]


# Jobs


def test_jobs__listed_from_every_alias_by_name_each_saying_where(api, two_aliases):
    make_job("b-far", queue="two", using="jobs2")
    make_job("a-near")
    make_job("c-near")
    first = ok(api.get("/api/strait/jobs/?limit=2"))
    assert [(j["name"], j["database"]) for j in first["results"]] == [
        ("a-near", "default"), ("b-far", "jobs2"),
    ]  # fmt: skip
    rest = ok(api.get(first["next"]))
    assert [j["name"] for j in rest["results"]] == ["c-near"] and rest["next"] is None
    assert [j["name"] for j in ok(api.get("/api/strait/jobs/?database=jobs2"))["results"]] == [
        "b-far"
    ]


def test_a_job_on_the_second_alias__is_read_paused_and_triggered_there(api, two_aliases):
    job = make_job("far", queue="two", using="jobs2")
    assert ok(api.get("/api/strait/jobs/far/"))["database"] == "jobs2"
    assert ok(api.post("/api/strait/jobs/far/pause/")) == {"name": "far", "enabled": False}
    assert Job.objects.using("jobs2").get(pk=job.pk).enabled is False
    api.post("/api/strait/jobs/far/resume/")
    changed = api.patch("/api/strait/jobs/far/", {"description": "on two"}, format="json")
    assert ok(changed)["description"] == "on two"
    assert Job.objects.using("jobs2").get(pk=job.pk).description == "on two"

    response = api.post("/api/strait/jobs/far/trigger/", {"payload": {"x": 1}}, format="json")
    assert response.status_code == 202, response.content
    run_id = response.json()["id"]
    assert response.json()["database"] == "jobs2"
    assert JobRun.objects.using("jobs2").filter(pk=run_id).exists()
    assert ok(api.get(response["Location"]))["id"] == run_id


def test_a_job_defined_on_a_queue_of_the_second_alias__lives_there(api, two_aliases):
    body = {"name": "made-far", "queue": "two", "handler": "tests.testapp.jobs.noop"}
    response = api.post("/api/strait/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["database"] == "jobs2"
    assert Job.objects.using("jobs2").filter(name="made-far").exists()
    assert not Job.objects.using("default").filter(name="made-far").exists()

    again = api.post("/api/strait/jobs/", {**body, "queue": "default"}, format="json")
    assert again.status_code == 400
    assert "name" in again.json()["error"]["details"]


def test_moving_a_job_to_a_queue_of_another_alias__is_refused(api, two_aliases):
    make_job("far", queue="two", using="jobs2")
    response = api.patch("/api/strait/jobs/far/", {"queue": "default"}, format="json")
    assert response.status_code == 400
    assert "allowed: a queue of 'jobs2'" in response.json()["error"]["details"]["queue"][0]
    assert Job.objects.using("jobs2").get(name="far").queue == "two"


# Workflow runs


@pytest.fixture
def flows(two_aliases):
    """Two workflow runs on each alias (a workflow lives with its steps' jobs): (near, far)."""
    make_job("near-step", queue="default")
    make_job("far-step", queue="two", using="jobs2")
    define_workflow("near-flow", steps=[{"name": "a", "job": "near-step"}])
    define_workflow("far-flow", steps=[{"name": "a", "job": "far-step"}])
    near = [trigger_workflow("near-flow", {"n": n}) for n in range(2)]
    far = [trigger_workflow("far-flow", {"n": n}) for n in range(2)]
    assert {wr._state.db for wr in far} == {"jobs2"}
    return near, far


def test_workflow_runs__listed_from_every_alias_newest_id_first_each_saying_where(api, flows):
    near, far = flows
    made = [*near, *far]
    seen, url = [], "/api/strait/workflow-runs/?limit=3&status=running"
    while url:
        response = api.get(url)
        seen += ids(response)
        url = response.json()["next"]
    assert seen == sorted((wr.pk for wr in made), reverse=True)
    results = ok(api.get("/api/strait/workflow-runs/"))["results"]
    assert {r["id"]: (r["database"], r["workflow"]) for r in results} == {
        wr.pk: (wr._state.db, "far-flow" if wr in far else "near-flow") for wr in made
    }  # fmt: skip


def test_workflow_runs__the_database_and_workflow_filters(api, flows):
    near, far = flows
    newest_first = sorted((wr.pk for wr in far), reverse=True)
    assert ids(api.get("/api/strait/workflow-runs/?database=jobs2")) == newest_first
    assert ids(api.get("/api/strait/workflow-runs/?workflow=far-flow")) == newest_first
    assert ids(api.get("/api/strait/workflow-runs/?workflow=near-flow&database=jobs2")) == []
    response = api.get("/api/strait/workflow-runs/?workflow=nope")
    assert response.status_code == 400
    assert "no workflow named 'nope'" in response.json()["error"]["details"]["workflow"][0]


def test_a_workflow_run_on_the_second_alias__is_read_and_canceled_by_its_id(api, flows):
    _, far = flows
    wr = far[0]
    body = ok(api.get(f"/api/strait/workflow-runs/{wr.pk}/"))
    assert (body["id"], body["database"], body["workflow"]) == (wr.pk, "jobs2", "far-flow")
    assert body["payload"] == {"n": 0}
    [step] = body["steps"]  # its steps, read on its alias too
    assert step["job"] == "far-step" and step["run_status"] == "queued"
    assert JobRun.objects.using("jobs2").filter(pk=step["run_id"]).exists()

    canceled = ok(api.post(f"/api/strait/workflow-runs/{wr.pk}/cancel/"))
    assert (canceled["status"], canceled["database"]) == ("canceled", "jobs2")
    assert WorkflowRun.objects.using("jobs2").get(pk=wr.pk).status == "canceled"
    assert JobRun.objects.using("jobs2").get(pk=step["run_id"]).status == "canceled"
    assert WorkflowRun.objects.using("jobs2").get(pk=far[1].pk).status == "running"

    missing = api.get(f"/api/strait/workflow-runs/{2 * 2**48 + 1}/")
    assert missing.status_code == 404 and str(2 * 2**48 + 1) in missing.json()["error"]["message"]


def test_a_workflow_triggered_through_the_api__says_its_database(two_aliases):
    make_job("far-step", queue="two", using="jobs2")
    define_workflow("far-flow", steps=[{"name": "a", "job": "far-step"}])
    api = client_with("jobs:trigger", "runs:read")
    response = api.post("/api/strait/workflows/far-flow/trigger/", {}, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["database"] == "jobs2"
    assert ok(api.get(response["Location"]))["id"] == response.json()["id"]


# One alias: nothing changes


@pytest.mark.django_db
def test_on_one_database__no_database_key_and_no_database_parameter():
    api = client_with("runs:read")
    run = make_run()
    assert "database" not in api.get(f"/api/strait/runs/{run.pk}/").json()
    assert "database" not in api.get("/api/strait/runs/").json()["results"][0]
    response = api.get("/api/strait/runs/?database=default")
    assert response.status_code == 400
    assert "unknown filter" in response.json()["error"]["details"]["database"][0]


@pytest.mark.django_db
def test_on_one_database__workflow_runs_say_no_database_and_take_no_database_parameter():
    make_job("step")
    define_workflow("flow", steps=[{"name": "a", "job": "step"}])
    wr = trigger_workflow("flow", {})
    api = client_with("runs:read")
    assert "database" not in ok(api.get(f"/api/strait/workflow-runs/{wr.pk}/"))
    assert "database" not in ok(api.get("/api/strait/workflow-runs/"))["results"][0]
    response = api.get("/api/strait/workflow-runs/?database=default")
    assert response.status_code == 400
    assert "unknown parameter" in response.json()["error"]["details"]["database"][0]
