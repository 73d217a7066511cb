"""Process execution (docs/process-execution.md) with an in-process worker and real child processes.

The presets are tests/settings.py's: micro 160MB, small-1x 320MB, small-2x 480MB
(a child starts at about 60MB resident). Tests that need the worker as its own
process (cancel, kill -9) are in tests/e2e/test_process_execution.py.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from django.utils import timezone

from django_strait import signals, trigger
from django_strait.models import Job, JobPresetRecommendation, JobRun, RunAttempt
from django_strait.rules.states import Transition
from django_strait.services import syncing
from django_strait.storage import Record, Recorded
from django_strait.worker.metrics import WorkerMetrics
from django_strait.worker.process.pool import resident_bytes
from tests.process_helpers import strait_children

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def no_children_left() -> Iterator[None]:
    """Kill, by pid, any child process this test's worker left behind (also when it failed)."""
    yield
    left = strait_children(os.getpid())
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"child processes outlived the worker: {left}"


def open_pipes() -> int:
    """How many pipes this process holds open (the pool's three per child among them)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            pass
    return found


def attempts(run: JobRun) -> list[tuple]:
    return list(
        RunAttempt.objects.filter(run=run)
        .order_by("number")
        .values_list("number", "outcome", "preset", "error_type")
    )


def test_process__runs_the_handler_in_a_child_and_brings_the_result_back(burst):
    run = trigger("test-process-echo", {"hello": "world"})

    burst(processes=1)

    run.refresh_from_db()
    assert run.status == "completed"
    assert run.result["payload"] == {"hello": "world"}
    assert run.result["pid"] != os.getpid()
    assert attempts(run) == [(1, "succeeded", "micro", "")]


def test_process__oom_climbs_to_the_next_preset_without_spending_an_attempt(burst, listen):
    oom = listen(signals.run_oom)
    run = trigger("test-process-alloc", {"mb": 150, "hold": 1.0})  # max_attempts=1

    burst(processes=1)

    run.refresh_from_db()
    assert (run.status, run.attempt, run.preset) == ("completed", 2, "small-1x")
    assert run.result["held_mb"] == 150
    assert attempts(run) == [
        (1, "oom", "micro", "system.oom"),
        (2, "succeeded", "small-1x", ""),
    ]
    killed = RunAttempt.objects.get(run=run, number=1).error
    assert "over preset micro's 160MB" in killed
    rec = JobPresetRecommendation.objects.get(job__name="test-process-alloc")
    assert rec.preset == "small-1x"
    in_24h = timezone.now() + dt.timedelta(hours=24)
    assert in_24h - dt.timedelta(minutes=1) < rec.expires_at <= in_24h
    assert [(c["run_id"], c["preset"], c["next_preset"]) for c in oom.calls] == [
        (run.pk, "micro", "small-1x")
    ]

    # The job's next run starts where the last one ended up.
    small = trigger("test-process-alloc", {"mb": 1, "hold": 0})
    burst(processes=1)
    small.refresh_from_db()
    assert attempts(small) == [(1, "succeeded", "small-1x", "")]


def test_process__an_expired_recommendation_no_longer_raises_the_start(burst):
    job = syncing.synced_row("test-process-alloc")
    JobPresetRecommendation.objects.create(
        job=job, preset="small-2x", expires_at=timezone.now(), updated_at=timezone.now()
    )
    run = trigger("test-process-alloc", {"mb": 1, "hold": 0})

    burst(processes=1)

    assert attempts(run) == [(1, "succeeded", "micro", "")]


def test_process__oom_at_the_last_preset_dead_letters(burst, listen):
    oom = listen(signals.run_oom)
    run = trigger("test-process-alloc", {"mb": 600, "hold": 2.0})

    burst(processes=1)

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "system.oom")
    assert attempts(run) == [
        (1, "oom", "micro", "system.oom"),
        (2, "oom", "small-1x", "system.oom"),
        (3, "oom", "small-2x", "system.oom"),
    ]
    assert [c["next_preset"] for c in oom.calls] == ["small-1x", "small-2x", None]
    assert [c["status"] for c in oom.calls] == ["queued", "queued", "dead_letter"]
    assert JobPresetRecommendation.objects.get(job=run.job).preset == "small-2x"


def test_process__a_handler_past_its_timeout_is_killed_as_python_timeout(burst):
    run = trigger("test-process-spin", {})  # timeout 2 s, max_attempts 1

    began = time.monotonic()
    burst(processes=1)

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "python.timeout")
    # The handler's own time in its child (the clock starts when the child has the run).
    assert 2000 <= run.attempts.get().duration_ms < 3000
    assert time.monotonic() - began < 30
    assert attempts(run) == [(1, "timed_out", "micro", "python.timeout")]


def test_process__children_are_reused_then_recycled_after_process_max_runs(burst, settings):
    settings.STRAIT = {**settings.STRAIT, "PROCESS_MAX_RUNS": 2}
    runs = [trigger("test-process-echo", {"i": i}) for i in range(5)]
    pipes = open_pipes()

    burst(processes=1, concurrency=1)

    assert open_pipes() <= pipes  # every replaced child's pipes were closed

    pids = [JobRun.objects.get(pk=r.pk).result["pid"] for r in runs]
    # One child at a time, each running two runs before it is replaced.
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


def test_process__a_job_row_with_an_unknown_preset_is_held_and_others_run(burst):
    good = trigger("test-process-echo", {})
    bad = trigger("test-process-alloc", {"mb": 1, "hold": 0})
    Job.objects.filter(name="test-process-alloc").update(preset="huge")  # around validation

    burst(processes=1)

    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.status == "completed"
    assert (bad.status, bad.error_type) == ("queued", "job.invalid")
    assert "'huge' is not a preset; allowed: micro, small-1x, small-2x" in bad.last_error


def test_process__resident_bytes_reads_a_live_process():
    assert resident_bytes(os.getpid()) > 10 * 2**20
    assert resident_bytes(2**22 + 12345) is None


def test_process__a_handler_dying_of_memory_error_is_an_oom_and_climbs(burst):
    run = trigger("test-process-memory-error", {})

    burst(processes=1)

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "system.oom")
    assert [a[:3] for a in attempts(run)] == [
        (1, "oom", "micro"),
        (2, "oom", "small-1x"),
        (3, "oom", "small-2x"),
    ]
    assert "cannot allocate 8 GB" in run.last_error


def test_process__runs_a_coroutine_handler_in_the_child(burst):
    run = trigger("test-process-async", {})

    burst(processes=1)

    run.refresh_from_db()
    assert run.status == "completed"
    assert run.result["async"] is True and run.result["pid"] != os.getpid()


def test_worker_metrics__count_oom_kills_by_job_and_preset():
    now = timezone.now()
    oom = Record(1, 1, Transition.RETRY, now, now, 5, "oom", preset="micro", job="crunch")
    ok = Record(2, 1, Transition.COMPLETE, now, now, 5, "succeeded", preset="micro", job="crunch")
    metrics = WorkerMetrics()

    metrics.observe_recorded(
        [oom, ok], Recorded(moved={1: "queued", 2: "completed"}), {1: "crunch", 2: "crunch"}
    )

    value = metrics.registry.get_sample_value
    assert value("strait_worker_oom_kills_total", {"job": "crunch", "preset": "micro"}) == 1
    assert value("strait_worker_oom_kills_total", {"job": "crunch", "preset": "small-1x"}) is None


def test_process__a_timeout_kills_what_the_handler_started_too(burst, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    run = trigger("test-process-grandchild", {"pidfile": str(pidfile)})

    burst(processes=1)

    run.refresh_from_db()
    assert run.error_type == "python.timeout"
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(grandchild)
    finally:
        if _alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.fixture
def escapes(tmp_path) -> Iterator[Callable[[int], list[int]]]:
    """``escapes(attempt)``: the pids of the two processes ``test-process-escapes`` started
    in that attempt, one in a session of its own and one orphaned (setsid). Any still
    alive at the end is killed, by pid (also when the test failed)."""
    seen: list[int] = []

    def pids(attempt: int = 1) -> list[int]:
        found = [int(p) for p in (tmp_path / f"escapes.{attempt}").read_text().split()]
        seen.extend(found)
        return found

    yield pids
    for pid in seen:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def gone_soon(pids: list[int], within: float = 5.0) -> list[int]:
    """Return the pids of ``pids`` still alive ``within`` seconds from now (dead: at once)."""
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_process__a_timeout_kills_processes_that_left_the_childs_group(burst, tmp_path, escapes):
    run = trigger("test-process-escapes", {"pidfile": str(tmp_path / "escapes")})

    burst(processes=1)

    run.refresh_from_db()
    assert run.error_type == "python.timeout"
    assert gone_soon(escapes(1)) == []


def test_process__an_oom_kill_kills_processes_that_left_the_childs_group(burst, tmp_path, escapes):
    # 200MB is over micro's 160MB; at small-1x (320MB) the second attempt runs to its timeout.
    run = trigger("test-process-escapes", {"pidfile": str(tmp_path / "escapes"), "mb": 200})

    burst(processes=1)

    assert attempts(run)[0][1:] == ("oom", "micro", "system.oom")
    assert gone_soon(escapes(1) + escapes(2)) == []


def test_process__what_a_run_leaves_running_is_killed_when_it_returns(burst, tmp_path, escapes):
    run = trigger("test-process-escapes", {"pidfile": str(tmp_path / "escapes"), "leave": True})

    burst(processes=1)

    run.refresh_from_db()
    assert (run.status, run.result) == ("completed", "left them running")
    assert gone_soon(escapes(1), within=0) == []  # killed before the result was sent
