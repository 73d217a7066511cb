"""LISTEN/NOTIFY: an idle worker starts a new run without waiting for its poll."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from django.db import connection

from django_strait import transitions, trigger
from django_strait.models import JobRun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def idle_worker():
    """A worker in a thread that would poll only once an hour."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite workers poll")
    from django_strait.management.commands.run_strait_worker import build_config
    from django_strait.worker.engine import Worker

    config = replace(build_config({"worker_id": "idle"}), poll_interval=3600.0, duties=False)
    worker = Worker(config)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    # Wait until it is idle (its first empty claim is behind it and it listens).
    time.sleep(1.0)
    yield worker
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()


def wait_for(pk: int, status: str, timeout: float = 30.0) -> JobRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = JobRun.objects.get(pk=pk)
        if run.status == status:
            return run
        time.sleep(0.02)
    raise AssertionError(f"run {pk} is {run.status}, not {status}, after {timeout}s")


def test_trigger__wakes_an_idle_worker_that_would_otherwise_poll_in_an_hour(idle_worker):
    run = trigger("test-noop", {})

    assert wait_for(run.pk, "completed").attempt == 1


def test_trigger_many__wakes_an_idle_worker_too(idle_worker):
    from django_strait import trigger_many

    runs = trigger_many("test-noop", [{}, {}])

    for run in runs:
        wait_for(run.pk, "completed")


def test_replay__wakes_an_idle_worker(idle_worker):
    run = trigger("test-actions", {"action": "dead_letter"})
    wait_for(run.pk, "dead_letter")

    transitions.replay(run.pk, by="tester")

    deadline = time.monotonic() + 30
    while JobRun.objects.get(pk=run.pk).attempt < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    again = JobRun.objects.get(pk=run.pk)
    assert (again.attempt, again.replayed_by) == (2, "tester")
