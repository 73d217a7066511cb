"""The OJS fast door (``django_strait.ojs.lean``) over HTTP: its checks, its long poll, its
acks of runs it fetched, and what it hands to Django. The conformance cases of levels 0
and 1 run through it too (test_conformance.py), and the fuzz (tests/security)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any

import pytest

from django_strait.api.auth import issue_key, revoke_key
from django_strait.models import JobRun
from django_strait.ojs import lean
from django_strait.rules.states import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

OJS = "application/openjobspec+json"


def ask(
    base: str, method: str, path: str, body: Any = None, key: str = ""
) -> tuple[int, Any, dict]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": OJS, **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        conn.request(method, path, None if body is None else json.dumps(body).encode(), headers)
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None, dict(response.getheaders())
    finally:
        conn.close()


def enqueue(base: str, queue: str = "default", key: str = "") -> str:
    status, body, _ = ask(base, "POST", "/ojs/v1/jobs",
                          {"type": "mail.send", "args": [1], "options": {"queue": queue}}, key)  # fmt: skip
    assert status == 201, body
    return body["job"]["id"]


def fetch(base: str, worker: str = "w1", key: str = "", **more: Any) -> tuple[int, Any, dict]:
    return ask(base, "POST", "/ojs/v1/workers/fetch", {"queues": ["default"], "worker_id": worker,
                                                         **more}, key)  # fmt: skip


@pytest.fixture
def keys_required(settings, lean_server) -> str:
    settings.STRAIT = {**settings.STRAIT, "OJS_REQUIRE_AUTH": True, "API_THROTTLE_RATE": None}
    return lean_server


def test_fast_door__fetch_and_ack_in_the_ojs_shape(lean_server):
    job_id = enqueue(lean_server)

    status, fetched, headers = fetch(lean_server)
    acked = ask(lean_server, "POST", "/ojs/v1/workers/ack",
                {"job_id": job_id, "result": {"n": 1}, "worker_id": "w1"})  # fmt: skip

    assert status == 200 and headers["content-type"] == OJS and headers["ojs-version"] == "1.0"
    assert [j["id"] for j in fetched["jobs"]] == [job_id]
    assert fetched["jobs"][0]["state"] == "active" and fetched["jobs"][0]["attempt"] == 1
    assert acked[0] == 200 and acked[1]["state"] == "completed", acked
    run = JobRun.objects.get(ojs_id=job_id)
    assert (run.status, run.result, run.attempts.count()) == (RunStatus.COMPLETED, {"n": 1}, 1)


def test_fast_door__keys_scopes_and_queues_as_the_views(keys_required):
    base = keys_required
    _, writer = issue_key("w", ["runs:write"])
    _, trigger_only = issue_key("t", ["jobs:trigger"])
    _, billing = issue_key("b", ["runs:write"], queues=["billing"])

    none = fetch(base)
    lacking = fetch(base, key=trigger_only)
    outside = fetch(base, key=billing)
    allowed = fetch(base, key=writer)

    assert none[0] == 401 and none[1]["error"]["code"] == "unauthorized"
    assert none[2]["www-authenticate"] == "Bearer"
    assert lacking[0] == 403 and "runs:write" in lacking[1]["error"]["message"]
    assert outside[0] == 403 and outside[1]["error"]["details"]["field"] == "queues[0]"
    assert (allowed[0], allowed[1]) == (200, {"jobs": []})


def test_fast_door__a_revoked_key_is_refused_within_the_ttl(keys_required):
    row, key = issue_key("w", ["runs:write"])
    assert fetch(keys_required, key=key)[0] == 200

    revoke_key(row.prefix)
    time.sleep(lean.KEY_TTL + 0.1)

    assert fetch(keys_required, key=key)[0] == 401


def test_fast_door__bad_fields_and_bodies_are_4xx_naming_them(lean_server):
    bad_count = fetch(lean_server, count=0)
    bad_wait = fetch(lean_server, wait_ms=lean.MAX_WAIT_MS + 1)
    nul_query = ask(lean_server, "POST", "/ojs/v1/workers/fetch?a=%00", {"queues": ["default"]})
    not_json = ask(lean_server, "POST", "/ojs/v1/workers/ack", None)

    assert bad_count[0] == 400 and bad_count[1]["error"]["details"]["field"] == "count"
    assert bad_wait[0] == 400 and bad_wait[1]["error"]["details"]["field"] == "wait_ms"
    assert nul_query[0] == 400 and nul_query[1]["error"]["details"]["field"] == "a"
    assert not_json[0] == 400 and not_json[1]["error"]["code"] == "invalid_payload"


def test_fast_door__a_fetch_waits_for_work_without_spinning(lean_server):
    empty_started = time.monotonic()
    empty = fetch(lean_server, wait_ms=500)
    waited = time.monotonic() - empty_started
    later = threading.Timer(0.5, enqueue, args=(lean_server,))
    later.start()
    started = time.monotonic()
    found = fetch(lean_server, wait_ms=10_000)
    took = time.monotonic() - started
    later.join()

    assert empty[1] == {"jobs": []} and waited >= 0.5
    assert len(found[1]["jobs"]) == 1 and 0.4 <= took < 5, took


def test_fast_door__an_ack_after_a_cancel_or_another_fetch_is_409(lean_server):
    canceled = enqueue(lean_server)
    fetch(lean_server)
    ask(lean_server, "DELETE", f"/ojs/v1/jobs/{canceled}")
    taken = enqueue(lean_server)
    fetch(lean_server, worker="a", visibility_timeout_ms=1)
    JobRun.objects.filter(ojs_id=taken).update(status=RunStatus.QUEUED, claimed_by="")  # requeued
    assert fetch(lean_server, worker="b")[1]["jobs"][0]["attempt"] == 2

    late = ask(lean_server, "POST", "/ojs/v1/workers/ack", {"job_id": canceled, "result": None})
    stale = ask(lean_server, "POST", "/ojs/v1/workers/ack",
                {"job_id": taken, "result": None, "worker_id": "a"})  # fmt: skip
    holder = ask(lean_server, "POST", "/ojs/v1/workers/ack",
                 {"job_id": taken, "result": "b's", "worker_id": "b"})  # fmt: skip

    assert late[0] == 409 and late[1]["error"]["details"]["state"] == "cancelled"
    assert stale[0] == 409 and stale[1]["error"]["details"]["attempt"] == 2
    assert holder[0] == 200 and JobRun.objects.get(ojs_id=taken).result == "b's"


def test_fast_door__hands_other_requests_to_django(lean_server):
    health = ask(lean_server, "GET", "/ojs/v1/health")
    wrong_method = ask(lean_server, "GET", "/ojs/v1/workers/fetch")
    unknown = ask(lean_server, "POST", "/ojs/v1/nothing", {})

    assert health[0] == 200 and health[1]["status"] == "ok"
    assert wrong_method[0] == 405 and wrong_method[1]["error"]["code"] == "invalid_request"
    assert unknown[0] == 404 and unknown[1]["error"]["code"] == "not_found"


def test_fast_door__acks_of_several_workers_are_one_record_each_under_its_own(
    lean_server, monkeypatch
):

    from django_strait.ojs import hot
    from django_strait.transitions import external

    if not hot.usable():
        pytest.skip("the acks go together on PostgreSQL's fast path (ojs.hot)")
    ids = [enqueue(lean_server) for _ in range(4)]
    for i in range(4):
        assert len(fetch(lean_server, worker=f"w{i}")[1]["jobs"]) == 1
    by_worker = dict(JobRun.objects.values_list("claimed_by", "ojs_id"))
    # w3's job was taken from it meanwhile (requeued and fetched through another server):
    # its ack goes in the batch on what this process fetched, and the record refuses it.
    JobRun.objects.filter(ojs_id=by_worker["ojs:w3"]).update(claimed_by="ojs:other")
    batches: list[list[str]] = []
    real = external.finish_together

    def held_first(done):  # the first record waits until the three other acks wait for it
        batches.append([rec.worker for rec in done])
        deadline = time.monotonic() + 10
        while len(batches) == 1 and len(hot._acks._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        return real(done)

    monkeypatch.setattr(external, "finish_together", held_first)
    answers: dict[str, tuple] = {}

    def ack(i: int) -> None:
        job = str(by_worker[f"ojs:w{i}"])
        answers[f"w{i}"] = ask(lean_server, "POST", "/ojs/v1/workers/ack",
                               {"job_id": job, "result": i, "worker_id": f"w{i}"})  # fmt: skip

    threads = [threading.Thread(target=ack, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert sorted(len(b) for b in batches) == [1, 3], batches
    assert {w: a[0] for w, a in answers.items()} == {"w0": 200, "w1": 200, "w2": 200, "w3": 409}
    assert answers["w3"][1]["error"]["details"] == {
        "job_id": str(by_worker["ojs:w3"]), "state": "active", "attempt": 1
    }  # fmt: skip
    done = JobRun.objects.filter(ojs_id__in=ids, status=RunStatus.COMPLETED)
    assert {r.result: r.attempts.get().worker for r in done} == {0: "ojs:w0", 1: "ojs:w1",
                                                                  2: "ojs:w2"}  # fmt: skip
