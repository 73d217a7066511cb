"""An external OJS worker process (plain Python HTTP) against a live server on 127.0.0.1.

Enqueue over HTTP; the worker fetches, heartbeats, acks and nacks from its own
process; kill -9 it mid-job and the visibility timeout requeues the run through
the reaper of a real Strait worker process, which itself never claims the
external runs; the admin shows it all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest

from django_strait.api.auth import issue_key
from django_strait.models import JobRun, RunAttempt
from tests.conftest import ROOT
from tests.e2e.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: A cold process start, a visibility timeout (5 s) and the reaper's round (0.5 s), with room.
TIMEOUT = 60


def ojs(base: str, key: str, path: str, body: Any = None, method: str = "POST") -> Any:
    """One OJS request with the API key, as a client service would send it."""
    req = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/openjobspec+json", "Authorization": f"Bearer {key}"},
        method=method,
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"] == "application/openjobspec+json"
        return json.loads(resp.read())


def start_external(
    started: list, env: dict, base: str, key: str, worker_id: str
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.ojs.external_worker", "--url", base, "--key", key,
         "--worker-id", worker_id, "--queue", "ext", "--visibility-ms", "5000"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    started.append(proc)
    return proc


def run_of(job_id: str) -> JobRun:
    return JobRun.objects.get(ojs_id=job_id)


def test_external_worker__acks_nacks_and_is_rescued_after_kill_9(
    live_server, worker_env, started, wait_until, admin_client
):
    base = f"http://127.0.0.1:{urlsplit(live_server.url).port}"
    _, key = issue_key("ext worker", ["jobs:trigger", "runs:read", "runs:write"])
    # A Strait worker with a quick reaper: it must rescue, and never claim, external runs.
    strait = start_worker(
        started, {**worker_env, "STRAIT_REAPER_INTERVAL": "0.5s"}, "--worker-id", "strait-1"
    )
    ok = ojs(
        base,
        key,
        "/ojs/v1/jobs",
        {
            "type": "ext.double",
            "args": [{"action": "ok", "value": 21, "work_secs": 6}],
            "options": {"queue": "ext"},
        },
    )["job"]
    bad = ojs(
        base,
        key,
        "/ojs/v1/jobs",
        {
            "type": "ext.double",
            "args": [{"action": "fail"}],
            "options": {
                "queue": "ext",
                "retry": {"max_attempts": 1, "on_exhaustion": "dead_letter"},
            },
        },
    )["job"]
    hung = ojs(base, key, "/ojs/v1/jobs", {"type": "ext.double", "args": [{"action": "hang"}], "options": {"queue": "ext"}})["job"]  # fmt: skip

    first = start_external(started, worker_env, base, key, "ext-1")
    wait_until(
        lambda: run_of(hung["id"]).status == "executing",
        timeout=TIMEOUT,
        why=lambda: (
            f"runs: {[(r.ojs_id, r.status) for r in JobRun.objects.all()]}; worker exit {first.poll()}"
        ),
    )
    os.kill(first.pid, signal.SIGKILL)
    output = first.communicate(timeout=30)[0]

    done = ojs(base, key, f"/ojs/v1/jobs/{ok['id']}", method="GET")["job"]
    assert (done["state"], done["result"], done["attempt"]) == ("completed", {"doubled": 42}, 1)
    failed = ojs(base, key, f"/ojs/v1/jobs/{bad['id']}", method="GET")["job"]
    assert failed["state"] == "discarded" and failed["errors"][0]["message"] == "asked to fail"
    assert run_of(bad["id"]).status == "dead_letter"
    assert f'"ended": "{ok["id"]}"' in output
    # It ran on heartbeats (1 s apart, 5 s of visibility): no rescue while the worker lived.
    assert not RunAttempt.objects.filter(run=run_of(ok["id"]), outcome="system_failed").exists()

    wait_until(
        lambda: run_of(hung["id"]).status == "queued",
        timeout=TIMEOUT,
        why=lambda: f"hung run is {run_of(hung['id']).status}; strait worker exit {strait.poll()}",
    )
    lost = RunAttempt.objects.get(run=run_of(hung["id"]), number=1)
    assert (lost.outcome, lost.error_type, lost.worker) == (
        "system_failed",
        "worker.lost",
        "ojs:ext-1",
    )
    assert "visibility deadline" in lost.error
    requeued = ojs(base, key, f"/ojs/v1/jobs/{hung['id']}", method="GET")["job"]
    assert (requeued["state"], requeued["attempt"]) == ("available", 1)

    # The project's own worker ran alongside the whole time and never claimed one of them.
    assert not RunAttempt.objects.filter(worker="strait-1").exists()
    assert set(RunAttempt.objects.values_list("worker", flat=True)) == {"ojs:ext-1"}

    page = admin_client.get(f"/admin/django_strait/jobrun/{run_of(hung['id']).pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert hung["id"] in text and "ojs:ext-1" in text and "visibility deadline" in text
    listed = admin_client.get("/admin/django_strait/jobrun/", {"q": bad["id"]}).content.decode()
    assert "ext.double" in listed and "Dead letter" in listed
