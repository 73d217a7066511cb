"""Graceful shutdown of a real worker process with runs in flight."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from django_strait import trigger_many
from django_strait.models import Job, JobRun
from tests.conftest import ROOT, Reply, worker_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def slow_route(seconds: float, started: threading.Semaphore):
    def answer(_request):
        started.release()
        time.sleep(seconds)
        return Reply(200, b'{"done": true}')

    return answer


def start_worker(env, *args):
    return subprocess.Popen(
        worker_command("--worker-id", "stopper", *args),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_started(started: threading.Semaphore, n: int) -> None:
    for _ in range(n):
        assert started.acquire(timeout=60), "the worker did not start the runs"


def test_sigterm__finishes_runs_in_flight_records_them_and_exits_0(http_server, worker_env):
    started = threading.Semaphore(0)
    http_server.routes["/slow"] = slow_route(1.5, started)
    Job.objects.create(name="slow", endpoint_url=http_server.url("/slow"), timeout_secs=30)
    runs = trigger_many("slow", [{"i": i} for i in range(4)])
    worker = start_worker(worker_env, "--concurrency", "4")
    wait_started(started, 4)

    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=60)[0]

    assert worker.returncode == 0, output
    statuses = Counter(
        JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    )
    assert statuses == {"completed": 4}
    assert not JobRun.objects.filter(status__in=["dequeued", "executing"]).exists()
    assert "SIGTERM received" in output


def test_sigterm__leaves_queued_runs_queued_for_the_next_worker(http_server, worker_env):
    started = threading.Semaphore(0)
    http_server.routes["/slow"] = slow_route(1.0, started)
    Job.objects.create(name="slow", endpoint_url=http_server.url("/slow"), timeout_secs=30)
    trigger_many("slow", [{"i": i} for i in range(6)])
    worker = start_worker(worker_env, "--concurrency", "2", "--batch-size", "2")
    wait_started(started, 2)

    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=60)

    assert worker.returncode == 0
    statuses = Counter(JobRun.objects.values_list("status", flat=True))
    assert statuses["completed"] >= 2 and statuses["completed"] + statuses["queued"] == 6
    assert not JobRun.objects.filter(status__in=["dequeued", "executing"]).exists()
    assert set(JobRun.objects.filter(status="queued").values_list("attempt", flat=True)) <= {0}


def test_second_signal__exits_at_once_leaving_runs_to_the_reaper(http_server, worker_env):
    started = threading.Semaphore(0)
    http_server.routes["/slow"] = slow_route(20, started)
    Job.objects.create(name="slow", endpoint_url=http_server.url("/slow"), timeout_secs=60)
    trigger_many("slow", [{}])
    worker = start_worker(worker_env)
    wait_started(started, 1)

    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=10)[0]

    assert worker.returncode != 0, output
    assert list(JobRun.objects.values_list("status", flat=True)) == ["executing"]
