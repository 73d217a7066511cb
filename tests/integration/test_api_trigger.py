"""The REST API: trigger a job, read a run; auth, permissions, errors, idempotency."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_strait.models import JobRun
from tests.integration.factories import make_job, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counts live in the cache: start every test from none."""
    cache.clear()


def trigger_url(name: str) -> str:
    return f"/api/strait/jobs/{name}/trigger/"


def user_with(*codenames: str, username: str = "caller") -> User:
    user = User.objects.create_user(username)  # no password: nothing to hash
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def job():
    return make_job("send-invoice", queue="billing", priority=5)


@pytest.fixture
def api() -> APIClient:
    """A client logged in (session) as a user who may trigger and read runs."""
    client = APIClient()
    client.force_login(user_with("trigger_job", "view_jobrun"))
    return client


def post(client: APIClient, name: str, body, **headers):
    return client.post(trigger_url(name), body, format="json", headers=headers)


# Triggering


def test_trigger__queues_a_run_and_answers_202(api, job):
    response = post(api, job.name, {"payload": {"invoice": 7}})
    assert response.status_code == 202
    body = response.json()
    run = JobRun.objects.get()
    assert body == {
        "id": run.pk,
        "status": "queued",
        "job": "send-invoice",
        "queue": "billing",
        "available_at": body["available_at"],
        "idempotency_hit": False,
    }
    assert run.payload == {"invoice": 7}
    assert run.priority == 5
    assert response["Location"] == f"/api/strait/runs/{run.pk}/"


def test_trigger__applies_every_option(api, job):
    before = timezone.now()
    body = {
        "payload": [1, 2],
        "delay": "30s",
        "priority": -3,
        "queue": "slow",
        "max_attempts": 7,
        "retry": {"strategy": "linear", "initial_delay": "2s"},
    }
    assert post(api, job.name, body).status_code == 202
    run = JobRun.objects.get()
    assert (run.priority, run.queue, run.max_attempts) == (-3, "slow", 7)
    assert run.retry_overrides["strategy"] == "linear"
    assert run.available_at >= before + dt.timedelta(seconds=30)


def test_trigger__run_at_is_an_iso_datetime_with_offset(api, job):
    response = post(api, job.name, {"run_at": "2031-05-01T10:00:00+02:00"})
    assert response.status_code == 202
    expected = dt.datetime(2031, 5, 1, 8, 0, tzinfo=dt.UTC)
    assert JobRun.objects.get().available_at == expected


@pytest.mark.parametrize(
    "payload", [None, "text", 12, [1, "two", None], {"deep": {"er": [True, 1.5]}}]
)
def test_trigger__any_json_value_is_a_payload(api, job, payload):
    assert post(api, job.name, {"payload": payload}).status_code == 202
    assert JobRun.objects.get().payload == ({} if payload is None else payload)


def test_trigger__an_empty_body_queues_an_empty_payload(api, job):
    response = api.post(trigger_url(job.name))
    assert response.status_code == 202
    assert JobRun.objects.get().payload == {}


# Bad input: 400 naming the field, nothing created


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retry": {"bogus": 1}}, "retry.bogus"),
        ({"retry": "exponential"}, "retry"),
        ({"retry": {"initial_delay": "-1s"}}, "retry.initial_delay"),
        ({"delay": "-5s"}, "delay"),
        ({"delay": -5}, "delay"),
        ({"delay": "soon"}, "delay"),
        ({"delay": 5, "run_at": "2031-01-01T00:00:00Z"}, "delay"),
        ({"priority": 500}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"queue": ""}, "queue"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"run_at": "2031-01-01T00:00:00"}, "run_at"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"payload": {}, "colour": "red"}, "colour"),
        # Valid JSON that no database column can hold alike (PostgreSQL's jsonb refuses it).
        ({"payload": {"note": "a\u0000b"}}, "payload"),
        ([1, 2], "body"),
    ],
)
def test_trigger__bad_field_is_a_400_naming_it(api, job, body, field):
    response = post(api, job.name, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["details"]) == [field]
    assert error["message"].startswith(f"{field}: ")
    assert not JobRun.objects.exists()


def test_trigger__malformed_json_is_a_400(api, job):
    response = api.post(trigger_url(job.name), '{"payload": ', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_trigger__form_data_is_a_415(api, job):
    response = api.post(trigger_url(job.name), {"payload": "x"}, format="multipart")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_trigger__get_is_a_405_in_the_error_shape(api, job):
    response = api.get(trigger_url(job.name))
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_trigger__unknown_job_is_a_404_naming_it(api, job):
    response = post(api, "no-such-job", {})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_job"
    assert "no-such-job" in error["message"]


# Auth


def test_trigger__without_credentials_is_a_401(job):
    response = post(APIClient(), job.name, {})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["error"]["code"] == "not_authenticated"
    assert not JobRun.objects.exists()


def test_trigger__a_bad_token_is_a_401(job):
    response = post(APIClient(), job.name, {}, Authorization="Token not-a-real-token")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_trigger__without_the_trigger_job_permission_is_a_403(job):
    client = APIClient()
    client.force_login(user_with("view_jobrun"))
    response = post(client, job.name, {})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "permission_denied"
    assert "django_strait.trigger_job" in error["message"]
    assert not JobRun.objects.exists()


def test_trigger__an_inactive_users_token_is_a_401(job):
    user = user_with("trigger_job")
    token = Token.objects.create(user=user)
    user.is_active = False
    user.save()
    response = post(APIClient(), job.name, {}, Authorization=f"Token {token.key}")
    assert response.status_code == 401
    assert not JobRun.objects.exists()


def test_trigger__token_auth_works(job):
    token = Token.objects.create(user=user_with("trigger_job"))
    response = post(APIClient(), job.name, {"payload": 1}, Authorization=f"Token {token.key}")
    assert response.status_code == 202
    assert JobRun.objects.get().payload == 1


# Idempotency


def test_trigger__idempotency_header_repeat_answers_200_with_the_same_run(api, job):
    first = post(api, job.name, {"payload": 1}, **{"Idempotency-Key": "order-9"})
    again = post(api, job.name, {"payload": 2}, **{"Idempotency-Key": "order-9"})
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_hit"] is True
    run = JobRun.objects.get()
    assert (run.idempotency_key, run.payload) == ("order-9", 1)


def test_trigger__idempotency_body_key_repeat_matches_the_header(api, job):
    first = post(api, job.name, {"idempotency_key": "k1"})
    again = post(api, job.name, {"idempotency_key": "k1"}, **{"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert JobRun.objects.count() == 1


def test_trigger__idempotency_header_and_body_that_differ_are_a_400(api, job):
    response = post(api, job.name, {"idempotency_key": "a"}, **{"Idempotency-Key": "b"})
    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == ["idempotency_key"]
    assert not JobRun.objects.exists()


def test_trigger__same_key_on_another_job_is_another_run(api, job):
    other = make_job("other-job")
    post(api, job.name, {}, **{"Idempotency-Key": "shared"})
    response = post(api, other.name, {}, **{"Idempotency-Key": "shared"})
    assert response.status_code == 202
    assert JobRun.objects.count() == 2


# Reading a run


def test_run__returns_the_run_with_its_attempts(api):
    run = make_run(status="dead_letter", attempts=2, error_type="http.503", payload={"a": 1})
    response = api.get(f"/api/strait/runs/{run.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["status"], body["payload"]) == (run.pk, "dead_letter", {"a": 1})
    assert [a["number"] for a in body["attempts"]] == [1, 2]
    assert body["attempts"][1]["error_type"] == "http.503"


def test_run__shows_what_a_trigger_made(api, job):
    location = post(api, job.name, {"payload": "hi"})["Location"]
    body = api.get(location).json()
    assert (body["job"], body["payload"], body["attempts"]) == ("send-invoice", "hi", [])


def test_run__unknown_id_is_a_404(api):
    response = api.get("/api/strait/runs/999999/")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not_found", "message": "no run with id 999999", "details": {},
    }  # fmt: skip


def test_run__needs_the_view_jobrun_permission():
    run = make_run()
    client = APIClient()
    client.force_login(user_with("trigger_job"))
    response = client.get(f"/api/strait/runs/{run.pk}/")
    assert response.status_code == 403
    assert "django_strait.view_jobrun" in response.json()["error"]["message"]
