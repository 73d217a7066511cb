"""OJS level 4 and the fixed deviations, against a live server (both doors where they apply).

Queue pause reaches the project's own workers' claim; ``options.unique`` keeps to
the key's queues; the manifest, the error envelope on unknown paths and methods,
``retry`` at the envelope's top level, a cron registered again after a delete.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from django.utils import timezone

from django_strait.models import JobRun, QueueState
from django_strait.services.triggering import trigger
from django_strait.storage import queues as queue_states
from django_strait.transitions.worker import claim_and_start
from tests.ojs.runner import Runner  # noqa: F401 (the same live servers as the suite's cases)

pytestmark = pytest.mark.django_db(transaction=True)
TYPE = "application/openjobspec+json"


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": TYPE})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, kind, raw = response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        status, kind, raw = exc.code, exc.headers["Content-Type"], exc.read()
    return status, kind, json.loads(raw) if raw else None


@pytest.fixture(params=["django", "fast door"])
def base(request) -> str:
    return request.getfixturevalue("ojs_server" if request.param == "django" else "lean_server")


def test_unknown_paths_and_methods_answer_the_error_envelope(base: str) -> None:
    for method, path in [("GET", "/ojs/v1/nothing"), ("POST", "/ojs/v2/jobs"),
                         ("GET", "/ojs/v1/jobs/a/b/c")]:  # fmt: skip
        status, kind, body = call(base, method, path, {} if method == "POST" else None)
        assert (status, kind, body["error"]["code"]) == (404, TYPE, "not_found"), path
    for method, path in [("PUT", "/ojs/v1/jobs"), ("GET", "/ojs/v1/workers/fetch"),
                         ("DELETE", "/ojs/v1/queues/q/pause"), ("PATCH", "/ojs/manifest")]:  # fmt: skip
        status, kind, body = call(base, method, path, {} if method != "GET" else None)
        assert (status, kind) == (405, TYPE), (method, path)
        assert body["error"]["message"], (method, path)


def test_the_manifest_has_ojs_version_and_capabilities(ojs_server: str) -> None:
    status, _, body = call(ojs_server, "GET", "/ojs/manifest")
    assert status == 200
    assert body["ojs_version"] == body["specversion"] == "1.0"
    assert body["capabilities"]["unique_jobs"] is body["capabilities"]["pause_resume"] is True
    assert body["capabilities"]["workflows"] is True
    assert body["conformance_level"] == 4
    assert {"admin-api", "progress", "events-stream"} <= set(body["extensions"])


def test_retry_is_read_at_the_top_level_too(base: str) -> None:
    job = {"type": "top.retry", "args": [], "retry": {"max_attempts": 7}}
    status, _, body = call(base, "POST", "/ojs/v1/jobs", job)
    assert status == 201 and body["job"]["max_attempts"] == 7
    status, _, body = call(base, "POST", "/ojs/v1/jobs", {**job, "retry": "often"})
    assert status == 400 and body["error"]["details"]["field"] == "retry"
    both = {**job, "options": {"retry": {"max_attempts": 2}}}
    assert call(base, "POST", "/ojs/v1/jobs", both)[2]["job"]["max_attempts"] == 2


def test_a_cron_deleted_and_registered_again_is_enabled(ojs_server: str) -> None:
    cron = {
        "name": "again",
        "expression": "* * * * *",
        "job_template": {"type": "c.again", "args": []},
    }
    assert call(ojs_server, "POST", "/ojs/v1/cron", cron)[0] == 201
    assert call(ojs_server, "DELETE", "/ojs/v1/cron/again")[2]["cron"]["enabled"] is False
    status, _, body = call(ojs_server, "POST", "/ojs/v1/cron", cron)
    assert status == 201 and body["cron"]["enabled"] is True and body["cron"]["next_run_at"]


def test_a_paused_queue_is_skipped_by_the_projects_own_workers(ojs_server: str) -> None:
    trigger("test-noop", {}, queue="held")
    trigger("test-noop", {}, queue="free")
    assert call(ojs_server, "POST", "/ojs/v1/queues/held/pause", {})[2]["queue"]["paused"] is True
    queue_states.forget()  # another process's pause: seen within CACHE_SECS
    for queues in ([], ["held"], ["held", "free"]):
        started = claim_and_start("w-1", queues=queues, limit=10)
        assert {JobRun.objects.get(pk=r.id).queue for r in started} <= {"free"}, queues
    assert JobRun.objects.get(queue="held").status == "queued"
    assert call(ojs_server, "POST", "/ojs/v1/queues/held/resume", {})[2]["queue"]["paused"] is False
    assert [r.id for r in claim_and_start("w-1", queues=[], limit=10)]
    assert QueueState.objects.get(name="held").paused_at is None


def test_queue_names_and_unique_policies_are_checked(base: str) -> None:
    status, _, body = call(base, "GET", "/ojs/v1/queues/Bad Name/stats".replace(" ", "%20"))
    assert status == 400 and body["error"]["details"]["field"] == "name"
    for unique, field in [({"keys": ["argz"]}, "options.unique.keys"),
                          ({"on_conflict": "merge"}, "options.unique.on_conflict"),
                          ({"states": ["done"]}, "options.unique.states"),
                          ({"keys": ["meta"]}, "options.unique.meta_keys"),
                          ({"period": "soon"}, "options.unique.period"),
                          ("yes", "options.unique")]:  # fmt: skip
        job = {"type": "u.bad", "args": [], "options": {"unique": unique}}
        status, _, body = call(base, "POST", "/ojs/v1/jobs", job)
        assert (status, body["error"]["details"]["field"]) == (400, field), unique
    bad = {"type": "r.bad", "args": [], "options": {"rate_limit": {"max_per_second": 0}}}
    status, _, body = call(base, "POST", "/ojs/v1/jobs", bad)
    assert (status, body["error"]["details"]["field"]) == (400, "options.rate_limit.max_per_second")


def test_replace_keeps_an_active_job_and_ignore_answers_200(base: str) -> None:
    unique = {"keys": ["type"], "on_conflict": "replace"}
    job = {"type": "u.active", "args": [1], "options": {"queue": "u", "unique": unique}}
    first = call(base, "POST", "/ojs/v1/jobs", job)[2]["job"]["id"]
    assert (
        call(base, "POST", "/ojs/v1/workers/fetch", {"queues": ["u"]})[2]["jobs"][0]["id"] == first
    )
    status, _, body = call(base, "POST", "/ojs/v1/jobs", job)
    assert status == 409 and body["error"]["details"]["existing_job_id"] == first
    ignored = {**job, "options": {"queue": "u", "unique": {**unique, "on_conflict": "ignore"}}}
    status, _, body = call(base, "POST", "/ojs/v1/jobs", ignored)
    assert (status, body["job"]["id"], body["deduplicated"]) == (200, first, True)
    assert JobRun.objects.filter(queue="u").count() == 1
    assert timezone.now()


def test_an_unforeseen_error_is_a_500_in_the_envelope_and_logged(
    ojs_settings, monkeypatch, caplog
) -> None:
    from django.test import Client

    from django_strait.ojs import work

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(work, "find", broken)
    response = Client(raise_request_exception=False).get(
        "/ojs/v1/jobs/01900000-0000-7000-8000-000000000001"
    )
    assert (response.status_code, response["Content-Type"]) == (500, TYPE)
    assert response.json()["error"]["code"] == "internal_error"
    assert "a bug" in caplog.text
