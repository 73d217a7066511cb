"""The REST API's error shape where the database would otherwise answer: NUL, unknown paths."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from django_strait.api.auth import issue_key
from django_strait.models import Job, JobRun
from tests.integration.factories import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()


@pytest.fixture
def api() -> APIClient:
    make_job("nightly")
    _, key = issue_key("k", ["*"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


def call(api, method, url, body):
    return (
        getattr(api, method)(url, body, format="json")
        if body is not None
        else getattr(api, method)(url)
    )


# PostgreSQL cannot store or compare NUL; every database refuses it alike, naming the field.
@pytest.mark.parametrize(
    ("method", "url", "body", "field"),
    [
        ("post", "/api/strait/jobs/nightly/trigger/", {"queue": "a\x00"}, "queue"),
        ("post", "/api/strait/jobs/nightly/trigger/", {"idempotency_key": "a\x00"}, "idempotency_key"),
        ("post", "/api/strait/jobs/nightly/trigger/", {"payload": {"a\x00": 1}}, "payload"),
        ("post", "/api/strait/jobs/nightly/bulk-trigger/", {"payloads": [1], "idempotency_keys": ["\x00"]}, "idempotency_keys"),
        ("post", "/api/strait/dead-letters/replay/", {"queue": ["a\x00"]}, "queue"),
        ("post", "/api/strait/jobs/", {"name": "x", "handler": "a\x00"}, "handler"),
        ("patch", "/api/strait/jobs/nightly/", {"headers": {"a": "b\x00"}}, "headers"),
        ("patch", "/api/strait/jobs/nightly/", {"non_retryable_errors": ["b\x00"]}, "non_retryable_errors"),
        ("get", "/api/strait/runs/?job=a%00", None, "job"),
        ("get", "/api/strait/runs/?queue=a%00", None, "queue"),
        ("get", "/api/strait/runs/?error_type=a%00", None, "error_type"),
        ("get", "/api/strait/jobs/?cursor=ImFcdTAwMDAi", None, "cursor"),
    ],
)  # fmt: skip
def test_nul_character__is_a_400_naming_the_field(api, method, url, body, field):
    response = call(api, method, url, body)
    assert response.status_code == 400
    assert list(response.json()["error"]["details"]) == [field]
    assert not JobRun.objects.exists()
    assert list(Job.objects.values_list("name", "headers")) == [("nightly", {})]


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/strait/jobs/a%00b/"),
        ("post", "/api/strait/jobs/a%00b/trigger/"),
        ("post", "/api/strait/jobs/a%00b/pause/"),
    ],
)
def test_nul_character_in_a_job_name__is_a_404(api, method, url):
    response = call(api, method, url, None)
    assert response.status_code == 404
    assert "no job named 'a\\x00b'" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/api/strait/runs/-1/"),
        ("post", "/api/strait/runs/x/cancel/"),
        ("get", "/api/strait/nope"),
    ],
)
def test_unknown_path__is_a_json_404_even_without_credentials(method, url):
    response = getattr(APIClient(), method)(url)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
