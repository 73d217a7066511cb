"""OJS ext-progress (only the holder reports) and the bounded events stream."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from django_strait.ojs import stream

pytestmark = pytest.mark.django_db(transaction=True)
CT = "application/openjobspec+json"


@pytest.fixture
def client(settings) -> Client:
    settings.STRAIT = {**getattr(settings, "STRAIT", {}), "OJS_REQUIRE_AUTH": False}
    return Client()


def call(client: Client, method: str, path: str, body=None) -> tuple[int, dict]:
    data = json.dumps(body) if body is not None else ""
    r = client.generic(method, path, data, content_type=CT)
    return r.status_code, json.loads(r.content or b"{}")


def active(client: Client, worker: str = "w1") -> dict:
    call(client, "POST", "/ojs/v1/jobs", {"type": "p.job", "args": [], "options": {"queue": "pq"}})
    return call(client, "POST", "/ojs/v1/workers/fetch", {"queues": ["pq"], "worker_id": worker})[
        1
    ]["jobs"][0]


def test_progress__kept_for_the_holder_shown_in_the_job_and_never_backwards(client) -> None:
    job = active(client)
    path = f"/ojs/v1/jobs/{job['id']}/progress"
    status, kept = call(client, "PUT", path, {"progress": 0.6, "message": "m", "worker_id": "w1"})
    assert status == 200 and kept["accepted"] and kept["progress"] == 0.6, kept
    info = call(client, "GET", f"/ojs/v1/jobs/{job['id']}")[1]["job"]
    assert (info["progress"], info["progress_message"]) == (0.6, "m")
    assert call(client, "PUT", path, {"progress": 0.1})[1]["progress"] == 0.6
    # The latest report is kept whole (its number clamped, then never below the last).
    latest = call(client, "PUT", path, {"progress": -3, "data": {"n": 1}})[1]
    assert (latest["progress"], latest["data"], latest["message"]) == (0.6, {"n": 1}, None)
    call(client, "POST", "/ojs/v1/workers/ack", {"job_id": job["id"], "result": 1})
    assert call(client, "GET", path)[1]["progress"] == 1.0  # completed: 1.0 (spec 8.1)
    status, late = call(client, "PUT", path, {"progress": 0.9})
    assert status == 200 and late["accepted"] is False and late["state"] == "completed"


def test_progress__a_reservation_not_the_jobs_is_409_and_changes_nothing(client) -> None:
    job = active(client, "w1")
    path = f"/ojs/v1/jobs/{job['id']}/progress"
    status, answer = call(client, "PUT", path, {"progress": 0.5, "worker_id": "w2"})
    assert status == 409 and answer["error"]["code"] == "conflict", answer
    status, answer = call(client, "PUT", path, {"progress": 0.5, "attempt": 2})
    assert status == 409, answer
    assert call(client, "GET", path)[1]["progress"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "progress"),
        ({"progress": "half"}, "progress"),
        ({"progress": True}, "progress"),
        ({"progress": 0.5, "message": "x" * 1001}, "message"),
        ({"data": [1]}, "data"),
        ({"data": {"x": "y" * 20_000}}, "data"),
        ({"progress": 0.5, "percent": 50}, "percent"),
        ({"progress": 0.5, "attempt": 0}, "attempt"),
    ],
)
def test_progress__bad_fields_are_400_naming_them(client, body, field) -> None:
    job = active(client)
    status, answer = call(client, "PUT", f"/ojs/v1/jobs/{job['id']}/progress", body)
    assert status == 400 and answer["error"]["details"]["field"] == field, answer


def test_progress__unknown_job_is_404(client) -> None:
    status, answer = call(
        client, "GET", "/ojs/v1/jobs/01900000-0000-7000-8000-000000000009/progress"
    )
    assert status == 404 and answer["error"]["code"] == "not_found"


def test_events_stream__sse_frames_heartbeats_and_an_end(client, monkeypatch) -> None:
    monkeypatch.setattr(stream, "HEARTBEAT_SECONDS", 0.3)
    monkeypatch.setattr(stream, "POLL_SECONDS", 0.2)
    call(client, "POST", "/ojs/v1/jobs", {"type": "s.job", "args": [], "options": {"queue": "sq"}})
    response = client.get(
        "/ojs/v1/events/stream",
        {"max_seconds": "1", "since": "2000-01-01T00:00:00Z", "queues": "sq"},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    text = b"".join(response.streaming_content).decode()
    assert "event: job.enqueued" in text and ": heartbeat" in text, text
    assert text.count("event: job.enqueued") == 1  # each event once, however many polls
    assert text.rstrip().endswith('data: {"reason": "max_seconds"}'), text


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"max_seconds": "0"}, "max_seconds"),
        ({"max_seconds": "301"}, "max_seconds"),
        ({"max_seconds": "nan"}, "max_seconds"),
        ({"types": "job.exploded"}, "types"),
        ({"since": "yesterday"}, "since"),
        ({"queues": ",".join(["q"] * 51)}, "queues"),
    ],
)
def test_events_stream__bounds_are_400_naming_the_field(client, query, field) -> None:
    response = client.get("/ojs/v1/events/stream", query)
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == field


def test_events_stream__streams_through_the_fast_door_before_it_ends(lean_server) -> None:
    import time
    import urllib.request

    started = time.monotonic()
    url = f"{lean_server}/ojs/v1/events/stream?max_seconds=3"
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (127.0.0.1)
        assert response.headers["Content-Type"].startswith("text/event-stream")
        first = response.readline()
        first_at = time.monotonic() - started
        rest = response.read()
    assert first.startswith(b"retry: ") and first_at < 2.5, (first, first_at)  # not buffered
    assert rest.rstrip().endswith(b'data: {"reason": "max_seconds"}'), rest
