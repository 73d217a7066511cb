"""The REST API's dead-letter queue: list, replay one, replay by filter, discard."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from rest_framework.test import APIClient

from django_strait.api import deadletters
from django_strait.models import JobRun
from tests.integration.factories import client_with, make_job, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    return client_with("dlq:read", "dlq:replay", name="ops")


def error_of(response) -> dict:
    return response.json()["error"]


def statuses() -> dict[int, str]:
    return dict(JobRun.objects.values_list("pk", "status"))


def test_list__only_dead_letters_with_filters(api):
    billing = make_job("billing")
    a = make_run(billing, status="dead_letter", error_type="http.503")
    b = make_run(status="dead_letter", error_type="timeout")
    make_run(billing, status="failed")
    make_run(billing)
    assert [r["id"] for r in api.get("/api/strait/dead-letters/").json()["results"]] == [b.pk, a.pk]
    response = api.get("/api/strait/dead-letters/?job=billing")
    assert [r["id"] for r in response.json()["results"]] == [a.pk]
    response = api.get("/api/strait/dead-letters/?error_type=timeout")
    assert [r["id"] for r in response.json()["results"]] == [b.pk]


def test_list__status_is_not_a_filter_here(api):
    response = api.get("/api/strait/dead-letters/?status=queued")
    assert response.status_code == 400
    assert list(error_of(response)["details"]) == ["status"]


def test_replay_one__queues_it_and_records_who(api):
    run = make_run(status="dead_letter")
    response = api.post(
        f"/api/strait/dead-letters/{run.pk}/replay/", {"payload": [1]}, format="json"
    )
    assert response.status_code == 200
    row = JobRun.objects.get()
    assert (row.status, row.payload, row.replayed_by) == ("queued", [1], "api-key:ops")
    assert row.replayed_at is not None


def test_replay_one__a_run_that_is_not_a_dead_letter_is_a_404(api):
    run = make_run(status="failed")
    response = api.post(f"/api/strait/dead-letters/{run.pk}/replay/")
    assert response.status_code == 404
    assert JobRun.objects.get().status == "failed"


def test_discard__drops_it_keeping_the_row(api):
    run = make_run(status="dead_letter")
    response = api.post(
        f"/api/strait/dead-letters/{run.pk}/discard/", {"reason": "duplicate"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "discarded"
    assert statuses() == {run.pk: "discarded"}


def test_discard__needs_the_discard_permission_for_a_user():
    run = make_run(status="dead_letter")
    user = User.objects.create_user("u")
    user.user_permissions.add(*Permission.objects.filter(codename__in=["replay_jobrun"]))
    client = APIClient()
    client.force_login(user)
    response = client.post(f"/api/strait/dead-letters/{run.pk}/discard/")
    assert response.status_code == 403
    assert "django_strait.discard_jobrun" in error_of(response)["message"]
    assert client.post(f"/api/strait/dead-letters/{run.pk}/replay/").status_code == 200


def test_read_scope__cannot_replay():
    run = make_run(status="dead_letter")
    response = client_with("dlq:read").post(f"/api/strait/dead-letters/{run.pk}/replay/")
    assert response.status_code == 403
    assert "dlq:replay" in error_of(response)["message"]


# Replay by filter


def bulk_replay(api, body):
    return api.post("/api/strait/dead-letters/replay/", body, format="json")


def test_bulk_replay__replays_what_matches_and_says_how_many(api):
    billing = make_job("billing")
    hits = [make_run(billing, status="dead_letter", error_type="http.503") for _ in range(3)]
    other_type = make_run(billing, status="dead_letter", error_type="timeout")
    other_job = make_run(status="dead_letter", error_type="http.503")
    failed = make_run(billing, status="failed", error_type="http.503")
    response = bulk_replay(api, {"job": ["billing"], "error_type": ["http.*"]})
    assert response.status_code == 200
    assert response.json() == {"replayed": 3}
    after = statuses()
    assert {after[r.pk] for r in hits} == {"queued"}
    assert after[other_type.pk] == after[other_job.pk] == "dead_letter"
    assert after[failed.pk] == "failed"
    assert set(
        JobRun.objects.filter(pk__in=[r.pk for r in hits]).values_list("replayed_by", flat=True)
    ) == {"api-key:ops"}


def test_bulk_replay__works_in_batches(api, monkeypatch):
    monkeypatch.setattr(deadletters, "REPLAY_BATCH", 2)
    for _ in range(5):
        make_run(status="dead_letter")
    assert bulk_replay(api, {"all": True}).json() == {"replayed": 5}
    assert set(statuses().values()) == {"queued"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "all"),
        ({"all": False}, "all"),
        ({"job": ["nope"]}, "job"),
        ({"job": []}, "job"),
        ({"job": "billing"}, "job"),
        ({"error_type": ["http*"]}, "error_type"),
        ({"created_after": "soon"}, "created_after"),
        ({"status": ["failed"]}, "status"),
    ],
)
def test_bulk_replay__bad_filter_is_a_400_naming_it(api, body, field):
    run = make_run(status="dead_letter")
    response = bulk_replay(api, body)
    assert response.status_code == 400
    assert list(error_of(response)["details"]) == [field]
    assert statuses() == {run.pk: "dead_letter"}
