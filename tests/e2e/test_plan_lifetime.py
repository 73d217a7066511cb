"""Two workers drain across many plan lifetimes, and no record is refused for it.

A worker drops its prepared statements every ``PLAN_LIFETIME`` (docs/settings.md,
"Prepared statements"). The site that saw records refused with ``prepared statement
"_pg3_N" does not exist`` ran two workers with a process job among its jobs and the
reaper and pruner on short intervals, and its runs came in waves: between waves the
record thread still drops (before heartbeats and the process watch's reads), finding
nothing prepared. Each cycle here does that: a process run holds a child while the
queue is quiet, then runs come one at a time (records of one run, which a refused
write turns into a ``worker.record_failed`` attempt), then a bulk of runs.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import QuerySet

from django_strait import trigger, trigger_many
from django_strait.models import JobRun, RunAttempt
from tests.conftest import ROOT, worker_command

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: The workers' plan lifetime here, in seconds: short, so that a drain spans many.
LIFETIME = 0.25
#: Per cycle: a quiet spell with a process run held, runs one at a time, a bulk.
CYCLES = 10
QUIET = 6 * LIFETIME
TRICKLE = 30
TRICKLE_GAP = 0.03
BULK = 2000
#: Long enough for two cold workers to drain what is left on a loaded machine.
DRAIN_TIMEOUT = 180


def start_workers(started: list[subprocess.Popen], env: dict[str, str], logs: Path) -> None:
    for name in ("a", "b"):
        with open(logs / f"{name}.log", "w") as out:
            started.append(
                subprocess.Popen(
                    worker_command("--worker-id", name, "--concurrency", "8", "--processes", "1"),
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )


def refused() -> QuerySet[RunAttempt]:
    return RunAttempt.objects.filter(error_type="worker.record_failed")


def left() -> int:
    return JobRun.objects.exclude(status="completed").count()


def drained(workers: list[subprocess.Popen], logs: Path) -> None:
    """Wait until every run so far is completed (fail, with the workers' output, past the timeout)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while left():
        # A refused record waits a minute to retry: fail at once, not a minute later.
        if (
            time.monotonic() > deadline
            or refused().exists()
            or any(w.poll() is not None for w in workers)
        ):
            output = "\n".join(p.read_text()[-3000:] for p in sorted(logs.glob("*.log")))
            pytest.fail(f"{left()} runs not completed, {refused().count()} records refused; "
                        f"exit codes {[w.poll() for w in workers]}\n{output}")  # fmt: skip
        time.sleep(0.05)


def test_drain_across_plan_lifetimes__no_record_is_refused(worker_env, started, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    env = {
        **worker_env,
        "STRAIT_PLAN_LIFETIME": f"{LIFETIME}s",
        "STRAIT_REAPER_INTERVAL": "1s",
        "STRAIT_PRUNE_INTERVAL": "2s",
    }
    start_workers(started, env, tmp_path)
    trigger("test-noop", {"first": True})
    drained(started, tmp_path)  # both cold starts behind
    began = time.monotonic()
    for cycle in range(CYCLES):
        drained(started, tmp_path)
        trigger("test-process-alloc", {"mb": 1, "hold": QUIET})
        time.sleep(QUIET)
        for i in range(TRICKLE):
            trigger("test-noop", {"cycle": cycle, "i": i})
            time.sleep(TRICKLE_GAP)
        trigger_many("test-noop", [{"cycle": cycle, "bulk": i} for i in range(BULK)])
    drained(started, tmp_path)
    took = time.monotonic() - began
    print(f"{JobRun.objects.count()} runs in {took:.1f} s: {took / LIFETIME:.0f} plan lifetimes")
    for proc in started:
        proc.terminate()
        proc.wait(timeout=60)
    output = "\n".join((tmp_path / f"{n}.log").read_text() for n in ("a", "b"))

    assert JobRun.objects.count() == 1 + CYCLES * (1 + TRICKLE + BULK)
    assert took > 4 * LIFETIME
    assert list(refused().values_list("run_id", "error")) == []
    assert "does not exist" not in output
