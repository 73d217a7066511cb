"""Workers behind PgBouncer in transaction mode: the two-alias setup, and LISTEN through the pooler.

The worker's database (``default``) goes through a real PgBouncer that the test
starts on 127.0.0.1; in the two-alias setup ``STRAIT["LISTEN_DATABASE"]`` names a
direct alias. Wake-ups arrive, and a kill -9 loses no run and runs none twice at
once. Without the direct alias the worker finds that its LISTEN does not hold,
says so once, and polls.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter

import pytest
from django.db import connection

from django_strait import trigger, trigger_many
from django_strait.models import Job, JobRun, RunAttempt
from tests.conftest import Received, Reply
from tests.e2e.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

#: A cold worker start, and a drain of a few hundred short runs by two workers.
START_TIMEOUT = 60
DRAIN_TIMEOUT = 120
#: Far longer than any wait below: a run started within them was woken, not polled.
NEVER = "3600"
LISTEN_ERROR = "does not hold"


def pooled_env(worker_env: dict[str, str], pgbouncer, *, direct: bool) -> dict[str, str]:
    """A worker whose ``default`` goes through ``pgbouncer``; ``direct``: LISTEN on a direct alias."""
    env = {
        **worker_env,
        "DJANGO_SETTINGS_MODULE": "tests.pooled_settings",
        "DATABASE_URL": pgbouncer.url(connection.settings_dict["NAME"]),
    }
    if direct:
        env["STRAIT_TEST_DIRECT_DATABASE_URL"] = worker_env["DATABASE_URL"]
        env["STRAIT_LISTEN_DATABASE"] = "direct"
    return env


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    return output


def stop_now(proc: subprocess.Popen) -> str:
    """Kill ``proc`` and return what it printed (to say why a test waited in vain)."""
    proc.kill()
    return proc.communicate(timeout=30)[0]


def statuses() -> Counter:
    return Counter(JobRun.objects.values_list("status", flat=True))


def test_two_aliases__an_idle_worker_wakes_at_a_trigger(worker_env, pgbouncer, started, wait_until):
    env = {**pooled_env(worker_env, pgbouncer, direct=True), "STRAIT_POLL_INTERVAL": NEVER}
    worker = start_worker(started, env, "--worker-id", "pooled", "--concurrency", "4")
    warm = trigger("test-noop", {})  # found by the worker's first claim, whenever it starts
    wait_until(
        lambda: JobRun.objects.get(pk=warm.pk).status == "completed",
        timeout=START_TIMEOUT,
        why=lambda: f"warm-up run is {JobRun.objects.get(pk=warm.pk).status}; exit {worker.poll()}",
    )
    waits_ms = []
    for _ in range(10):
        time.sleep(0.2)  # idle: its claim loop waits for a wake-up or the hour's poll
        run = trigger("test-noop", {})
        wait_until(
            lambda run=run: JobRun.objects.get(pk=run.pk).started_at is not None,
            timeout=10,
            why=lambda run=run: f"run {run.pk} not started, no wake-up came: {stop_now(worker)}",
        )
        run.refresh_from_db()
        waits_ms.append((run.started_at - run.created_at).total_seconds() * 1000)
    output = stop(worker)

    assert "listening for new runs on 'direct'" in output
    assert LISTEN_ERROR not in output
    assert statuses() == {"completed": 11}
    # A figure for the reader (tests assert no timing): trigger to start through the pooler.
    print(f"pooled wake-up, trigger -> started_at: median {statistics.median(waits_ms):.1f} ms")


class InFlight:
    """An endpoint that counts how many calls of each run are in flight at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: Counter = Counter()
        self.most: Counter = Counter()
        self.calls: Counter = Counter()

    def __call__(self, request: Received) -> Reply:
        run_id = request.json["run_id"]
        with self._lock:
            self.now[run_id] += 1
            self.calls[run_id] += 1
            self.most[run_id] = max(self.most[run_id], self.now[run_id])
        try:
            time.sleep(0.05)
        finally:
            with self._lock:
                self.now[run_id] -= 1
        return Reply()


def test_two_aliases__kill_9_of_a_worker_loses_no_run_and_runs_none_twice_at_once(
    worker_env, pgbouncer, started, wait_until, http_server
):
    endpoint = InFlight()
    http_server.routes["/work"] = endpoint
    Job.objects.create(
        name="pooled",
        endpoint_url=http_server.url("/work"),
        timeout_secs=30,
        max_attempts=5,
        retry_initial_delay_secs=1,
        retry_jitter=0,
    )
    runs = {run.pk for run in trigger_many("pooled", [{"i": i} for i in range(300)])}
    env = {
        **pooled_env(worker_env, pgbouncer, direct=True),
        "STRAIT_STALE_AFTER": "2s",
        "STRAIT_REAPER_INTERVAL": "1s",
    }
    doomed = start_worker(started, env, "--worker-id", "doomed", "--concurrency", "10")
    rescuer = start_worker(started, env, "--worker-id", "rescuer", "--concurrency", "10")
    wait_until(
        lambda: statuses()["completed"] >= 60,
        timeout=START_TIMEOUT,
        why=lambda: f"runs are {dict(statuses())}; exits {doomed.poll()}, {rescuer.poll()}",
    )
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=30)
    wait_until(
        lambda: statuses() == {"completed": len(runs)},
        timeout=DRAIN_TIMEOUT,
        why=lambda: f"runs are {dict(statuses())}; rescuer exit {rescuer.poll()}",
    )
    output = stop(rescuer)

    assert "listening for new runs on 'direct'" in output and LISTEN_ERROR not in output
    assert set(endpoint.calls) == runs  # every run reached its endpoint
    assert set(endpoint.most.values()) == {1}, "a run was executing twice at once"
    attempts: dict[int, list] = {}
    for run_id, outcome, began, ended in RunAttempt.objects.values_list(
        "run_id", "outcome", "started_at", "finished_at"
    ).order_by("run_id", "number"):
        attempts.setdefault(run_id, []).append((outcome, began, ended))
    for run_id, rows in attempts.items():
        assert [o for o, _, _ in rows].count("succeeded") == 1, (run_id, rows)
        spans = [(b, e) for _, b, e in rows if b is not None]
        assert all(e1 <= b2 for (_, e1), (b2, _) in zip(spans, spans[1:], strict=False)), rows
    lost = [r for r in attempts.values() if any(o == "system_failed" for o, _, _ in r)]
    print(f"kill -9 through the pooler: {len(lost)} runs rescued from the killed worker")


def test_listen_through_the_pooler__logs_one_error_and_polls(
    worker_env, pgbouncer, started, wait_until
):
    env = pooled_env(worker_env, pgbouncer, direct=False)
    worker = start_worker(started, env, "--worker-id", "pooled", "--concurrency", "4")
    first = trigger_many("test-noop", [{} for _ in range(5)])
    wait_until(
        lambda: statuses() == {"completed": 5},
        timeout=START_TIMEOUT,
        why=lambda: f"runs are {dict(statuses())}; exit {worker.poll()}",
    )
    time.sleep(2)  # idle for two polls: runs triggered now are found by polling
    later = trigger_many("test-noop", [{} for _ in range(5)])
    wait_until(
        lambda: statuses() == {"completed": len(first) + len(later)},
        timeout=30,
        why=lambda: f"runs are {dict(statuses())}; exit {worker.poll()}",
    )
    output = stop(worker)

    assert output.count(LISTEN_ERROR) == 1, output
    assert 'STRAIT["LISTEN_DATABASE"]' in output
    assert "listening for new runs" not in output


def test_through_pooler__tells_a_pooled_session_from_a_direct_one(pgbouncer):
    # How the worker knows not to prepare its statements, and that a LISTEN will not hold.
    import psycopg

    from django_strait.storage.sql import through_pooler

    name = connection.settings_dict["NAME"]
    with psycopg.connect(pgbouncer.url(name), autocommit=True) as pooled:
        assert through_pooler(pooled)
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as direct:
        assert not through_pooler(direct)
