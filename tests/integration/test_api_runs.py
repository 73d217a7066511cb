"""The REST API's runs: filtered keyset lists, a run with its attempts, cancel, replay."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from django_strait.models import JobRun
from tests.integration.factories import client_with, make_job, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    return client_with("runs:read", "runs:write")


def ids(response) -> list[int]:
    assert response.status_code == 200, response.json()
    return [r["id"] for r in response.json()["results"]]


def error_of(response) -> dict:
    return response.json()["error"]


# Lists


def test_list__newest_first_without_attempts(api):
    runs = [make_run(status="dead_letter") for _ in range(3)]
    response = api.get("/api/strait/runs/")
    assert ids(response) == [r.pk for r in reversed(runs)]
    assert "attempts" not in response.json()["results"][0]


def test_list__pages_follow_the_cursor_to_the_end(api):
    made = [make_run().pk for _ in range(7)]
    seen, url = [], "/api/strait/runs/?limit=3&status=queued"
    while url:
        response = api.get(url)
        seen += ids(response)
        url = response.json()["next"]
        if url:
            assert parse_qs(urlparse(url).query)["status"] == ["queued"]  # filters kept
    assert seen == sorted(made, reverse=True)


def test_list__never_counts_the_table(api):
    for _ in range(3):
        make_run()
    with CaptureQueriesContext(connection) as queries:
        ids(api.get("/api/strait/runs/?limit=2"))
    assert not [q for q in queries if "COUNT(" in q["sql"].upper()]


def test_list__filters_by_status_job_queue_and_error_type(api):
    billing = make_job("billing", queue="money")
    mail = make_job("mail")
    a = make_run(billing, status="dead_letter", error_type="http.503")
    b = make_run(billing, status="dead_letter", error_type="timeout")
    c = make_run(mail, status="failed", error_type="http.404")
    d = make_run(mail, status="completed")
    assert ids(api.get("/api/strait/runs/?status=dead_letter,failed")) == [c.pk, b.pk, a.pk]
    assert ids(api.get("/api/strait/runs/?job=mail")) == [d.pk, c.pk]
    assert ids(api.get("/api/strait/runs/?queue=money")) == [b.pk, a.pk]
    assert ids(api.get("/api/strait/runs/?error_type=http.*")) == [c.pk, a.pk]
    assert ids(api.get("/api/strait/runs/?error_type=timeout&job=billing")) == [b.pk]


def test_list__filters_by_created_range(api):
    now = timezone.now()
    old = make_run(created_at=now - dt.timedelta(days=3))
    new = make_run(created_at=now)
    after = (now - dt.timedelta(days=1)).isoformat()
    assert ids(api.get("/api/strait/runs/", {"created_after": after})) == [new.pk]
    assert ids(api.get("/api/strait/runs/", {"created_before": after})) == [old.pk]


@pytest.mark.parametrize(
    ("query", "field", "fragment"),
    [
        ("status=done", "status", "allowed: queued"),
        ("status=", "status", "at least one"),
        ("job=nope", "job", "no job named 'nope'"),
        ("error_type=http*", "error_type", "prefix ending in .*"),
        ("created_after=yesterday", "created_after", "ISO 8601"),
        ("created_before=2030-01-01T00:00:00", "created_before", "UTC offset"),
        ("created_after=9999-12-31T23:59:59-23:00", "created_after", "ISO 8601"),
        ("colour=red", "colour", "unknown filter"),
        ("cursor=OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5", "cursor", "next link"),
    ],
)
def test_list__bad_filter_is_a_400_naming_it(api, query, field, fragment):
    response = api.get(f"/api/strait/runs/?{query}")
    assert response.status_code == 400
    error = error_of(response)
    assert list(error["details"]) == [field]
    assert fragment in error["message"]


# One run


def test_retrieve__huge_id_is_a_404_not_an_error(api):
    response = api.get(f"/api/strait/runs/{2**70}/")
    assert response.status_code == 404


def test_retrieve_and_list__show_the_reserved_and_actual_cost(api):
    run = make_run(status="executing", reserved_cost=Decimal("0.5"), actual_cost=Decimal("1.25"))
    free = make_run(status="completed")
    body = api.get(f"/api/strait/runs/{run.pk}/").json()
    assert (body["reserved_cost"], body["actual_cost"]) == ("0.500000", "1.250000")
    listed = {r["id"]: r for r in api.get("/api/strait/runs/").json()["results"]}
    assert (listed[run.pk]["reserved_cost"], listed[run.pk]["actual_cost"]) == (
        "0.500000", "1.250000",
    )  # fmt: skip
    assert (listed[free.pk]["reserved_cost"], listed[free.pk]["actual_cost"]) == (None, None)


# Cancel


def test_cancel__a_queued_run_is_canceled(api):
    run = make_run()
    response = api.post(f"/api/strait/runs/{run.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "canceled"
    assert JobRun.objects.get().status == "canceled"


def test_cancel__an_executing_run_is_flagged(api):
    run = make_run(status="executing")
    response = api.post(f"/api/strait/runs/{run.pk}/cancel/")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["cancel_requested"]) == ("executing", True)


def test_cancel__a_finished_run_is_a_409_naming_its_status(api):
    run = make_run(status="completed")
    response = api.post(f"/api/strait/runs/{run.pk}/cancel/")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "invalid_transition"
    assert f"run {run.pk} is completed: cannot cancel it" in error["message"]


def test_cancel__unknown_run_is_a_404(api):
    assert api.post("/api/strait/runs/999999/cancel/").status_code == 404


def test_cancel__needs_the_cancel_permission_for_a_user():
    run = make_run()
    user = User.objects.create_user("u")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_jobrun", "replay_jobrun"])
    )
    client = APIClient()
    client.force_login(user)
    response = client.post(f"/api/strait/runs/{run.pk}/cancel/")
    assert response.status_code == 403
    assert "django_strait.cancel_jobrun" in error_of(response)["message"]
    assert JobRun.objects.get().status == "queued"


def test_cancel__needs_runs_write_for_a_key():
    run = make_run()
    response = client_with("runs:read").post(f"/api/strait/runs/{run.pk}/cancel/")
    assert response.status_code == 403
    assert "runs:write" in error_of(response)["message"]


# Replay


def test_replay__a_failed_run_is_queued_with_a_fresh_budget(api):
    run = make_run(status="failed", attempts=3)
    response = api.post(f"/api/strait/runs/{run.pk}/replay/")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["replay_count"], body["replayed_by"]) == ("queued", 1, "api-key:k")
    assert [a["number"] for a in body["attempts"]] == [1, 2, 3]
    assert JobRun.objects.get().attempts_before_replay == 3


def test_replay__with_a_new_payload(api):
    run = make_run(status="dead_letter", payload={"v": 1})
    response = api.post(f"/api/strait/runs/{run.pk}/replay/", {"payload": {"v": 2}}, format="json")
    assert response.status_code == 200
    assert JobRun.objects.get().payload == {"v": 2}


def test_replay__a_queued_run_is_a_409(api):
    run = make_run()
    response = api.post(f"/api/strait/runs/{run.pk}/replay/")
    assert response.status_code == 409
    assert "is queued: cannot replay it" in error_of(response)["message"]


@pytest.mark.parametrize(
    ("body", "field"), [({"payload": 1, "by": "me"}, "by"), ({"payload": "a\u0000"}, "payload")]
)
def test_replay__bad_body_is_a_400_naming_the_field(api, body, field):
    run = make_run(status="dead_letter", payload={"v": 1})
    response = api.post(f"/api/strait/runs/{run.pk}/replay/", body, format="json")
    assert response.status_code == 400
    assert list(error_of(response)["details"]) == [field]
    assert JobRun.objects.get().status == "dead_letter"
