"""The REST API's jobs: list, read, create, update, pause/resume, bulk trigger."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import override_settings
from rest_framework.test import APIClient

from django_strait.api.auth import issue_key
from django_strait.models import Job, JobRun, Project
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db

STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.0/8", "::1/128"]}


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    """A client with an API key that may do anything."""
    _, key = issue_key("all", ["*"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


def error_of(response) -> dict:
    return response.json()["error"]


HTTP_JOB = {"name": "hook", "endpoint_url": "http://127.0.0.1:9/hook", "queue": "web"}


# List and read


def test_list__pages_by_name_with_a_next_link(api):
    for name in ["c-job", "a-job", "b-job"]:
        make_job(name)
    first = api.get("/api/strait/jobs/?limit=2").json()
    assert [j["name"] for j in first["results"]] == ["a-job", "b-job"]
    second = api.get(first["next"]).json()
    assert [j["name"] for j in second["results"]] == ["c-job"]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=x", "limit"), ("limit=501", "limit"),
     ("cursor=!!", "cursor"), ("cursor=MTIz", "cursor"), ("colour=red", "colour")],
)  # fmt: skip
def test_list__bad_parameter_is_a_400_naming_it(api, query, field):
    response = api.get(f"/api/strait/jobs/?{query}")
    assert response.status_code == 400
    assert list(error_of(response)["details"]) == [field]


def test_retrieve__hides_secrets_and_header_values(api):
    make_job(
        **{**HTTP_JOB, "headers": {"Authorization": "Bearer s3cret"}, "signing_secret": "k" * 20}
    )
    body = api.get("/api/strait/jobs/hook/").json()
    assert body["header_names"] == ["Authorization"]
    assert "headers" not in body and "signing_secret" not in body
    assert "s3cret" not in str(body)


def test_retrieve__unknown_job_is_a_404_naming_it(api):
    response = api.get("/api/strait/jobs/nope/")
    assert response.status_code == 404
    assert error_of(response) == {
        "code": "unknown_job", "message": "no job named 'nope'", "details": {},
    }  # fmt: skip


# Create and update


def test_create__defines_a_job_and_answers_201(api):
    response = api.post("/api/strait/jobs/", {**HTTP_JOB, "max_attempts": 4}, format="json")
    assert response.status_code == 201, response.json()
    assert response["Location"] == "/api/strait/jobs/hook/"
    job = Job.objects.get()
    assert (job.name, job.endpoint_url, job.queue, job.max_attempts) == (
        "hook", "http://127.0.0.1:9/hook", "web", 4,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"name": "x"}, "endpoint_url", "exactly one of endpoint_url"),
        ({**HTTP_JOB, "name": "has space"}, "name", "letters, numbers"),
        ({**HTTP_JOB, "priority": 101}, "priority", "less than or equal to 100"),
        ({**HTTP_JOB, "http_method": "GET"}, "http_method", '"GET" is not a valid choice'),
        ({**HTTP_JOB, "headers": {"Content-Type": "x"}}, "headers", "Content-Type"),
        ({**HTTP_JOB, "retry_strategy": "custom"}, "retry_strategy", "non-empty list of delays"),
        ({**HTTP_JOB, "schedule": "every day"}, "schedule", ""),
        ({**HTTP_JOB, "timezone": "Mars/Base"}, "timezone", ""),
        ({**HTTP_JOB, "endpoint_url": "http://10.1.2.3/x"}, "endpoint_url", "10.1.2.3"),
        ({**HTTP_JOB, "colour": "red"}, "colour", "unknown field"),
        ([1], "body", "dictionary"),
    ],
)
def test_create__bad_field_is_a_400_naming_it(api, body, field, fragment):
    response = api.post("/api/strait/jobs/", body, format="json")
    assert response.status_code == 400
    error = error_of(response)
    assert field in error["details"], error
    assert fragment in " ".join(error["details"][field])
    assert error["message"].startswith(f"{next(iter(error['details']))}: ")
    assert not Job.objects.exists()


def test_create__a_taken_name_is_a_400(api):
    make_job("hook")
    response = api.post("/api/strait/jobs/", HTTP_JOB, format="json")
    assert response.status_code == 400
    assert "already exists" in error_of(response)["details"]["name"][0]


def test_patch__changes_only_what_is_sent(api):
    make_job(**HTTP_JOB, priority=3)
    response = api.patch("/api/strait/jobs/hook/", {"queue": "slow"}, format="json")
    assert response.status_code == 200
    job = Job.objects.get()
    assert (job.queue, job.priority) == ("slow", 3)


def test_patch__is_checked_as_a_whole_job(api):
    make_job(**HTTP_JOB)
    response = api.patch(
        "/api/strait/jobs/hook/", {"handler": "tests.testapp.jobs.noop"}, format="json"
    )
    assert response.status_code == 400
    assert "exactly one of" in error_of(response)["details"]["handler"][0]


def test_put__replaces_and_the_name_stays(api):
    make_job(**HTTP_JOB, description="old")
    body = {"name": "renamed", "handler": "tests.testapp.jobs.noop", "endpoint_url": ""}
    response = api.put("/api/strait/jobs/hook/", body, format="json")
    assert response.status_code == 400  # name is not writable: refused, not ignored
    assert list(error_of(response)["details"]) == ["name"]
    body.pop("name")
    assert api.put("/api/strait/jobs/hook/", body, format="json").status_code == 200
    job = Job.objects.get()
    assert (job.name, job.handler, job.endpoint_url) == ("hook", "tests.testapp.jobs.noop", "")


# Budget: project and estimated_cost


def test_create__with_a_project_by_name_and_an_estimated_cost(api):
    project = Project.objects.create(name="billing", daily_budget=Decimal(100))
    body = {**HTTP_JOB, "project": "billing", "estimated_cost": "0.25"}
    response = api.post("/api/strait/jobs/", body, format="json")
    assert response.status_code == 201
    assert (response.json()["project"], response.json()["estimated_cost"]) == (
        "billing",
        "0.250000",
    )
    job = Job.objects.get()
    assert (job.project, job.estimated_cost) == (project, Decimal("0.25"))
    assert api.get("/api/strait/jobs/hook/").json()["project"] == "billing"


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [({"project": "nope", "estimated_cost": "1"}, "project",
      "no project named 'nope'; allowed: the name of an existing project"),
     ({"project": 7, "estimated_cost": "1"}, "project", "must be a project name"),
     ({"project": ["billing"], "estimated_cost": "1"}, "project", "must be a project name"),
     ({"project": "billing"}, "estimated_cost", "Required when the job has a project"),
     ({"estimated_cost": "-1"}, "estimated_cost", "greater than or equal to 0"),
     ({"estimated_cost": "lots"}, "estimated_cost", "valid number")],
)  # fmt: skip
def test_create__bad_budget_field_is_a_400_naming_it(api, body, field, fragment):
    Project.objects.create(name="billing", daily_budget=Decimal(100))
    response = api.post("/api/strait/jobs/", {**HTTP_JOB, **body}, format="json")
    assert response.status_code == 400
    assert fragment in error_of(response)["details"][field][0]
    assert not Job.objects.exists()


def test_patch__null_project_takes_the_job_off_the_budget(api):
    project = Project.objects.create(name="billing", daily_budget=Decimal(100))
    make_job(**HTTP_JOB, project=project, estimated_cost=Decimal(1))
    response = api.patch("/api/strait/jobs/hook/", {"project": None}, format="json")
    assert response.status_code == 200
    assert response.json()["project"] is None
    assert Job.objects.get().project is None


# Pause and resume


def test_pause_and_resume__flip_enabled_and_repeat_safely(api):
    make_job("nightly")
    assert api.post("/api/strait/jobs/nightly/pause/").json() == {
        "name": "nightly",
        "enabled": False,
    }
    assert api.post("/api/strait/jobs/nightly/pause/").json()["enabled"] is False
    assert Job.objects.get().enabled is False
    assert api.post("/api/strait/jobs/nightly/resume/").json()["enabled"] is True
    assert Job.objects.get().enabled is True


def test_pause__needs_change_job_for_a_user():
    make_job("nightly")
    user = User.objects.create_user("viewer")
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = APIClient()
    client.force_login(user)
    assert client.get("/api/strait/jobs/nightly/").status_code == 200
    response = client.post("/api/strait/jobs/nightly/pause/")
    assert response.status_code == 403
    assert "django_strait.change_job" in error_of(response)["message"]
    assert Job.objects.get().enabled is True


def test_jobs_write_scope__cannot_trigger():
    make_job("nightly")
    _, key = issue_key("writer", ["jobs:write"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert client.post("/api/strait/jobs/nightly/pause/").status_code == 200
    assert client.post("/api/strait/jobs/nightly/trigger/").status_code == 403


# Bulk trigger


def bulk(api, name, body, **headers):
    return api.post(f"/api/strait/jobs/{name}/bulk-trigger/", body, format="json", headers=headers)


def test_bulk_trigger__queues_one_run_per_payload_in_order(api):
    make_job("fan-out", queue="fan")
    response = bulk(api, "fan-out", {"payloads": [{"n": 1}, {"n": 2}, {"n": 3}], "priority": 7})
    assert response.status_code == 202
    body = response.json()
    assert body["created"] == 3
    runs = {r.pk: r for r in JobRun.objects.all()}
    assert [runs[r["id"]].payload for r in body["runs"]] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert {(r.priority, r.queue) for r in runs.values()} == {(7, "fan")}
    assert all(r["idempotency_hit"] is False for r in body["runs"])


def test_bulk_trigger__per_payload_keys_make_repeats_hits(api):
    make_job("fan-out")
    first = bulk(api, "fan-out", {"payloads": [1, 2], "idempotency_keys": ["a", "b"]}).json()
    response = bulk(api, "fan-out", {"payloads": [9, 3], "idempotency_keys": ["a", "c"]})
    assert response.status_code == 202
    body = response.json()
    assert body["created"] == 1
    assert [r["idempotency_hit"] for r in body["runs"]] == [True, False]
    assert body["runs"][0]["id"] == first["runs"][0]["id"]
    assert JobRun.objects.count() == 3
    again = bulk(api, "fan-out", {"payloads": [9, 3], "idempotency_keys": ["a", "c"]})
    assert again.status_code == 200 and again.json()["created"] == 0


@override_settings(STRAIT={**STRAIT, "API_BULK_TRIGGER_MAX": 3})
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"payloads": [1, 2, 3, 4]}, "payloads"),
        ({"payloads": []}, "payloads"),
        ({"payloads": "x"}, "payloads"),
        ({}, "payloads"),
        ({"payloads": [1], "payload": 1}, "payload"),
        ({"payloads": [1, 2], "idempotency_keys": ["a"]}, "idempotency_keys"),
        ({"payloads": [1, 2], "idempotency_keys": ["a", "a"]}, "idempotency_keys"),
        ({"payloads": [1], "idempotency_keys": [None]}, "idempotency_keys"),
        ({"payloads": [1, {"x": "a\u0000"}]}, "payloads"),
        ({"payloads": [1], "priority": 500}, "priority"),
        ([1], "body"),
    ],
)
def test_bulk_trigger__bad_field_is_a_400_naming_it(api, body, field):
    make_job("fan-out")
    response = bulk(api, "fan-out", body)
    assert response.status_code == 400
    assert list(error_of(response)["details"]) == [field]
    assert not JobRun.objects.exists()


def test_bulk_trigger__unknown_job_is_a_404(api):
    response = bulk(api, "nope", {"payloads": [1]})
    assert response.status_code == 404
    assert error_of(response)["code"] == "unknown_job"
