"""Hostile input to the OJS binding: each refusal a 4xx in the OJS error shape, naming the field.

Each case here answered 500 once (issue 41, "Every door guarded"): a time past
what UTC holds, NUL in a stored option, a 200,000-character time zone, NUL in a
path parameter or a query string, a body past Django's own upload limit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_strait.models import Job, JobRun

pytestmark = pytest.mark.django_db

OJS = "application/openjobspec+json"


@pytest.fixture
def ojs(settings) -> Client:
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": False}
    return Client(raise_request_exception=False)


def post(client: Client, path: str, body: Any) -> Any:
    text = body if isinstance(body, str) else json.dumps(body)
    return client.post(path, data=text, content_type=OJS)


def refused(response: Any, status: int, code: str, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert error["code"] == code, error
    assert field in error["message"], error
    return error


@pytest.mark.parametrize("moment", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"])
@pytest.mark.parametrize("name", ["scheduled_at", "delay_until", "expires_at"])
def test_enqueue__a_time_past_what_utc_holds_is_a_400_naming_it(ojs, name, moment):
    body = {"type": "mail.send", "args": [], "options": {name: moment}}

    error = refused(post(ojs, "/ojs/v1/jobs", body), 400, "invalid_request", f"options.{name}")

    assert "1970 to 9000" in error["message"]
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"unique": {"key": ["a\x00b"]}}, "options.unique.key[0]"),
        ({"metadata": {"k\x00": 1}}, "options.metadata"),
        ({"tags": ["\x00"]}, "options.tags[0]"),
    ],
)
def test_enqueue__nul_anywhere_in_the_body_is_a_400_naming_where(ojs, options, where):
    body = {"type": "mail.send", "args": [], "options": options}

    error = refused(post(ojs, "/ojs/v1/jobs", body), 400, "invalid_payload", "options")

    assert where.split(".")[-1].split("[")[0] in error["message"] and "NUL" in error["message"]
    assert not JobRun.objects.exists()


def test_cron__a_200000_character_time_zone_is_a_400_naming_it(ojs):
    body = {"name": "nightly", "expression": "0 3 * * *", "timezone": "E" * 200_000,
            "job_template": {"type": "report.build", "args": []}}  # fmt: skip

    error = refused(post(ojs, "/ojs/v1/cron", body), 400, "invalid_request", "timezone")

    assert "at most 64 characters" in error["message"]
    assert len(error["message"]) < 500
    assert not Job.objects.exists()


@pytest.mark.parametrize("method", ["get", "delete"])
def test_cron__nul_in_the_name_is_a_404(ojs, method):
    response = getattr(ojs, method)("/ojs/v1/cron/night%00ly")

    error = refused(response, 404, "not_found", "name")
    assert "NUL" in error["message"]


@pytest.mark.parametrize(
    "path",
    ["/ojs/v1/jobs/a%00b", "/ojs/v1/dead-letter/%00", "/ojs/v1/admin/dead-letter/%00/retry"],
)
def test_any_path_parameter__with_nul_is_a_404(ojs, path):
    response = ojs.post(path) if path.endswith("retry") else ojs.get(path)

    refused(response, 404, "not_found", "job_id")


@pytest.mark.parametrize(
    ("query", "field"),
    [("queues=a%00", "queues"), ("types=job.completed%00", "types"), ("limit=1%00", "limit"),
     ("x%00=1", "x\\u0000")],
)  # fmt: skip
def test_events__nul_in_the_query_string_is_a_400_naming_the_parameter(ojs, query, field):
    refused(ojs.get(f"/ojs/v1/events?{query}"), 400, "invalid_request", field)


def test_dead_letters__nul_in_the_query_string_is_a_400(ojs):
    refused(ojs.get("/ojs/v1/dead-letter?page=%00"), 400, "invalid_request", "page")


def test_a_body_past_django_upload_limit__is_a_413_in_the_ojs_shape(ojs, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    text = json.dumps({"type": "mail.send", "args": ["x" * 5000]})

    response = post(ojs, "/ojs/v1/jobs", text)

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "invalid_payload"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/ojs/v1/jobs/a%2Fb"),
        ("post", "/ojs/v1/workflows/x/cancel"),
        ("delete", "/ojs/v2/x"),
    ],
)
def test_a_path_no_endpoint_serves__is_a_404_in_the_ojs_shape(ojs, method, path):
    response = getattr(ojs, method)(path)

    refused(response, 404, "not_found", "no OJS endpoint")
    assert response["OJS-Version"] == "1.0"
